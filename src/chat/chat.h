/* redline chat templates (L3, part of the tokenizer module): a small
 * interpreter for the subset of Jinja2 that Hugging Face chat templates use.
 *
 * Semantics follow transformers' apply_chat_template: jinja2 with
 * trim_blocks=True, lstrip_blocks=True, the loopcontrols extension
 * ({% break %}, {% continue %}), one trailing newline of the source dropped,
 * raise_exception(msg), namespace(), dict(), range(), strftime_now(), and a
 * `tojson` filter that is json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False) with those keywords.
 *
 * Supported: {{ }}, {% %}, {# #}, whitespace control (-, +), raw blocks;
 * if/elif/else, for (tuple targets, `if` filter, else, loop.*), set (names,
 * ns.attr, block set, filtered block set), macro (defaults, varargs, kwargs,
 * caller, recursion), call blocks, filter blocks, generation blocks
 * (rendered inline), break/continue; literals (str, int, float, bool, none,
 * list, tuple, dict), arithmetic, % and str.format formatting, ~
 * concatenation, comparisons (chained), and/or/not, in/not in, conditional
 * expressions, `is` tests, jinja2's getattr/getitem (methods before keys),
 * slicing, jinja2's filters and the str/dict/list methods templates use,
 * Markup (|safe) and generators (|map, |select ...) as Python has them.
 * Not supported (clear error): include/extends/import, recursive for.
 *
 * Templates are untrusted: lexing, parsing and evaluation are bounded by the
 * limits below (steps, output bytes, interpreter memory, nesting depth; macro
 * calls in progress count as nesting, and run-time recursion is capped at
 * ten times max_depth).  Any violation or template error returns an
 * rl_status and an rl_err message of the form "chat template L:C: what"
 * (line and column, 1-based).  The renderer never aborts on bad input.
 *
 * Strings are treated as UTF-8; length, indexing and slicing count code
 * points as Python does; case mapping is Unicode's (C.UTF-8 ctype tables).
 */
#ifndef RL_CHAT_H
#define RL_CHAT_H

#include "base/base.h"
#include "redline-types.h"

/* rl_chat_msg {role, content} is public: defined in include/redline-types.h. */

typedef struct rl_template_limits {
    uint64_t max_steps; /* evaluated nodes; default 10,000,000 */
    size_t max_output;  /* rendered bytes; default 64 MiB */
    size_t max_memory;  /* interpreter arena bytes; default 256 MiB */
    int max_depth;      /* nesting of blocks, expressions and values; default 100 */
} rl_template_limits;

void rl_template_limits_default(rl_template_limits *lim);

/* Renders `tmpl` (tmpl_len bytes, need not be NUL-terminated) with the
 * variables messages (list of {role, content}), add_generation_prompt,
 * bos_token and eos_token (NULL means ""), and tools and documents set to
 * none, as HF's apply_chat_template does without tools.  On success *out is a
 * NUL-terminated string of *out_len bytes (caller frees with rl_free); on
 * error *out is NULL and err says why. */
rl_status rl_template_render(const char *tmpl, size_t tmpl_len, const rl_chat_msg *msgs,
                             size_t n_msgs, bool add_generation_prompt, const char *bos_token,
                             const char *eos_token, char **out, size_t *out_len, rl_err *err);

/* Same, with every top-level key of the JSON object `ctx_json` as a template
 * variable (e.g. {"messages": [...], "tools": [...], "add_generation_prompt":
 * true, "bos_token": "<s>"}), so messages may carry tool_calls etc.
 * Both entry points prepare `messages` as apply_chat_template does: keys
 * whose value is None are dropped from each message (content: null becomes
 * an absent content), a reasoning given as reasoning_content, thinking or
 * reasoning is copied to reasoning_content and thinking, and a message that
 * is not an object is an error.
 * `lim` may be NULL for the defaults. */
rl_status rl_template_render_json(const char *tmpl, size_t tmpl_len, const char *ctx_json,
                                  size_t ctx_json_len, const rl_template_limits *lim, char **out,
                                  size_t *out_len, rl_err *err);

/* Built-in template source by name: "chatml" or "gemma" (Gemma 3's
 * template); NULL for an unknown name.  Static storage. */
const char *rl_template_builtin(const char *name);
/* The built-in template to use when a model of architecture `arch` has no
 * tokenizer.chat_template: "gemma" for gemma*, else "chatml".  Returns the
 * template source; *name_out (may be NULL) gets its name. */
const char *rl_template_fallback(const char *arch, const char **name_out);

/* ---- tool calls and reasoning (toolcall.c) ----
 * The rl_chat_syntax / rl_chat_output / rl_chat_call types are public
 * (include/redline-types.h); rl_chat_parse and rl_chat_output_free are
 * public functions too (include/redline.h). */

#define RL_THINK_OPEN  "<think>"
#define RL_THINK_CLOSE "</think>"

/* What a chat template says about its model's output. */
typedef struct rl_chat_format {
    rl_tool_format tools; /* the family's tool-call format; HERMES (redline's generic
                             format) for a template that knows none */
    bool native_tools;    /* the template renders `tools` and tool messages itself */
    bool reasoning;       /* the template knows <think> blocks (DeepSeek-R1, Qwen3, QwQ) */
} rl_chat_format;

/* From the template source (substring tests: [TOOL_CALLS] -> Mistral,
 * <|tool_call|> -> Granite, <|python_tag|> or a Llama 3 header with the
 * ipython role -> Llama 3, else Hermes; </think> -> reasoning). */
void rl_chat_format_detect(const char *tmpl, size_t len, rl_chat_format *out);
/* "none", "hermes", "llama3", "mistral", "granite"; static storage. */
const char *rl_tool_format_name(rl_tool_format f);

/* Splits model output text[0..len) into answer, reasoning and tool calls
 * as syn says; `partial` while the text is still growing (see toolcall.c
 * for what is held back).  *out is filled on success (free with
 * rl_chat_output_free); RL_ERR_NOMEM otherwise.  Never fails on malformed
 * text: what is not a well-formed call is content. */
rl_status rl_chat_parse(const rl_chat_syntax *syn, const char *text, size_t len, bool partial,
                        rl_chat_output *out, rl_err *err);
void rl_chat_output_free(rl_chat_output *o); /* NULL is a no-op */

#endif
