/* completions.c — POST /v1/chat/completions and /v1/completions: admit the request (a bounded
 * number at once: 429 beyond), send it to the supervisor (waiting for a free slot), then read its
 * tokens from the slot, turn them into text (stop strings and the template's end of turn end it
 * early), and answer as one JSON object or as server-sent events in OpenAI's chunk format.
 *
 * A request that ends before the engine's generation does (a stop string, a client that left, the
 * timeout) is handed to the reaper thread: it cancels the request where the supervisor can, waits
 * for its end and releases the slot, so a handler never waits for tokens nobody reads. */
#include <errno.h>
#include <microhttpd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "apid.h"
#include "logprobs.h"
#include "model.h"
#include "pi_err.h"
#include "textout.h"
#include "tokenizer.h"

#define PUMP_SLICE_MS 100        /* token wait slice: disconnects and the timeout are checked between */
#define SLOT_RETRY_MS 20         /* all slots busy: try again after this */
#define SSE_BLOCK 16384          /* MHD's buffer for a streamed response */
#define ABANDON_TIMEOUT_MS (30 * 60 * 1000) /* the reaper waits this long for a cancelled request */
#define PIECE_MAX 256

/* ---- the reaper ---- */

struct reap_item {
    struct pic_stream st;
    uint64_t ticket;             /* > 0: given up while waiting in the supervisor's queue */
    struct reap_item *next;
};

struct apid_reaper {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct reap_item *head;
    bool stop;
};

static void *reaper_main(void *arg)
{
    struct apid *a = arg;
    struct apid_reaper *r = a->reaper;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->head && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        if (!r->head)
            break;
        struct reap_item *it = r->head;
        r->head = it->next;
        pthread_mutex_unlock(&r->mu);
        int rc = it->ticket ? pic_abandon_ticket(&a->conn, it->ticket, ABANDON_TIMEOUT_MS)
                            : pic_abandon(&it->st, ABANDON_TIMEOUT_MS);
        if (rc)
            fprintf(stderr, "apid: giving up request %llu (slot %d, ticket %llu): %s: %s\n",
                    (unsigned long long)it->st.id, it->st.slot, (unsigned long long)it->ticket, pi_strerror(rc),
                    pi_errmsg());
        free(it);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int apid_reaper_start(struct apid *a)
{
    struct apid_reaper *r = calloc(1, sizeof *r);
    if (!r)
        return pi_fail(PI_E_NOMEM, "reaper");
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    a->reaper = r;
    if (pthread_create(&r->thread, NULL, reaper_main, a)) {
        a->reaper = NULL;
        free(r);
        return pi_fail(PI_E_IO, "cannot start the reaper thread");
    }
    return 0;
}

/* Stops after the queued requests are released (a stopping instance fails them at once). */
void apid_reaper_stop(struct apid *a)
{
    struct apid_reaper *r = a->reaper;
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
    a->reaper = NULL;
}

static void reaper_add(struct apid *a, const struct pic_stream *st, uint64_t ticket)
{
    struct reap_item *it = malloc(sizeof *it);
    if (!it) { /* no memory: do it here */
        (void)(ticket ? pic_abandon_ticket(&a->conn, ticket, ABANDON_TIMEOUT_MS) : pic_abandon(st, ABANDON_TIMEOUT_MS));
        return;
    }
    it->st = st ? *st : (struct pic_stream){ 0 };
    it->ticket = ticket;
    pthread_mutex_lock(&a->reaper->mu);
    it->next = a->reaper->head;
    a->reaper->head = it;
    pthread_cond_signal(&a->reaper->cv);
    pthread_mutex_unlock(&a->reaper->mu);
}

/* ---- one completion ---- */

struct job {
    struct apid *a;
    struct apid_http h;
    struct gen_req g;
    struct textout out;
    struct pic_stream st;
    bool admitted, submitted, released, ended, gone, timed_out, failed;
    bool engine_done;            /* the slot reached DONE */
    bool waiting;                /* counted in apid's n_waiting (no slot yet) */
    uint32_t seen;               /* tokens taken from the slot */
    int32_t n_prompt;
    const char *finish;          /* "stop" or "length" once ended */
    uint64_t deadline_ns, t_first_ns;
    double decode_tok_s;
    char id[48];
    long long created;
    struct apid_err err;         /* when failed */
    struct lp_list lp;           /* with logprobs: one entry per token of the answer's text */
    size_t prompt_chars;         /* text completions: the prompt's characters (text_offset's base) */
    /* streaming */
    char *pend;
    size_t pend_len, pend_off, pend_cap;
    bool sent_final;
};

static uint64_t now_ns(void) { return stage_now_ns(); }

static void make_id(char *buf, size_t cap, const char *prefix)
{
    unsigned char r[12];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        uint64_t t = now_ns();
        memcpy(r, &t, sizeof t);
        memset(r + 8, 0, 4);
    }
    int n = snprintf(buf, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && n + 2 < (int)cap; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%02x", r[i]);
}

static void job_end_request(struct job *j)
{
    if (!j->submitted || j->released)
        return;
    j->released = true;
    if (j->engine_done && pic_release(&j->st) == 0)
        return;
    reaper_add(j->a, &j->st, 0);
}

static void job_free(struct job *j)
{
    struct apid *a = j->a;
    job_end_request(j);
    if (j->admitted) {
        pthread_mutex_lock(&a->mu);
        a->n_admitted--;
        pthread_mutex_unlock(&a->mu);
    }
    if (j->submitted)
        metrics_tokens(&a->met, (uint64_t)j->n_prompt, j->seen, j->decode_tok_s);
    textout_fini(&j->out);
    lp_fini(&j->lp);
    gen_req_fini(&j->g);
    free(j->pend);
    free(j);
}

static bool is_end_token(const struct job *j, int32_t t)
{
    const struct apid *a = j->a;
    return t == a->eot_id || tok_is_eog(a->model->tok, t);
}

/* Take new tokens from the slot (waiting at most wait_ms). Sets ended/finish, or failed. */
static void job_pump(struct job *j, int wait_ms)
{
    const bool ignore_eos = json_is_true(json_object_get(j->g.engine, "ignore_eos"));
    uint32_t n = j->seen;
    int rc = pic_wait(&j->st, &n, wait_ms);
    if (rc < 0) {
        apid_err_set(&j->err, 500, NULL, "engine_error", "%s", pi_errmsg());
        j->failed = j->ended = true;
        return;
    }
    if (rc == PIC_DONE) {
        j->engine_done = true;
        const struct pi_request *r = j->st.r;
        if (r->decode_ns > 0)
            j->decode_tok_s = (double)n * 1e9 / (double)r->decode_ns;
    }
    char piece[PIECE_MAX];
    int32_t last = -1;
    while (j->seen < n && !j->ended) {
        const int32_t t = pic_token(&j->st, j->seen++);
        last = t;
        if (!j->t_first_ns) {
            j->t_first_ns = now_ns();
            metrics_ttft(&j->a->met, (double)(j->t_first_ns - j->h.t0_ns) / 1e9);
        }
        if (!ignore_eos && is_end_token(j, t)) {
            j->ended = true;
            j->finish = "stop";
            break;
        }
        if (j->g.n_probs >= 0) {
            /* the record is read now, while the slot is ours; its text starts at the current end */
            const struct pi_logprob *rec = pic_logprob(&j->st, j->seen - 1);
            if (rec && lp_add(&j->lp, t, j->out.len, rec)) {
                apid_err_set(&j->err, 500, NULL, NULL, "out of memory");
                j->failed = j->ended = true;
                break;
            }
        }
        int len = tok_piece(j->a->model->tok, t, false, piece, sizeof piece);
        if (len > 0 && textout_push(&j->out, piece, (size_t)len < sizeof piece ? (size_t)len : sizeof piece) == 1) {
            j->ended = true;
            j->finish = "stop";
        }
    }
    if (!j->ended && rc == PIC_DONE && j->seen == n) {
        j->ended = true;
        j->finish = last >= 0 && !ignore_eos && is_end_token(j, last) ? "stop" : "length";
    }
}

static bool job_check_abort(struct job *j)
{
    if (!j->gone && apid_client_gone(&j->h)) {
        j->gone = j->ended = true;
        metrics_event(&j->a->met, &j->a->met.disconnects);
    }
    if (!j->ended && now_ns() >= j->deadline_ns) {
        j->timed_out = j->ended = j->failed = true;
        apid_err_set(&j->err, 504, NULL, "timeout", "the request did not finish within %d s", j->a->cfg.timeout_s);
        metrics_event(&j->a->met, &j->a->met.timeouts);
    }
    return j->ended;
}

static int job_admit(struct job *j)
{
    struct apid *a = j->a;
    pthread_mutex_lock(&a->mu);
    const bool ok = a->n_admitted < a->cfg.max_queue;
    if (ok)
        a->n_admitted++;
    pthread_mutex_unlock(&a->mu);
    if (!ok) {
        apid_err_set(&j->err, 429, NULL, "rate_limit_exceeded",
                     "the server is busy: %d requests are in progress or waiting; retry after %d s",
                     a->cfg.max_queue, APID_RETRY_AFTER_S);
        return -1;
    }
    j->admitted = true;
    return 0;
}

/* While the request waits for a slot (in the supervisor's queue): count it as waiting, and give up
 * when the client leaves or the timeout passes. */
static bool job_give_up(void *arg)
{
    struct job *j = arg;
    if (!j->waiting) {
        j->waiting = true;
        pthread_mutex_lock(&j->a->mu);
        j->a->n_waiting++;
        pthread_mutex_unlock(&j->a->mu);
    }
    return job_check_abort(j);
}

/* Check the prompt against the context, then hand the request to the supervisor, waiting (with the
 * other admitted requests) while every slot is busy. */
static int job_submit(struct job *j)
{
    struct apid *a = j->a;
    const int32_t n_ctx = a->conn.ctl->n_ctx;
    int32_t *ids = NULL;
    size_t n_ids = j->g.n_prompt_ids;
    const struct pi_tokenizer *tok = a->model->tok;
    if (!j->g.prompt_ids) {
        if (tok_encode(tok, j->g.prompt, strlen(j->g.prompt), tok_add_bos(tok), true, &ids, &n_ids)) {
            apid_err_set(&j->err, 400, j->g.chat ? "messages" : "prompt", "invalid_value", "cannot tokenize: %s",
                         pi_errmsg());
            return -1;
        }
        free(ids);
    }
    if (n_ids >= (size_t)n_ctx || (j->g.max_tokens > 0 && n_ids + (size_t)j->g.max_tokens > (size_t)n_ctx)) {
        apid_err_set(&j->err, 400, j->g.chat ? "messages" : "prompt", "context_length_exceeded",
                     "this model's maximum context length is %d tokens; the prompt has %zu%s", n_ctx, n_ids,
                     j->g.max_tokens > 0 ? " plus max_tokens" : "");
        if (j->g.max_tokens > 0) {
            size_t l = strlen(j->err.message);
            snprintf(j->err.message + l, sizeof j->err.message - l, " %d", j->g.max_tokens);
        }
        return -1;
    }
    int32_t n_predict = j->g.max_tokens > 0 ? j->g.max_tokens : n_ctx - (int32_t)n_ids;
    if (j->g.n_probs >= 0 && n_predict > PI_LP_MAX_TOKENS)
        n_predict = PI_LP_MAX_TOKENS; /* no max_tokens: the most the log-probability table holds */
    json_object_set_new(j->g.engine, "n_predict", json_integer(n_predict));
    for (;;) {
        uint64_t ticket = 0;
        int rc = pic_generate_hooked(&a->conn, j->g.engine, &j->st, job_give_up, j, &ticket);
        if (rc == 0)
            break;
        if (rc == -ECANCELED) { /* queued in the supervisor when we gave up: the reaper frees it */
            reaper_add(a, NULL, ticket);
            break;
        }
        if (rc != -EBUSY) {
            apid_err_set(&j->err, rc == -PI_E_INVAL ? 400 : 503, NULL, rc == -PI_E_INVAL ? "invalid_value" : "unavailable",
                         "%s", pi_errmsg());
            break;
        }
        if (job_give_up(j))
            break;
        struct timespec ts = { 0, SLOT_RETRY_MS * 1000000L };
        nanosleep(&ts, NULL);
    }
    if (j->waiting) {
        j->waiting = false;
        pthread_mutex_lock(&a->mu);
        a->n_waiting--;
        pthread_mutex_unlock(&a->mu);
    }
    if (j->ended || j->err.status)
        return -1;
    j->submitted = true;
    j->n_prompt = j->st.n_prompt;
    return 0;
}

static json_t *usage_json(const struct job *j)
{
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", j->n_prompt, "completion_tokens", (int)j->seen, "total_tokens",
                     j->n_prompt + (int)j->seen);
}

/* The log-probability entries whose text begins before `end` (bytes of the answer), from the first
 * not yet sent; a token cut away by a stop string is not part of the answer. */
static size_t lp_until(const struct job *j, size_t end)
{
    size_t k = j->lp.sent;
    while (k < j->lp.n && j->lp.v[k].offset < end)
        k++;
    return k;
}

/* chat's or the text completion's logprobs for entries [sent, to), or JSON null without logprobs */
static json_t *lp_part(struct job *j, size_t to)
{
    if (j->g.n_probs < 0)
        return json_null();
    json_t *o = lp_json(j->a->model->tok, j->g.chat, &j->lp, j->lp.sent, to, textout_text(&j->out), j->prompt_chars);
    j->lp.sent = to;
    return o ? o : json_null();
}

static json_t *full_response(struct job *j, const char *text)
{
    json_t *choice, *lp = lp_part(j, lp_until(j, strlen(text)));
    if (j->g.chat)
        choice = json_pack("{s:i, s:{s:s, s:s}, s:o, s:s}", "index", 0, "message", "role", "assistant", "content", text,
                           "logprobs", lp, "finish_reason", j->finish);
    else
        choice = json_pack("{s:s, s:i, s:o, s:s}", "text", text, "index", 0, "logprobs", lp, "finish_reason", j->finish);
    return json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", j->id, "object",
                     j->g.chat ? "chat.completion" : "text_completion", "created", (json_int_t)j->created, "model",
                     j->a->model_id, "choices", choice, "usage", usage_json(j));
}

/* ---- streaming ---- */

static void pend_add(struct job *j, const char *s, size_t n)
{
    if (j->pend_len + n > j->pend_cap) {
        size_t cap = j->pend_cap ? j->pend_cap * 2 : 4096;
        while (cap < j->pend_len + n)
            cap *= 2;
        char *p = realloc(j->pend, cap);
        if (!p)
            return;
        j->pend = p;
        j->pend_cap = cap;
    }
    memcpy(j->pend + j->pend_len, s, n);
    j->pend_len += n;
}

static void sse_event(struct job *j, json_t *obj)
{
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!s)
        return;
    pend_add(j, "data: ", 6);
    pend_add(j, s, strlen(s));
    pend_add(j, "\n\n", 2);
    free(s);
}

/* One chunk: text (len bytes, may be 0), role (first chat chunk), finish ("stop"/"length" or NULL). */
static void sse_chunk(struct job *j, const char *text, size_t len, bool role, const char *finish)
{
    json_t *choice, *fin = finish ? json_string(finish) : json_null();
    /* the tokens whose text this chunk releases (the released end is text + len) */
    json_t *lp = j->lp.n > j->lp.sent && len ? lp_part(j, lp_until(j, j->out.released)) : json_null();
    if (j->g.chat) {
        json_t *delta = json_object();
        if (role)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (role || len)
            json_object_set_new(delta, "content", json_stringn(text, len));
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, "delta", delta, "logprobs", lp, "finish_reason", fin);
    } else {
        choice = json_pack("{s:s%, s:i, s:o, s:o}", "text", text, len, "index", 0, "logprobs", lp, "finish_reason", fin);
    }
    json_t *c = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", j->id, "object",
                          j->g.chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)j->created,
                          "model", j->a->model_id, "choices", choice);
    if (c && j->g.include_usage)
        json_object_set_new(c, "usage", json_null());
    sse_event(j, c);
}

static void sse_finish(struct job *j)
{
    const char *text;
    size_t n = textout_take(&j->out, true, &text);
    if (j->failed) {
        if (n)
            sse_chunk(j, text, n, false, NULL);
        sse_event(j, apid_err_json(&j->err));
    } else {
        if (n)
            sse_chunk(j, text, n, false, NULL);
        sse_chunk(j, "", 0, false, j->finish ? j->finish : "stop");
        if (j->g.include_usage) {
            json_t *c = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", j->id, "object",
                                  j->g.chat ? "chat.completion.chunk" : "text_completion", "created",
                                  (json_int_t)j->created, "model", j->a->model_id, "choices", "usage", usage_json(j));
            sse_event(j, c);
        }
    }
    pend_add(j, "data: [DONE]\n\n", 14);
    j->sent_final = true;
    /* the answer is complete: free the slot now, not when MHD is done with the connection */
    job_end_request(j);
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct job *j = cls;
    for (;;) {
        if (j->pend_off < j->pend_len) {
            size_t n = j->pend_len - j->pend_off < max ? j->pend_len - j->pend_off : max;
            memcpy(buf, j->pend + j->pend_off, n);
            j->pend_off += n;
            if (j->pend_off == j->pend_len)
                j->pend_off = j->pend_len = 0;
            return (ssize_t)n;
        }
        if (j->sent_final)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (j->ended) {
            if (j->gone)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            sse_finish(j);
            continue;
        }
        if (job_check_abort(j))
            continue;
        job_pump(j, PUMP_SLICE_MS);
        const char *text;
        size_t n = textout_take(&j->out, false, &text);
        if (n)
            sse_chunk(j, text, n, false, NULL);
    }
}

static void sse_free(void *cls)
{
    struct job *j = cls;
    const bool left = !j->sent_final || j->gone;
    if (!j->sent_final && !j->gone)
        metrics_event(&j->a->met, &j->a->met.disconnects); /* MHD saw the client leave */
    metrics_request(&j->a->met, j->h.endpoint, left ? APID_STATUS_CLIENT_GONE : 200,
                    (double)(now_ns() - j->h.t0_ns) / 1e9);
    job_free(j);
}

static int start_stream(struct job *j)
{
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, sse_read, j, sse_free);
    if (!r) {
        job_free(j);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    if (j->g.chat)
        sse_chunk(j, "", 0, true, NULL);
    enum MHD_Result ret = MHD_queue_response(j->h.conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r); /* the response (and with it the job) lives until MHD is done */
    return ret;
}

/* ---- the handler ---- */

/* The prompt's length in characters; a prompt of token ids counts as its decoded text. */
static size_t prompt_chars(const struct apid *a, const struct gen_req *g)
{
    if (!g->prompt_ids)
        return lp_chars(g->prompt, SIZE_MAX);
    char *text = NULL;
    size_t len = 0, n = 0;
    if (tok_decode(a->model->tok, g->prompt_ids, g->n_prompt_ids, true, &text, &len) == 0)
        n = lp_chars(text, len);
    free(text);
    return n;
}

static int fail(struct job *j, struct apid_http *h)
{
    int ret = apid_reply_error(h, &j->err);
    job_free(j);
    return ret;
}

int apid_handle_completion(struct apid_http *h, const char *body, size_t len, bool chat)
{
    struct apid *a = h->a;
    struct job *j = calloc(1, sizeof *j);
    if (!j) {
        struct apid_err e;
        apid_err_set(&e, 500, NULL, NULL, "out of memory");
        return apid_reply_error(h, &e);
    }
    j->a = a;
    j->h = *h;
    j->created = (long long)time(NULL);
    j->deadline_ns = h->t0_ns + (uint64_t)a->cfg.timeout_s * 1000000000ull;
    make_id(j->id, sizeof j->id, chat ? "chatcmpl-" : "cmpl-");
    textout_init(&j->out);
    if (!apid_serving(a)) {
        apid_err_set(&j->err, 503, NULL, "model_loading", "the model is loading (or the instance is not serving)");
        return fail(j, h);
    }
    json_error_t je;
    json_t *b = json_loadb(body, len, 0, &je);
    if (!b) {
        apid_err_set(&j->err, 400, NULL, "invalid_json", "the body is not valid JSON (line %d, column %d): %s", je.line,
                     je.column, je.text);
        return fail(j, h);
    }
    int rc = apid_parse_gen(a, b, chat, &j->g, &j->err);
    json_decref(b);
    if (rc)
        return fail(j, h);
    if (!chat && j->g.n_probs >= 0)
        j->prompt_chars = prompt_chars(a, &j->g);
    for (size_t i = 0; i < j->g.n_stops; i++)
        if (j->g.stops[i] && textout_add_stop(&j->out, j->g.stops[i], strlen(j->g.stops[i]))) {
            apid_err_set(&j->err, 400, "stop", "invalid_value", "%s", pi_errmsg());
            return fail(j, h);
        }
    if (job_admit(j) || job_submit(j)) {
        if (j->gone) {
            metrics_request(&a->met, h->endpoint, APID_STATUS_CLIENT_GONE, (double)(now_ns() - h->t0_ns) / 1e9);
            job_free(j);
            return MHD_NO;
        }
        return fail(j, h);
    }
    if (j->g.stream)
        return start_stream(j);
    while (!j->ended) {
        if (job_check_abort(j))
            break;
        job_pump(j, PUMP_SLICE_MS);
    }
    if (j->gone) {
        metrics_request(&a->met, h->endpoint, APID_STATUS_CLIENT_GONE, (double)(now_ns() - h->t0_ns) / 1e9);
        job_free(j);
        return MHD_NO; /* nobody to answer */
    }
    if (j->failed)
        return fail(j, h);
    const char *text;
    textout_take(&j->out, true, &text);
    json_t *resp = full_response(j, textout_text(&j->out));
    job_end_request(j);
    job_free(j);
    return apid_reply_json(h, 200, resp);
}
