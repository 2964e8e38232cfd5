/* The built-in K calibration text: prose, code, a chat turn and JSON, the
 * kinds of input redline serves, written for this purpose (about 300
 * tokens with a byte-level BPE).  The mean key it yields is a property of
 * each layer more than of the text (docs/KVQUANT.md measures it against a
 * held-out text), so it need not be long. */
#include "engine/kcal.h"

#include <stdlib.h>
#include <string.h>

static const char k_calib_text[] =
    "The river had been rising for three days before anyone in the valley thought to move the "
    "grain. By the time the mill owner sent his sons up to the loft, water was already pooling "
    "around the stones, and the old bridge groaned each time a branch struck its pillars. "
    "Nobody panicked; they had seen floods before, and they knew the work would be long.\n\n"
    "def merge_intervals(items):\n"
    "    \"\"\"Merge overlapping [start, end] pairs and return them sorted.\"\"\"\n"
    "    out = []\n"
    "    for start, end in sorted(items):\n"
    "        if out and start <= out[-1][1]:\n"
    "            out[-1][1] = max(out[-1][1], end)\n"
    "        else:\n"
    "            out.append([start, end])\n"
    "    return out\n\n"
    "User: Can you explain why my build fails with 'undefined reference to main'?\n"
    "Assistant: That error comes from the linker. It means no object file you passed defines "
    "a function called main, usually because the file containing it was left out of the "
    "command, or because you are building a library and forgot the -c or -shared flag.\n\n"
    "{\"id\": 4182, \"name\": \"Ada\", \"tags\": [\"math\", \"engines\"], \"active\": true, "
    "\"score\": 97.5, \"address\": {\"city\": \"London\", \"zip\": null}}\n\n"
    "Summary: heavy rain raised the river, the mill was emptied in time, and the bridge held.\n";

rl_status rl_kv_calibrate(rl_model *m, const rl_tokenizer *tok, rl_threadpool *tp, rl_err *err) {
    if (rl_model_k_calibrated(m)) return RL_OK;
    const char *env = getenv("RL_KV_KCAL"); /* "none": keep the bias shift (a measurement aid) */
    if (env && !strcmp(env, "none")) return RL_OK;
    int32_t *ids = NULL;
    size_t n = 0;
    rl_status st = rl_tokenizer_encode(tok, k_calib_text, strlen(k_calib_text), 0, &ids, &n, err);
    if (st) return st;
    const char *ks = getenv("RL_KV_KSCALE"); /* "none": shift only (a measurement aid) */
    st = rl_model_calibrate_k_shift(m, ids, (int32_t)n, !(ks && !strcmp(ks, "none")), tp, err);
    rl_free(ids);
    return st;
}
