/* sup_cmd.c — the supervisor's JSON commands (list in supervisor.h). Any bytes may arrive: every
 * field is checked for presence, type and range, and a bad one gets an error reply naming it. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "pi_err.h"
#include "sampling.h"
#include "stage.h"
#include "sup_internal.h"
#include "tokenizer.h"
#include "futex.h"

#define DEFAULT_N_PREDICT 128
#define ERR_MAX 512
#define SUP_PENALTY_MAX 2.0 /* frequency and presence penalties: OpenAI's range */

json_t *sup_reply_error(const char *fmt, ...)
{
    char buf[ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_t *r = json_pack("{s:b, s:s}", "ok", 0, "error", buf);
    return r ? r : json_pack("{s:b}", "ok", 0);
}

static json_t *reply_ok(void) { return json_pack("{s:b}", "ok", 1); }

/* Each getter: 0 absent (out untouched), 1 present and valid, -1 invalid (err names the field). */
static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out, char *err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        snprintf(err, ERR_MAX, "field '%s' must be an integer in [%lld, %lld]", key, lo, hi);
        return -1;
    }
    *out = json_integer_value(v);
    return 1;
}

static int get_num(json_t *o, const char *key, double lo, double hi, float *out, char *err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    double d = json_number_value(v);
    if (!json_is_number(v) || !(d >= lo && d <= hi)) {
        snprintf(err, ERR_MAX, "field '%s' must be a number in [%g, %g]", key, lo, hi);
        return -1;
    }
    *out = (float)d;
    return 1;
}

static int get_bool(json_t *o, const char *key, bool *out, char *err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v)) {
        snprintf(err, ERR_MAX, "field '%s' must be true or false", key);
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

/* A seed is a u64: JSON integers stop at 2^63-1, so a decimal string is accepted too. */
static int get_seed(json_t *o, uint64_t *out, char *err)
{
    json_t *v = json_object_get(o, "seed");
    if (!v)
        return 0;
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return 1;
    }
    const char *str = json_string_value(v);
    if (str && str[0] >= '0' && str[0] <= '9') {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(str, &end, 10);
        if (!errno && !*end) {
            *out = x;
            return 1;
        }
    }
    snprintf(err, ERR_MAX, "field 'seed' must be a non-negative integer (or its decimal string)");
    return -1;
}

/* Refuse keys we do not know: a typo ("temperature") must not be silently ignored. */
static int check_keys(json_t *o, const char *const *known, char *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        bool ok = false;
        for (const char *const *k = known; *k; k++)
            ok |= !strcmp(key, *k);
        if (!ok) {
            snprintf(err, ERR_MAX, "unknown field '%.64s'", key);
            return -1;
        }
    }
    return 0;
}

static json_t *sup_cmd_status(struct sup *s) { return json_pack("{s:b, s:o}", "ok", 1, "status", inst_status_json(s->ctl)); }

static json_t *parse_restart(json_t *req, struct sup_cmd *c, char *err)
{
    static const char *const known[] = { "cmd", "stage", NULL };
    if (check_keys(req, known, err))
        return sup_reply_error("%s", err);
    const char *name = json_string_value(json_object_get(req, "stage"));
    if (!name)
        return sup_reply_error("field 'stage' (a string: loaderd, predictord, cpud, gpud or apid) is required");
    int id = stage_from_name(name);
    if (id < 0)
        return sup_reply_error("unknown stage '%.64s' (one of loaderd, predictord, cpud, gpud, apid)", name);
    c->stage = (enum pi_stage)id;
    c->stage_name = name;
    return NULL;
}

static json_t *sup_cmd_restart(struct sup *s, const struct sup_cmd *c)
{
    pid_t old = s->st[c->stage].pid;
    if (sup_restart_stage(s, c->stage))
        return sup_reply_error("%s", pi_errmsg());
    return json_pack("{s:b, s:s, s:i}", "ok", 1, "stage", c->stage_name, "old_pid", (int)old);
}

static int find_free_slot(const struct sup *s)
{
    for (int i = 0; i < PI_MAX_REQUESTS; i++)
        /* relaxed: only this process moves a slot out of FREE, and it was this process that
         * stored FREE (release) — nothing else to synchronise with */
        if (atomic_load_explicit(&s->ctl->reqs[i].state, memory_order_relaxed) == PI_REQ_FREE)
            return i;
    return -1;
}

static json_t *parse_generate(json_t *req, struct sup_gen_args *g, char *err)
{
    static const char *const known[] = { "cmd", "prompt", "n_predict", "temp", "top_k", "top_p", "min_p",
                                         "repeat_penalty", "repeat_last_n", "seed", "ignore_eos", "dense",
                                         "dump_logits", "client_pid", "frequency_penalty", "presence_penalty",
                                         "logprobs", "prompt_tokens", NULL };
    if (check_keys(req, known, err))
        return sup_reply_error("%s", err);
    json_t *jp = json_object_get(req, "prompt"), *jt = json_object_get(req, "prompt_tokens");
    g->prompt = NULL;
    g->prompt_len = 0;
    g->prompt_tokens = NULL;
    if (jt && !jp) {
        if (!json_is_array(jt))
            return sup_reply_error("field 'prompt_tokens' must be an array of token ids");
        g->prompt_tokens = jt;
    } else if (!json_is_string(jp) || jt) {
        return sup_reply_error("field 'prompt' (a string) or 'prompt_tokens' (an array of token ids) is required");
    } else {
        g->prompt = json_string_value(jp);
        g->prompt_len = json_string_length(jp);
    }

    struct samp_params *sp = &g->sp;
    samp_defaults(sp);
    g->n_predict = DEFAULT_N_PREDICT, g->top_k = sp->top_k, g->last_n = sp->repeat_last_n, g->client = 0;
    g->ignore_eos = false, g->dense = false, g->n_probs = -1;
    g->seed = (uint64_t)inst_now_ns();
    if (get_int(req, "n_predict", -1, 1LL << 30, &g->n_predict, err) < 0 ||
        get_num(req, "temp", 0, 100, &sp->temp, err) < 0 || get_int(req, "top_k", 0, 1LL << 30, &g->top_k, err) < 0 ||
        get_num(req, "top_p", 0, 1, &sp->top_p, err) < 0 || get_num(req, "min_p", 0, 1, &sp->min_p, err) < 0 ||
        get_num(req, "repeat_penalty", 0.01, 100, &sp->repeat_penalty, err) < 0 ||
        get_int(req, "repeat_last_n", 0, 1LL << 24, &g->last_n, err) < 0 || get_seed(req, &g->seed, err) < 0 ||
        get_bool(req, "ignore_eos", &g->ignore_eos, err) < 0 || get_bool(req, "dense", &g->dense, err) < 0 ||
        get_int(req, "client_pid", 0, INT32_MAX, &g->client, err) < 0 ||
        get_num(req, "frequency_penalty", -SUP_PENALTY_MAX, SUP_PENALTY_MAX, &sp->frequency_penalty, err) < 0 ||
        get_num(req, "presence_penalty", -SUP_PENALTY_MAX, SUP_PENALTY_MAX, &sp->presence_penalty, err) < 0 ||
        get_int(req, "logprobs", 0, PI_LP_MAX_TOP, &g->n_probs, err) < 0)
        return sup_reply_error("%s", err);
    /* the log-probability table holds PI_LP_MAX_TOKENS records per request (pipeline_layout.h) */
    if (g->n_probs >= 0 && (g->n_predict < 0 || g->n_predict > PI_LP_MAX_TOKENS))
        return sup_reply_error("with 'logprobs', 'n_predict' must be set and at most %d", PI_LP_MAX_TOKENS);
    json_t *jd = json_object_get(req, "dump_logits");
    g->dump = jd ? json_string_value(jd) : "";
    if (!g->dump || (g->dump[0] && (g->dump[0] != '/' || strlen(g->dump) >= PI_PATH_MAX)))
        return sup_reply_error("field 'dump_logits' must be an absolute path shorter than %d bytes", PI_PATH_MAX);
    return NULL;
}

/* prompt_tokens as given (no BOS added), each checked against the vocabulary: NULL or the error. */
static json_t *copy_prompt_tokens(const struct pi_tokenizer *tok, json_t *arr, int32_t **ids, size_t *n_ids)
{
    const size_t n = json_array_size(arr);
    if (n > PI_REQ_MAX_TOKENS)
        return sup_reply_error("the prompt has %zu tokens but a request holds at most %d", n, PI_REQ_MAX_TOKENS);
    if (n && !(*ids = malloc(n * sizeof **ids)))
        return sup_reply_error("out of memory");
    *n_ids = n;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        const json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= tok_n_vocab(tok))
            return sup_reply_error("prompt_tokens[%zu] is not a token id (0..%d)", i, tok_n_vocab(tok) - 1);
        (*ids)[i] = (int32_t)id;
    }
    return NULL;
}

json_t *sup_gen_tokenize(const struct pi_tokenizer *tok, const struct sup_gen_args *g, int32_t n_ctx, int32_t **ids,
                         size_t *n_ids)
{
    *ids = NULL;
    *n_ids = 0;
    json_t *reply = NULL;
    if (g->prompt_tokens) {
        reply = copy_prompt_tokens(tok, g->prompt_tokens, ids, n_ids);
    } else {
        int rc = tok_encode(tok, g->prompt, g->prompt_len, tok_add_bos(tok), true, ids, n_ids);
        if (rc)
            return sup_reply_error("cannot tokenize the prompt: %s: %s", pi_strerror(rc), pi_errmsg());
    }
    if (reply)
        ; /* reported below */
    else if (*n_ids == 0)
        reply = sup_reply_error("the prompt is empty (no tokens)");
    else if (*n_ids >= (size_t)n_ctx)
        reply = sup_reply_error("the prompt has %zu tokens but the context holds %d (start the instance with a larger -c)", *n_ids, n_ctx);
    else if (*n_ids > PI_REQ_MAX_TOKENS)
        reply = sup_reply_error("the prompt has %zu tokens but a request holds at most %d", *n_ids, PI_REQ_MAX_TOKENS);
    if (reply) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
    }
    return reply;
}

/* Fill free slot `slot` with the request and queue it for gpud; returns its id. */
static uint64_t fill_slot(struct sup *s, int slot, const struct sup_gen_args *g, const int32_t *ids, size_t n_ids)
{
    struct pi_request *r = &s->ctl->reqs[slot];
    r->id = ++s->req_counter;
    r->temp = g->sp.temp;
    r->top_p = g->sp.top_p;
    r->min_p = g->sp.min_p;
    r->repeat_penalty = g->sp.repeat_penalty;
    r->top_k = (int32_t)g->top_k;
    r->repeat_last_n = (int32_t)g->last_n;
    r->frequency_penalty = g->sp.frequency_penalty;
    r->presence_penalty = g->sp.presence_penalty;
    r->seed = g->seed;
    r->n_predict = (int32_t)g->n_predict;
    r->flags = (g->ignore_eos ? PI_REQ_IGNORE_EOS : 0) | (g->dense ? PI_REQ_DENSE : 0) |
               (g->n_probs >= 0 ? PI_REQ_LOGPROBS : 0);
    r->n_probs = g->n_probs >= 0 ? (int32_t)g->n_probs : 0;
    r->n_prompt = (int32_t)n_ids;
    r->error = 0;
    r->prefill_ns = r->decode_ns = 0;
    r->replays = 0;
    r->queued_steps = 0;
    atomic_store_explicit(&r->cancel, 0, memory_order_relaxed);
    atomic_store_explicit(&r->seq, -1, memory_order_relaxed);
    r->errmsg[0] = '\0';
    snprintf(r->logits_path, sizeof r->logits_path, "%s", g->dump);
    memcpy(r->tokens, ids, n_ids * sizeof *ids);
    atomic_store_explicit(&r->n_gen, 0, memory_order_relaxed);
    s->req_owner[slot] = (pid_t)g->client;
    s->req_autorelease[slot] = false;
    /* release: gpud acquires QUEUED and then reads every field written above */
    atomic_store_explicit(&r->state, PI_REQ_QUEUED, memory_order_release);
    /* release: a gpud that sees the new req_seq (acquire) also sees the QUEUED slot */
    atomic_fetch_add_explicit(&s->ctl->req_seq, 1, memory_order_release);
    pi_futex_wake_all(&s->ctl->req_seq);
    return r->id;
}

static json_t *slot_reply(uint64_t id, int slot, int n_prompt)
{
    return json_pack("{s:b, s:I, s:i, s:i}", "ok", 1, "id", (json_int_t)id, "slot", slot, "n_prompt", n_prompt);
}

static json_t *sup_cmd_generate(struct sup *s, json_t *req, const struct sup_gen_args *g)
{
    const unsigned state = atomic_load_explicit(&s->ctl->state, memory_order_relaxed);
    if (state != PI_INST_SERVING)
        return sup_reply_error("the instance is %s, not serving%s%s", inst_state_name(state),
                               s->ctl->error[0] ? ": " : "", s->ctl->error);
    int32_t *ids;
    size_t n_ids;
    json_t *reply = sup_gen_tokenize(s->cfg->model->tok, g, s->ctl->n_ctx, &ids, &n_ids);
    if (reply)
        return reply;
    const int slot = s->n_queue ? -1 : find_free_slot(s); /* the queue goes first: requests keep their order */
    if (slot >= 0) {
        const uint64_t id = fill_slot(s, slot, g, ids, n_ids);
        free(ids);
        return slot_reply(id, slot, (int)n_ids);
    }
    if (s->n_queue == SUP_QUEUE_MAX) {
        free(ids);
        return sup_reply_error("busy: all %d request slots are in use and %d requests wait", PI_MAX_REQUESTS,
                               SUP_QUEUE_MAX);
    }
    atomic_fetch_add_explicit(&s->ctl->slot_waits, 1, memory_order_relaxed);
    struct sup_waiting *w = &s->queue[s->n_queue++];
    *w = (struct sup_waiting){ .ticket = ++s->ticket_counter, .req = json_incref(req), .ids = ids, .n_ids = n_ids,
                               .client = (pid_t)g->client };
    sup_log("all %d request slots are taken: request waits (ticket %llu, %d waiting)", PI_MAX_REQUESTS,
            (unsigned long long)w->ticket, s->n_queue);
    return json_pack("{s:b, s:I, s:i}", "ok", 1, "ticket", (json_int_t)w->ticket, "queued", s->n_queue);
}

static void drop_waiting(struct sup *s, int k)
{
    json_decref(s->queue[k].req);
    free(s->queue[k].ids);
    memmove(&s->queue[k], &s->queue[k + 1], (size_t)(s->n_queue - k - 1) * sizeof s->queue[0]);
    s->n_queue--;
}

void sup_queue_fini(struct sup *s)
{
    while (s->n_queue)
        drop_waiting(s, 0);
}

/* Waiting requests into free slots, oldest first; their tickets are answered when polled. */
static void sup_promote(struct sup *s)
{
    char err[ERR_MAX] = "";
    int slot;
    while (s->n_queue && (slot = find_free_slot(s)) >= 0) {
        struct sup_waiting *w = &s->queue[0];
        struct sup_gen_args g;
        json_t *bad = parse_generate(w->req, &g, err); /* it parsed when it came: the same again */
        if (!bad) {
            const uint64_t id = fill_slot(s, slot, &g, w->ids, w->n_ids);
            if (s->n_assigned == SUP_QUEUE_MAX) { /* a client that never asks: forget the oldest */
                memmove(&s->assigned[0], &s->assigned[1], (SUP_QUEUE_MAX - 1) * sizeof s->assigned[0]);
                s->n_assigned--;
            }
            s->assigned[s->n_assigned++] = (struct sup_assigned){ .ticket = w->ticket, .id = id, .slot = slot,
                                                                   .n_prompt = (int)w->n_ids };
        }
        json_decref(bad);
        drop_waiting(s, 0);
    }
}

static json_t *parse_ticket(json_t *req, struct sup_cmd *c, char *err)
{
    static const char *const known[] = { "cmd", "ticket", NULL };
    if (check_keys(req, known, err) || get_int(req, "ticket", 1, INT64_MAX, &c->ticket, err) <= 0)
        return sup_reply_error("%s", err[0] ? err : "field 'ticket' (an integer) is required");
    return NULL;
}

/* A waiting request's client asks whether it has a slot yet. */
static json_t *sup_cmd_ticket(struct sup *s, const struct sup_cmd *c)
{
    sup_promote(s);
    for (int k = 0; k < s->n_assigned; k++)
        if (s->assigned[k].ticket == (uint64_t)c->ticket) {
            const struct sup_assigned a = s->assigned[k];
            memmove(&s->assigned[k], &s->assigned[k + 1], (size_t)(s->n_assigned - k - 1) * sizeof a);
            s->n_assigned--;
            return slot_reply(a.id, a.slot, a.n_prompt);
        }
    for (int k = 0; k < s->n_queue; k++)
        if (s->queue[k].ticket == (uint64_t)c->ticket)
            return json_pack("{s:b, s:I, s:i}", "ok", 1, "ticket", (json_int_t)c->ticket, "queued", k + 1);
    return sup_reply_error("no waiting request has ticket %lld", c->ticket);
}

/* Ask gpud to stop request r (it ends it as FAILED "cancelled" at its next step) and free the slot
 * once it has. */
static void cancel_request(struct sup *s, int slot)
{
    struct pi_request *r = &s->ctl->reqs[slot];
    atomic_store_explicit(&r->cancel, 1, memory_order_relaxed);
    s->req_autorelease[slot] = true;
    /* release: a sleeping gpud wakes and looks at the table */
    atomic_fetch_add_explicit(&s->ctl->req_seq, 1, memory_order_release);
    pi_futex_wake_all(&s->ctl->req_seq);
}

static json_t *sup_cmd_cancel(struct sup *s, const struct sup_cmd *c)
{
    const long long slot = c->slot, id = c->id;
    struct pi_request *r = &s->ctl->reqs[slot];
    const unsigned st = atomic_load_explicit(&r->state, memory_order_acquire);
    if (st == PI_REQ_FREE || r->id != (uint64_t)id)
        return sup_reply_error("slot %lld does not hold request %lld", slot, id);
    sup_log("cancelling request %lld (slot %lld, %s)", id, slot, inst_req_state_name(st));
    if (st == PI_REQ_DONE || st == PI_REQ_FAILED) {
        atomic_store_explicit(&r->state, PI_REQ_FREE, memory_order_release);
        s->req_owner[slot] = 0;
        sup_promote(s);
    } else {
        cancel_request(s, (int)slot);
    }
    return reply_ok();
}

/* release and cancel name a request the same way */
static json_t *parse_release(json_t *req, struct sup_cmd *c, char *err)
{
    static const char *const known[] = { "cmd", "slot", "id", NULL };
    c->slot = c->id = -1;
    if (check_keys(req, known, err) || get_int(req, "slot", 0, PI_MAX_REQUESTS - 1, &c->slot, err) <= 0 ||
        get_int(req, "id", 1, INT64_MAX, &c->id, err) <= 0)
        return sup_reply_error("%s", err[0] ? err : "fields 'slot' and 'id' (integers) are required");
    return NULL;
}

static json_t *sup_cmd_release(struct sup *s, const struct sup_cmd *c)
{
    const long long slot = c->slot, id = c->id;
    struct pi_request *r = &s->ctl->reqs[slot];
    const unsigned st = atomic_load_explicit(&r->state, memory_order_acquire);
    if (st == PI_REQ_FREE || r->id != (uint64_t)id)
        return sup_reply_error("slot %lld does not hold request %lld", slot, id);
    if (st != PI_REQ_DONE && st != PI_REQ_FAILED)
        return sup_reply_error("request %lld is still %s", id, inst_req_state_name(st));
    /* release: pairs with our own relaxed FREE check in find_free_slot; orders nothing else */
    atomic_store_explicit(&r->state, PI_REQ_FREE, memory_order_release);
    s->req_owner[slot] = 0;
    sup_promote(s);
    return reply_ok();
}

json_t *sup_cmd_parse(const char *msg, size_t len, json_t **reqp, struct sup_cmd *c)
{
    char err[ERR_MAX] = "";
    json_error_t jerr;
    memset(c, 0, sizeof *c);
    *reqp = NULL;
    json_t *req = json_loadb(msg, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!req)
        return sup_reply_error("invalid JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    json_t *reply = NULL;
    const char *cmd = json_string_value(json_object_get(req, "cmd"));
    if (!json_is_object(req))
        reply = sup_reply_error("a command must be a JSON object");
    else if (!cmd)
        reply = sup_reply_error("field 'cmd' (a string) is required");
    else if (!strcmp(cmd, "status"))
        c->kind = SUP_CMD_STATUS;
    else if (!strcmp(cmd, "generate")) {
        c->kind = SUP_CMD_GENERATE;
        reply = parse_generate(req, &c->gen, err);
    } else if (!strcmp(cmd, "release")) {
        c->kind = SUP_CMD_RELEASE;
        reply = parse_release(req, c, err);
    } else if (!strcmp(cmd, "ticket")) {
        c->kind = SUP_CMD_TICKET;
        reply = parse_ticket(req, c, err);
    } else if (!strcmp(cmd, "cancel")) {
        c->kind = SUP_CMD_CANCEL;
        reply = parse_release(req, c, err);
    } else if (!strcmp(cmd, "restart")) {
        c->kind = SUP_CMD_RESTART;
        reply = parse_restart(req, c, err);
    } else if (!strcmp(cmd, "stop"))
        c->kind = SUP_CMD_STOP;
    else
        reply = sup_reply_error("unknown command '%.64s' (status, generate, ticket, cancel, release, restart, stop)", cmd);
    if (reply) {
        json_decref(req);
        return reply;
    }
    *reqp = req;
    return NULL;
}

json_t *sup_handle(struct sup *s, const char *msg, size_t len)
{
    struct sup_cmd c;
    json_t *req;
    json_t *reply = sup_cmd_parse(msg, len, &req, &c);
    if (reply)
        return reply;
    switch (c.kind) {
    case SUP_CMD_STATUS: reply = sup_cmd_status(s); break;
    case SUP_CMD_GENERATE: reply = sup_cmd_generate(s, req, &c.gen); break;
    case SUP_CMD_TICKET: reply = sup_cmd_ticket(s, &c); break;
    case SUP_CMD_RELEASE: reply = sup_cmd_release(s, &c); break;
    case SUP_CMD_CANCEL: reply = sup_cmd_cancel(s, &c); break;
    case SUP_CMD_RESTART: reply = sup_cmd_restart(s, &c); break;
    case SUP_CMD_STOP:
        sup_log("stop requested");
        s->stop = true;
        s->stop_reply = true;
        break;
    }
    json_decref(req); /* after the command: c's strings point into it */
    if (!reply && !s->stop_reply)
        reply = sup_reply_error("out of memory building the reply");
    return reply;
}

void sup_sweep_requests(struct sup *s)
{
    for (int i = 0; i < PI_MAX_REQUESTS; i++) {
        struct pi_request *r = &s->ctl->reqs[i];
        const unsigned st = atomic_load_explicit(&r->state, memory_order_acquire);
        const bool gone = s->req_owner[i] > 0 && !inst_pid_alive(s->req_owner[i]);
        if ((st == PI_REQ_QUEUED || st == PI_REQ_RUNNING) && gone && !atomic_load(&r->cancel)) {
            sup_log("cancelling request %llu (slot %d): its client %d is gone", (unsigned long long)r->id, i,
                    (int)s->req_owner[i]);
            cancel_request(s, i);
        } else if ((st == PI_REQ_DONE || st == PI_REQ_FAILED) && (gone || s->req_autorelease[i])) {
            sup_log("freeing slot %d (request %llu): %s", i, (unsigned long long)r->id,
                    gone ? "its client is gone" : "cancelled");
            atomic_store_explicit(&r->state, PI_REQ_FREE, memory_order_release);
            s->req_owner[i] = 0;
            s->req_autorelease[i] = false;
        }
    }    for (int k = s->n_queue - 1; k >= 0; k--)
        if (s->queue[k].client > 0 && !inst_pid_alive(s->queue[k].client)) {
            sup_log("dropping a waiting request (ticket %llu): its client %d is gone",
                    (unsigned long long)s->queue[k].ticket, (int)s->queue[k].client);
            drop_waiting(s, k);
        }
    sup_promote(s);
}

void sup_fail_requests(struct sup *s, const char *why)
{
    for (int i = 0; i < PI_MAX_REQUESTS; i++) {
        struct pi_request *r = &s->ctl->reqs[i];
        const unsigned st = atomic_load_explicit(&r->state, memory_order_acquire);
        if (st != PI_REQ_QUEUED && st != PI_REQ_RUNNING)
            continue;
        snprintf(r->errmsg, sizeof r->errmsg, "%s", why);
        r->error = -PI_E_IO;
        /* release: a client that acquires FAILED sees errmsg */
        atomic_store_explicit(&r->state, PI_REQ_FAILED, memory_order_release);
        /* wake clients sleeping on n_gen: they re-check the state */
        pi_futex_wake_all(&r->n_gen);
    }
}
