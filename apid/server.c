/* server.c — HTTP on libmicrohttpd: one thread per connection (a completion handler blocks while it
 * streams), routing, the API key, request bodies (bounded), OpenAI-shaped errors, the web page's
 * static files. Every response is counted in the metrics by endpoint and status. */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apid.h"
#include "pi_err.h"

#define IDLE_TIMEOUT_S 300        /* a keep-alive connection with no request for this long is closed */
#define STATIC_MAX (1u << 20)     /* web page files are small */

void apid_err_set(struct apid_err *e, int status, const char *param, const char *code, const char *fmt, ...)
{
    e->status = status;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    e->code = code;
    e->type = status == 401 ? "authentication_error"
              : status == 429 ? "rate_limit_error"
              : status >= 500 ? "server_error"
                              : "invalid_request_error";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

json_t *apid_err_json(const struct apid_err *e)
{
    /* the message may quote client bytes: keep it valid UTF-8 for JSON */
    json_t *msg = json_string(e->message);
    if (!msg)
        msg = json_string("invalid request (the detail is not valid UTF-8)");
    return json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", msg, "type", e->type, "param",
                     e->param[0] ? json_string(e->param) : json_null(), "code", e->code ? json_string(e->code) : json_null());
}

static double since_s(const struct apid_http *h) { return (double)(stage_now_ns() - h->t0_ns) / 1e9; }

static int queue(struct apid_http *h, int status, struct MHD_Response *r)
{
    if (!r)
        return MHD_NO;
    enum MHD_Result ret = MHD_queue_response(h->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    metrics_request(&h->a->met, h->endpoint, status, since_s(h));
    return ret;
}

static struct MHD_Response *text_response(const char *text, size_t len, const char *type)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (r)
        MHD_add_response_header(r, "Content-Type", type);
    return r;
}

int apid_reply_json(struct apid_http *h, int status, json_t *body)
{
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s)
        return MHD_NO;
    struct MHD_Response *r = text_response(s, strlen(s), "application/json");
    free(s);
    return queue(h, status, r);
}

int apid_reply_error(struct apid_http *h, const struct apid_err *e)
{
    json_t *j = apid_err_json(e);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return MHD_NO;
    struct MHD_Response *r = text_response(s, strlen(s), "application/json");
    free(s);
    if (r && e->status == 429) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", APID_RETRY_AFTER_S);
        MHD_add_response_header(r, "Retry-After", ra);
    }
    if (r && e->status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", h->endpoint == EP_WEB ? "Basic realm=\"pinfer\", charset=\"UTF-8\"" : "Bearer");
    return queue(h, e->status, r);
}

bool apid_client_gone(const struct apid_http *h)
{
    if (h->fd < 0)
        return false;
    struct pollfd p = { .fd = h->fd, .events = POLLRDHUP };
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Constant-time comparison: the time taken depends on the lengths only, never on where the first
 * difference is. */
static bool key_matches(const char *given, const char *key)
{
    const size_t gl = strlen(given), kl = strlen(key);
    unsigned char diff = gl != kl;
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

/* Bearer KEY (API clients), or HTTP Basic with KEY as the password (a browser opening the web page
 * cannot send a Bearer header; after its login prompt it sends Basic with every same-origin fetch). */
static bool authorized(struct apid *a, struct MHD_Connection *c)
{
    if (!a->cfg.api_key[0])
        return true;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (v && !strncasecmp(v, "Basic ", 6)) {
        char *pass = NULL;
        char *user = MHD_basic_auth_get_username_password(c, &pass);
        const bool ok = pass && key_matches(pass, a->cfg.api_key);
        MHD_free(user);
        MHD_free(pass);
        return ok;
    }
    if (!v || strncasecmp(v, "Bearer ", 7))
        return false;
    v += 7;
    while (*v == ' ')
        v++;
    return key_matches(v, a->cfg.api_key);
}

/* ---- static files of the web page (a fixed list: no path from the URL reaches the filesystem) ---- */

static const struct { const char *url, *file, *type; } web_files[] = {
    { "/", "index.html", "text/html; charset=utf-8" },
    { "/index.html", "index.html", "text/html; charset=utf-8" },
    { "/app.js", "app.js", "text/javascript; charset=utf-8" },
    { "/style.css", "style.css", "text/css; charset=utf-8" },
};

static int serve_file(struct apid_http *h, const char *file, const char *type)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", h->a->cfg.web_dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || st.st_size > STATIC_MAX) {
        if (fd >= 0)
            close(fd);
        struct apid_err e;
        apid_err_set(&e, 404, NULL, "not_found", "the web page is not installed (%s)", path);
        return apid_reply_error(h, &e);
    }
    struct MHD_Response *r = MHD_create_response_from_fd((uint64_t)st.st_size, fd); /* MHD closes fd */
    if (r) {
        MHD_add_response_header(r, "Content-Type", type);
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    }
    return queue(h, 200, r);
}

/* ---- routing ---- */

struct hreq {
    char *body;
    size_t len, cap;
    bool too_big;
    uint64_t t0_ns;
};

struct route {
    const char *path;
    const char *method;
    enum apid_endpoint ep;
    bool prefix; /* /v1/models/<id> */
};

static const struct route routes[] = {
    { "/v1/chat/completions", "POST", EP_CHAT, false }, { "/v1/completions", "POST", EP_COMPLETIONS, false },
    { "/v1/models", "GET", EP_MODELS, false },          { "/v1/models/", "GET", EP_MODELS, true },
    { "/health", "GET", EP_HEALTH, false },             { "/metrics", "GET", EP_METRICS, false },
    { "/tokenize", "POST", EP_TOKENIZE, false },        { "/detokenize", "POST", EP_DETOKENIZE, false },
    { "/api/status", "GET", EP_STATUS, false },
};

static int dispatch(struct apid_http *h, const struct route *rt, const char *url, struct hreq *q)
{
    switch (rt->ep) {
    case EP_CHAT: return apid_handle_completion(h, q->body, q->len, true);
    case EP_COMPLETIONS: return apid_handle_completion(h, q->body, q->len, false);
    case EP_MODELS: return apid_handle_models(h, rt->prefix ? url + strlen(rt->path) : NULL);
    case EP_HEALTH: return apid_handle_health(h);
    case EP_METRICS: return apid_handle_metrics(h);
    case EP_TOKENIZE: return apid_handle_tokenize(h, q->body, q->len, false);
    case EP_DETOKENIZE: return apid_handle_tokenize(h, q->body, q->len, true);
    case EP_STATUS: return apid_handle_status(h);
    default: return MHD_NO;
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **state)
{
    (void)version;
    struct apid *a = cls;
    struct hreq *q = *state;
    if (!q) {
        /* first call: headers only */
        if (!(q = calloc(1, sizeof *q)))
            return MHD_NO;
        q->t0_ns = stage_now_ns();
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > a->cfg.max_body)
            q->too_big = true;
        *state = q;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!q->too_big && q->len + *upload_size > a->cfg.max_body)
            q->too_big = true;
        if (!q->too_big) {
            if (q->len + *upload_size + 1 > q->cap) {
                size_t cap = q->cap ? q->cap : 4096;
                while (cap < q->len + *upload_size + 1)
                    cap *= 2;
                char *b = realloc(q->body, cap);
                if (!b)
                    return MHD_NO;
                q->body = b;
                q->cap = cap;
            }
            memcpy(q->body + q->len, upload, *upload_size);
            q->len += *upload_size;
            q->body[q->len] = '\0';
        }
        *upload_size = 0;
        return MHD_YES;
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct apid_http h = { .a = a, .conn = c, .endpoint = EP_OTHER, .t0_ns = q->t0_ns, .fd = ci ? ci->connect_fd : -1 };
    struct apid_err e;
    const struct route *rt = NULL;
    bool path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const struct route *r = &routes[i];
        const bool match = r->prefix ? !strncmp(url, r->path, strlen(r->path)) && url[strlen(r->path)] : !strcmp(url, r->path);
        if (!match)
            continue;
        path_known = true;
        h.endpoint = r->ep;
        if (!strcmp(method, r->method))
            rt = r;
    }
    int web = -1;
    for (size_t i = 0; !path_known && i < sizeof web_files / sizeof web_files[0]; i++)
        if (!strcmp(url, web_files[i].url)) {
            web = (int)i;
            path_known = true;
            h.endpoint = EP_WEB;
        }
    /* /health answers everyone: load balancers and orchestrators probe it without a key */
    if (path_known && h.endpoint != EP_HEALTH && !authorized(a, c)) {
        apid_err_set(&e, 401, NULL, "invalid_api_key", "a valid API key is required (Authorization: Bearer KEY)");
        return (enum MHD_Result)apid_reply_error(&h, &e);
    }
    if (!path_known) {
        apid_err_set(&e, 404, NULL, "not_found", "no such endpoint: %s %.200s", method, url);
        return (enum MHD_Result)apid_reply_error(&h, &e);
    }
    if (web >= 0) {
        if (strcmp(method, "GET")) {
            apid_err_set(&e, 405, NULL, "method_not_allowed", "%s %s: only GET is allowed", method, url);
            return (enum MHD_Result)apid_reply_error(&h, &e);
        }
        return (enum MHD_Result)serve_file(&h, web_files[web].file, web_files[web].type);
    }
    if (!rt) {
        apid_err_set(&e, 405, NULL, "method_not_allowed", "%s %.200s: method not allowed", method, url);
        return (enum MHD_Result)apid_reply_error(&h, &e);
    }
    if (q->too_big) {
        apid_err_set(&e, 413, NULL, "request_too_large", "the request body is larger than %zu bytes", a->cfg.max_body);
        return (enum MHD_Result)apid_reply_error(&h, &e);
    }
    return (enum MHD_Result)dispatch(&h, rt, url, q);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode why)
{
    (void)cls;
    (void)c;
    (void)why;
    struct hreq *q = *state;
    if (q) {
        free(q->body);
        free(q);
        *state = NULL;
    }
}

int apid_server_start(struct apid *a)
{
    char port[16];
    snprintf(port, sizeof port, "%d", a->cfg.port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV }, *ai;
    int g = getaddrinfo(a->cfg.host, port, &hints, &ai);
    if (g)
        return pi_fail(PI_E_INVAL, "cannot resolve '%s': %s", a->cfg.host, gai_strerror(g));
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    a->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, a, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)APID_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
                              (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_NOTIFY_COMPLETED, on_completed, a, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!a->mhd) /* the address given is unusable here: a setting, not a fault a restart could clear */
        return pi_fail(PI_E_INVAL, "cannot listen on %s:%d (in use, or not an address of this machine?)", a->cfg.host,
                       a->cfg.port);
    return 0;
}

void apid_server_stop(struct apid *a)
{
    if (a->mhd)
        MHD_stop_daemon(a->mhd);
    a->mhd = NULL;
}
