/* apid.h — the OpenAI-compatible HTTP front door of an instance (a pipeline stage).
 *
 * apid talks to the engine only as a client does: the supervisor's commands (generate, release,
 * cancel) and the request slots' token streams (supervisor/client.h). It holds no engine state: kill
 * it and the supervisor restarts it, the engine never notices. HTTP is libmicrohttpd (one thread per
 * connection, so a handler may block while it streams) and JSON is jansson.
 *
 * Files: main.c (flags, settings, the stage loop), server.c (HTTP: routing, auth, bodies, errors,
 * static files), completions.c (chat and text completions, streaming), request.c (OpenAI request
 * fields → the engine's), endpoints.c (models, health, tokenize, status), metrics.c (Prometheus),
 * chat_template.c, textout.c (stop strings, UTF-8), logprobs.c (OpenAI's logprobs objects).
 *
 * Settings: <runtime dir>/apid.json (written by `pictl start --http`), then flags:
 *   listen "HOST:PORT" (127.0.0.1:8080), api_key, chat_template, max_queue (requests accepted at
 *   once, in a slot or waiting for one; more get 429), timeout_s (per request), max_body (bytes),
 *   web_dir, model_alias. */
#ifndef PI_APID_H
#define PI_APID_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "chat_template.h"
#include "client.h"
#include "metrics.h"
#include "stage.h"

#define APID_DEFAULT_HOST "127.0.0.1"
#define APID_DEFAULT_PORT 8080
#define APID_DEFAULT_MAX_QUEUE 64
#define APID_DEFAULT_TIMEOUT_S 600
#define APID_DEFAULT_MAX_BODY (4u << 20)  /* a full context of text is well below this */
#define APID_MAX_CONNECTIONS 256          /* one thread each */
#define APID_RETRY_AFTER_S 1              /* 429's Retry-After */
#define APID_STATUS_CLIENT_GONE 499       /* metrics label of a request whose client left (nginx's) */

struct apid_config {
    char host[256];
    int port;
    char api_key[512];     /* "" = no key */
    char chat_template[32];/* "" = from the model */
    int max_queue;
    int timeout_s;
    size_t max_body;
    char web_dir[1024];
    char model_alias[128];
};

struct apid_reaper; /* requests given up early, cancelled and released in the background */

struct apid {
    struct apid_config cfg;
    struct stage_rt rt;            /* ctl (heartbeat, READY), the weights image */
    struct pic_conn conn;          /* the client side of generations */
    struct MHD_Daemon *mhd;
    /* set once by the loader thread (release), read by handlers (acquire) */
    _Atomic bool ready;
    bool listened; /* the server came up: a later failure is not a start failure */
    struct pi_model *model;        /* from the weights image: tokenizer and metadata only */
    int32_t eot_id;                /* the template's end-of-turn token, -1 if the vocabulary lacks it */
    enum chat_family family;
    char template_source[16];      /* "flag", "model", "fallback" */
    char template_warning[256];    /* why we fell back, "" otherwise */
    char model_id[128];
    time_t created;
    struct apid_metrics met;
    pthread_mutex_t mu;            /* admission counters */
    int n_admitted, n_waiting;
    struct apid_reaper *reaper;
};

/* An OpenAI error: status, message, the request field at fault (or NULL), a code (or NULL). */
struct apid_err {
    int status;
    char message[512];
    char param[64];
    const char *type, *code;
};
void apid_err_set(struct apid_err *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
json_t *apid_err_json(const struct apid_err *e);

/* config.c: defaults, the settings file, flags. 0, 1 (--help printed) or a negative code. */
int apid_config_parse(struct apid_config *c, char *instance, size_t icap, int argc, char **argv);

/* apid.c: attach the instance, serve until it stops (or a stop signal). 0 or a negative code (the
 * error recorded for pictl status). */
int apid_run(struct apid *a, const char *instance);

/* server.c */
int apid_server_start(struct apid *a);
void apid_server_stop(struct apid *a);

/* The request being answered: what handlers need of the connection. */
struct MHD_Connection;
struct apid_http {
    struct apid *a;
    struct MHD_Connection *conn;
    int endpoint;                  /* enum apid_endpoint (metrics.h) */
    uint64_t t0_ns;
    int fd;                        /* the client's socket, to notice a disconnect */
};
/* Queue a JSON response (takes the reference) / an error. Return MHD_YES/MHD_NO. */
int apid_reply_json(struct apid_http *h, int status, json_t *body);
int apid_reply_error(struct apid_http *h, const struct apid_err *e);
/* The client closed its connection (checked without blocking). */
bool apid_client_gone(const struct apid_http *h);

/* request.c: an OpenAI completion request, validated, as the engine's generate fields. */
struct gen_req {
    bool chat, stream, include_usage;
    char *prompt;                  /* rendered (chat) or given (completions); malloc'd; NULL
                                      when the prompt is token ids */
    int32_t *prompt_ids;           /* completions: a prompt given as token ids (malloc'd), or NULL */
    size_t n_prompt_ids;
    int n_probs;                   /* -1: no logprobs; else top candidates per token, 0..20 */
    json_t *engine;                /* the generate command's fields (n_predict set later) */
    int32_t max_tokens;            /* -1: up to the context */
    char *stops[16];
    size_t n_stops;
};
int apid_parse_gen(struct apid *a, json_t *body, bool chat, struct gen_req *g, struct apid_err *e);
void gen_req_fini(struct gen_req *g);

/* completions.c */
int apid_handle_completion(struct apid_http *h, const char *body, size_t len, bool chat);
int apid_reaper_start(struct apid *a);
void apid_reaper_stop(struct apid *a);

/* endpoints.c */
int apid_handle_models(struct apid_http *h, const char *id);
int apid_handle_health(struct apid_http *h);
int apid_handle_tokenize(struct apid_http *h, const char *body, size_t len, bool detok);
int apid_handle_status(struct apid_http *h);
int apid_handle_metrics(struct apid_http *h);

/* Is the instance serving and the tokenizer loaded? */
bool apid_serving(const struct apid *a);

#endif
