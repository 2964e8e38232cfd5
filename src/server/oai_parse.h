/* OpenAI request parsing (L9, server): a JSON body -> validated generation
 * parameters, with no HTTP and no engine in sight, so it can be unit tested
 * and fuzzed on its own (tests/fuzz/fuzz_request.c #includes oai_parse.c).
 *
 * Everything here treats the body as hostile: every field is type-checked
 * and range-checked, unknown fields are ignored, and any problem becomes an
 * rl_oai_err whose message and `param` name the bad field.  Nothing aborts.
 *
 * Invariants of a successfully parsed rl_oai_req:
 *   - 1 <= n <= lim->max_n; 0 <= max_tokens <= lim->n_ctx (0 = not given);
 *   - gp.sample passes rl_sample_params_validate(lim->n_vocab);
 *   - every stop string is 1..RL_MAX_STOP_LEN bytes of valid UTF-8;
 *   - chat: 1..lim->max_messages messages, each with a known role and a
 *     NUL-free UTF-8 content (NULL only for an assistant message);
 *   - completion: either a string prompt or 1..n_ctx-1 token ids in range;
 *     with `suffix` (a string; string prompts only) it is fill-in-the-middle;
 *   - infill: input_prefix and input_suffix strings, prompt a string or
 *     absent, input_extra an array of at most RL_OAI_MAX_EXTRA {"text": a
 *     string, "filename": a string (optional)} objects; n == 1;
 *   - tools: at most RL_OAI_MAX_TOOLS, each {"type":"function","function":
 *     {"name": [A-Za-z0-9_-]{1,64}, unique, "parameters": a schema the
 *     grammar compiler accepts (optional)}}; a named tool_choice names
 *     one of them; every tool message's tool_call_id is the id of a call
 *     of an earlier assistant message.
 */
#ifndef RL_SERVER_OAI_PARSE_H
#define RL_SERVER_OAI_PARSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "redline.h"

typedef enum rl_oai_kind {
    RL_OAI_CHAT = 1,       /* POST /v1/chat/completions */
    RL_OAI_COMPLETION = 2, /* POST /v1/completions */
    RL_OAI_INFILL = 3,     /* POST /infill (llama-server's fill-in-the-middle) */
} rl_oai_kind;

/* An OpenAI-style error: {"error":{"message","type","param","code"}}. */
typedef struct rl_oai_err {
    int status;       /* HTTP status */
    const char *type; /* static string, e.g. "invalid_request_error" */
    const char *code; /* static string or NULL */
    char param[64];   /* offending field, "" when none */
    char message[512];
} rl_oai_err;

typedef struct rl_oai_limits {
    int32_t n_vocab;           /* token ids must be in [0, n_vocab) */
    int32_t n_ctx;             /* max tokens of one sequence */
    int32_t max_n;             /* choices per request (8) */
    int32_t max_messages;      /* chat messages per request (1024) */
    rl_spec_mode default_spec; /* speculation when a request does not say (NONE) */
    bool have_draft;           /* the engine has a draft model ("speculative": "draft" allowed) */
} rl_oai_limits;

#define RL_OAI_MAX_N     8
#define RL_OAI_MAX_TOOLS 128
#define RL_OAI_MAX_EXTRA 1024 /* input_extra chunks of one /infill request */

typedef enum rl_oai_tool_choice {
    RL_OAI_TOOLS_NONE = 0,     /* no tools, or tool_choice "none" */
    RL_OAI_TOOLS_AUTO = 1,     /* the model decides (a lazy grammar keeps a begun call valid) */
    RL_OAI_TOOLS_REQUIRED = 2, /* at least one call, constrained by the tools' schemas */
    RL_OAI_TOOLS_NAMED = 3,    /* a call of tools[tool_named] */
} rl_oai_tool_choice;

typedef struct rl_oai_req {
    rl_oai_kind kind;
    json_t *root;      /* owned reference to the parsed body */
    const char *model; /* borrowed from root; NULL when absent */
    const char *user;  /* borrowed from root; NULL when absent */
    bool stream, include_usage, echo;
    int32_t n;          /* choices */
    int32_t max_tokens; /* 0 = not given (until the context is full) */
    bool seed_given;
    bool logprobs; /* report the chosen token's logprob */
    int32_t top_logprobs;
    rl_gen_params gp;    /* gp.sample.logit_bias points into `bias` */
    rl_logit_bias *bias; /* owned, [gp.sample.n_logit_bias] */
    /* chat */
    rl_chat_msg *msgs; /* owned array; roles borrowed, contents owned */
    size_t n_msgs;
    /* completion: exactly one of these */
    const char *prompt; /* borrowed from root (string prompt), else NULL */
    size_t prompt_len;
    int32_t *prompt_ids; /* owned (token-id prompt), else NULL */
    int32_t n_prompt_ids;
    /* fill-in-the-middle (completion with suffix, infill); the texts are
     * borrowed from root; the prompt is built by the model's FIM tokens */
    bool fim;
    const char *fim_prefix, *fim_suffix, *fim_middle; /* middle: infill's prompt, or NULL */
    size_t fim_prefix_len, fim_suffix_len, fim_middle_len;
    json_t *fim_extra; /* infill's input_extra array (borrowed), or NULL */
    int32_t n_indent;  /* infill: a new line indented less than this ends the output (0 = off) */
    /* tools (chat): validated; the tool-call grammar is built later, by
     * the chat template's format (oai_tools.c) */
    json_t *tools; /* borrowed from root: the `tools` array, or NULL */
    int32_t n_tools;
    rl_oai_tool_choice tool_choice; /* AUTO when tools are given, else NONE */
    int32_t tool_named;             /* NAMED: the index in tools */
    bool parallel_tool_calls;       /* default true */
    bool tool_msgs;                 /* a message carries tool_calls or is a tool result */
    json_t *tmpl_kwargs;            /* borrowed: chat_template_kwargs (an object), or NULL */
    int32_t reasoning_budget;       /* max_reasoning_tokens (or reasoning_budget): think-block
                                       tokens before it is closed; -1 = no budget */
    /* structured output (the compiled grammar is gp.grammar) */
    char response_format[16]; /* "", "text", "json_object", "json_schema" */
    char *json_schema;        /* owned serialized schema object, or NULL */
} rl_oai_req;

void rl_oai_limits_default(rl_oai_limits *lim, int32_t n_vocab, int32_t n_ctx);

/* Parses and validates a request body.  On success returns true and *out
 * owns its memory (free with rl_oai_req_free).  On failure returns false,
 * fills *e (status 400 unless said otherwise) and *out holds nothing. */
bool rl_oai_parse(const char *body, size_t len, rl_oai_kind kind, const rl_oai_limits *lim,
                  rl_oai_req *out, rl_oai_err *e);
void rl_oai_req_free(rl_oai_req *r);

/* Parses a body that must be a JSON object; NULL with *e filled otherwise.
 * The caller owns the returned reference. */
json_t *rl_oai_parse_object(const char *body, size_t len, rl_oai_err *e);

/* Reads `v` (a JSON array of integers) as token ids in [0, n_vocab).  At
 * most max_n ids.  *ids is allocated with rl_malloc (caller frees; NULL
 * when *n == 0).  `field` names the field in error messages. */
bool rl_oai_token_array(const json_t *v, const char *field, int32_t n_vocab, int32_t max_n,
                        bool allow_empty, int32_t **ids, int32_t *n, rl_oai_err *e);

/* When e names the field `from`, names `to` instead, in param and at the
 * start of the message (another API's name for the same field). */
void rl_oai_rename_param(rl_oai_err *e, const char *from, const char *to);
/* Fills *e and returns false, for `return rl_oai_fail(...)`. */
bool rl_oai_fail(rl_oai_err *e, int status, const char *param, const char *code, const char *fmt,
                 ...) __attribute__((format(printf, 5, 6)));

/* The error as a JSON body (caller frees with free()). */
char *rl_oai_err_json(const rl_oai_err *e);

/* Normalizes a request path in place: collapses repeated slashes, drops a
 * trailing slash (except for "/"), and rejects (returns false) paths that
 * do not start with '/', contain "." or ".." segments, NUL or control
 * bytes, or are longer than cap-1 bytes. */
bool rl_oai_normalize_path(const char *in, char *out, size_t cap);

#endif
