/* redline serve (L9): an OpenAI-compatible HTTP server over the engine API
 * of include/redline.h.  See docs/SERVER.md for the endpoints and flags.
 *
 * Threads: libmicrohttpd runs one thread per connection (plus its listener);
 * those threads talk to the engine only through rl_engine_submit / next /
 * cancel / get_stats.  The model loads on a background thread after the
 * socket is up, so /health answers 503 {"status":"loading"} until it is
 * ready.  A small logger thread prints a summary line every 10 s while busy.
 */
#ifndef RL_SERVER_H
#define RL_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "redline.h"

typedef struct rl_server_config {
    const char *host;          /* bind address ("127.0.0.1") */
    int port;                  /* 8080; 0 = any free port (printed on start) */
    const char *api_key;       /* NULL = no authentication */
    const char *alias;         /* model id reported by the API; NULL = file name */
    rl_engine_params ep;       /* engine parameters (model_path required) */
    rl_spec_mode default_spec; /* --spec: speculation for requests that do not choose */
    int32_t max_queue;         /* waiting requests beyond which new ones get 503 (256) */
    size_t max_body;           /* request body bytes (4 MiB) */
    size_t max_header;         /* request header bytes in total (32 KiB) */
    int32_t max_conns;         /* simultaneous connections (512) */
    double drain_s;            /* SIGTERM: how long in-flight requests may finish (30) */
    double log_interval_s;     /* busy summary line period (10) */
} rl_server_config;

void rl_server_config_default(rl_server_config *c);

/* Runs the server until SIGINT or SIGTERM, then drains and returns the
 * process exit status (0 on a clean shutdown, 1 if the socket could not be
 * opened or the model failed to load). */
int rl_server_run(const rl_server_config *c);

#endif
