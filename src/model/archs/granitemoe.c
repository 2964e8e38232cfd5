/* redline model: the granitemoe architecture (Granite 3.x MoE,
 * granite-3.1-1b-a400m / 3b-a800m).  The granite decoder (its four
 * multipliers and rope switch, rl__hparams_granite; optional Q/K/V biases)
 * with a routed FFN in every layer: expert_count experts of
 * feed_forward_length rows, softmax gating, top-k weights renormalised
 * (moe.c).  Granite's "MoE shared" variant
 * (expert_shared_feed_forward_length > 0) is refused: not supported yet. */
#include "model/model-impl.h"

static rl_status granitemoe_hparams(rl_model *m, rl_err *err) {
    rl_status st;
    int32_t sh;
    if ((st = rl__hparams_granite(m, err)) ||
        (st = rl__hparams_moe(m, true, false, RL__MOE_GATING_SOFTMAX, true, err)) ||
        (st = rl__hp_i32(m, "expert_shared_feed_forward_length", false, 0, 0, RL_MODEL_MAX_DIM, &sh,
                         err)))
        return st;
    if (sh > 0)
        return rl_err_set(err, RL_ERR_UNSUPPORTED,
                          "granitemoe.expert_shared_feed_forward_length = %d: the shared-expert "
                          "variant is not supported",
                          (int)sh);
    return RL_OK;
}

const rl__arch rl__arch_granitemoe = {
    .name = "granitemoe",
    .hparams = granitemoe_hparams,
    .bind_layer = rl__bind_layer_llama,
    .layer = rl__layer_prenorm,
};
