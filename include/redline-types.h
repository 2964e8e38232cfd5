/* redline public value types, shared by the public API (redline.h) and the
 * library's own modules: status codes and error detail (src/base/), sampling
 * parameters (src/sample/) and chat messages (src/chat/).  They are defined
 * here, once, so that include/redline.h compiles with -Iinclude alone; the
 * internal headers base/base.h, sample/sample.h and chat/chat.h include this
 * file instead of defining them.
 *
 * Self-contained: only standard headers.  C11.
 */
#ifndef REDLINE_TYPES_H
#define REDLINE_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- status and errors (implemented in src/base/base.c) ---- */

/* Append-only, fixed values. */
typedef enum rl_status {
    RL_OK = 0,
    RL_ERR_IO = 1,          /* open/read/mmap failed */
    RL_ERR_FORMAT = 2,      /* malformed untrusted input */
    RL_ERR_NOMEM = 3,       /* allocation failed */
    RL_ERR_INVALID = 4,     /* bad argument or parameter */
    RL_ERR_UNSUPPORTED = 5, /* well-formed but not handled (type, arch) */
    RL_ERR_RANGE = 6,       /* value out of range (token id, context) */
    RL_ERR_LIMIT = 7,       /* a configured bound was exceeded */
    RL_ERR_NOT_FOUND = 8,   /* key, tensor or file absent */
} rl_status;

/* Error detail.  Caller-owned, usually on the stack.  `msg` is always
 * NUL-terminated; empty when code == RL_OK. */
typedef struct rl_err {
    rl_status code;
    char msg[512];
} rl_err;

/* Short name of a status ("ok", "io error", ...); static storage. */
const char *rl_status_str(rl_status s);

/* Frees memory the library allocated and handed to the caller (the token
 * arrays and strings of rl_tokenize, rl_detokenize, rl_chat_render, ...).
 * NULL is a no-op. */
void rl_free(void *p);

/* ---- sampling parameters (implemented in src/sample/sample.c) ---- */

typedef struct rl_logit_bias {
    int32_t id; /* 0 <= id < n_vocab */
    float bias; /* finite or -inf (ban); added to the logit; duplicates add up */
} rl_logit_bias;

/* Sampling parameters.  They usually come from an HTTP request: run
 * rl_sample_params_validate (rl_engine_submit does) before trusting them. */
typedef struct rl_sample_params {
    float temperature;               /* >= 0, finite; 0 = greedy */
    int32_t top_k;                   /* >= 0; 0 = off; > n_vocab behaves as n_vocab */
    float top_p;                     /* (0, 1]; 1 = off */
    float min_p;                     /* [0, 1]; 0 = off; keep p >= min_p * p_max */
    float repeat_penalty;            /* > 0, finite; 1 = off */
    float presence_penalty;          /* finite; 0 = off */
    float frequency_penalty;         /* finite; 0 = off */
    int32_t penalty_last_n;          /* [0, 1 << 20]; 0 = no penalties */
    uint64_t seed;                   /* used as given; the caller picks a random one
                                        when the client sent none */
    int32_t n_logprobs;              /* [0, 20] alternatives reported */
    bool no_logprob;                 /* skip the sampled token's logprob (rl_event.logprob
                                        is then NaN, unless n_logprobs > 0): saves a
                                        softmax over the vocabulary per token */
    const rl_logit_bias *logit_bias; /* borrowed; copied at submit */
    int32_t n_logit_bias;            /* [0, n_vocab] */
} rl_sample_params;

/* temperature 1, top_k 0, top_p 1, min_p 0, repeat 1, presence 0,
 * frequency 0, penalty_last_n 64, seed 0, n_logprobs 0, no bias:
 * plain sampling from the model's distribution. */
rl_sample_params rl_sample_params_default(void);

/* Checks every field against n_vocab.  On failure returns RL_ERR_INVALID
 * (RL_ERR_RANGE for token ids) and a message naming the field and the bad
 * value, e.g. "temperature: must be a finite number >= 0, got nan". */
rl_status rl_sample_params_validate(const rl_sample_params *p, int32_t n_vocab, rl_err *err);

/* ---- chat messages (rendered by src/chat/) ---- */

/* One chat message.  `content` may be NULL (rendered as none).  Both
 * strings are borrowed by whatever they are passed to. */
typedef struct rl_chat_msg {
    const char *role;
    const char *content;
} rl_chat_msg;

/* ---- tool calls and reasoning in model output (parsed by src/chat/) ---- */

/* How a chat template's model writes tool calls.  Append-only, fixed values. */
typedef enum rl_tool_format {
    RL_TOOLS_NONE = 0,    /* no tool calls are looked for */
    RL_TOOLS_HERMES = 1,  /* <tool_call>{"name": .., "arguments": {..}}</tool_call> (Hermes 2 Pro,
                             Qwen2.5, Qwen3, and redline's generic format) */
    RL_TOOLS_LLAMA3 = 2,  /* a bare {"name": .., "parameters": {..}} object, or <|python_tag|> */
    RL_TOOLS_MISTRAL = 3, /* [TOOL_CALLS][{"name": .., "arguments": {..}}, ..] or
                             [TOOL_CALLS]name[ARGS]{..} */
    RL_TOOLS_GRANITE = 4, /* <|tool_call|>[{"name": .., "arguments": {..}}, ..] */
} rl_tool_format;

/* What to look for in a model's output. */
typedef struct rl_chat_syntax {
    rl_tool_format tools; /* tool-call format; NONE when the request has no tools */
    bool reasoning;       /* split a leading <think>..</think> block off as reasoning */
    bool think_open;      /* the prompt already opened the block: the output starts inside it */
} rl_chat_syntax;

/* One tool call found in the output.  Strings are owned by the
 * rl_chat_output and NUL-terminated. */
typedef struct rl_chat_call {
    char *name;      /* the function name */
    char *arguments; /* JSON text of the arguments object as the model wrote it ("{}" when it
                        wrote none); for an unfinished call the text so far */
    char *id;        /* the call id the model wrote (Mistral), else NULL */
    bool complete;   /* the call's text is closed (false: cut short, or still being written) */
} rl_chat_call;

/* A parsed output: the answer text, the reasoning text and the tool calls.
 * Free with rl_chat_output_free. */
typedef struct rl_chat_output {
    char *content; /* NUL-terminated, never NULL after a successful parse */
    size_t content_len;
    char *reasoning; /* NUL-terminated, never NULL after a successful parse */
    size_t reasoning_len;
    rl_chat_call *calls;
    int32_t n_calls;
} rl_chat_output;

#endif
