/* libFuzzer target for the chat-template interpreter.
 *
 * Input: template bytes.  If the input contains a 0x00 byte, the bytes
 * after the first one are used as the JSON context instead of the fixed
 * conversation (so the fuzzer can also explore odd message shapes).
 * Tight limits keep each run fast; any error status is fine, a crash,
 * leak or sanitizer report is not.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "chat/chat.h"

static const char CTX[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", "
    "\"content\": "
    "\"hi {{ }} \\u00e9\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
    "[{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}, {\"role\": \"tool\", "
    "\"content\": \"r\"}], \"tools\": [{\"type\": \"function\"}], \"add_generation_prompt\": true, "
    "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rl_template_limits lim;
    rl_template_limits_default(&lim);
    lim.max_steps = 20000;
    lim.max_output = 1 << 16;
    lim.max_memory = 8 << 20;
    const char *t = (const char *)data;
    size_t tlen = size;
    const char *ctx = CTX;
    size_t clen = sizeof CTX - 1;
    const void *nul = memchr(data, 0, size);
    if (nul) {
        tlen = (size_t)((const uint8_t *)nul - data);
        ctx = t + tlen + 1;
        clen = size - tlen - 1;
    }
    char *out = NULL;
    size_t out_len = 0;
    rl_err err;
    rl_status st = rl_template_render_json(t, tlen, ctx, clen, &lim, &out, &out_len, &err);
    if (st == RL_OK) {
        /* output is NUL-terminated at out_len */
        if (out[out_len] != 0) __builtin_trap();
        rl_free(out);
    } else if (out != NULL) {
        __builtin_trap();
    }
    return 0;
}
