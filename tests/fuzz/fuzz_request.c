/* libFuzzer target for the server's request-parsing path: any bytes as a
 * JSON body -> rl_oai_parse (chat or completion, picked by the first byte)
 * -> validated generation parameters.  When parsing succeeds, the result
 * must satisfy the invariants listed in server/oai_parse.h, the sampling
 * parameters must pass the engine's own validation, and chat messages must
 * render through the built-in chatml template.  Errors must produce valid
 * error JSON.  The parsing code is compiled in directly (src/server/ is not
 * part of librl.a). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "server/oai_parse.c"

#define N_VOCAB 49152
#define N_CTX   2048

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    rl_oai_kind kind = (data[0] & 1) ? RL_OAI_CHAT : RL_OAI_COMPLETION;
    rl_oai_limits lim;
    rl_oai_limits_default(&lim, N_VOCAB, N_CTX);
    rl_oai_req r;
    rl_oai_err e;
    if (!rl_oai_parse((const char *)data + 1, size - 1, kind, &lim, &r, &e)) {
        if (e.status < 400 || e.status > 599 || !e.message[0]) abort();
        char *j = rl_oai_err_json(&e);
        if (!j) abort();
        free(j);
        return 0;
    }
    if (r.n < 1 || r.n > lim.max_n || r.max_tokens < 0 || r.max_tokens > N_CTX) abort();
    rl_err err;
    if (rl_sample_params_validate(&r.gp.sample, N_VOCAB, &err) != RL_OK) abort();
    if (r.gp.n_stop < 0 || r.gp.n_stop > RL_MAX_STOP) abort();
    for (int i = 0; i < r.gp.n_stop; i++) {
        size_t l = strlen(r.gp.stop[i]);
        if (l == 0 || l > RL_MAX_STOP_LEN) abort();
    }
    if (kind == RL_OAI_CHAT) {
        if (r.n_msgs == 0 || !r.msgs) abort();
        char *out = NULL;
        size_t len = 0;
        const char *t = rl_template_builtin("chatml");
        if (rl_template_render(t, strlen(t), r.msgs, r.n_msgs, true, "", "", &out, &len, &err) ==
            RL_OK)
            rl_free(out);
    } else {
        if (!r.prompt && !r.prompt_ids) abort();
        for (int32_t i = 0; i < r.n_prompt_ids; i++)
            if (r.prompt_ids[i] < 0 || r.prompt_ids[i] >= N_VOCAB) abort();
    }
    rl_oai_req_free(&r);
    char norm[256];
    rl_oai_normalize_path((const char *)data + 1, norm, sizeof norm);
    return 0;
}
