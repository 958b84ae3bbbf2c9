/* endpoints.c — GET /v1/models, /health, /metrics, /api/status (the web page's live view) and
 * POST /tokenize, /detokenize. */
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "apid.h"
#include "model.h"
#include "pi_err.h"
#include "tokenizer.h"

#define DETOK_MAX_TOKENS PI_REQ_MAX_TOKENS
#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)

bool apid_serving(const struct apid *a)
{
    /* acquire: pairs with the loader thread's release store, after which model and family are set */
    return atomic_load_explicit(&a->ready, memory_order_acquire) &&
           LD(a->conn.ctl->state) == PI_INST_SERVING;
}

static json_t *model_entry(const struct apid *a)
{
    json_t *meta = json_pack("{s:s, s:s, s:i}", "chat_template", chat_family_name(a->family), "chat_template_source",
                             a->template_source, "n_ctx", a->conn.ctl->n_ctx);
    if (a->template_warning[0])
        json_object_set_new(meta, "warning", json_string(a->template_warning));
    return json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", a->model_id, "object", "model", "created",
                     (json_int_t)a->created, "owned_by", "pinfer", "meta", meta);
}

static int not_ready(struct apid_http *h)
{
    struct apid_err e;
    apid_err_set(&e, 503, NULL, "model_loading", "the model is loading (or the instance is not serving)");
    return apid_reply_error(h, &e);
}

int apid_handle_models(struct apid_http *h, const char *id)
{
    struct apid *a = h->a;
    if (!atomic_load_explicit(&a->ready, memory_order_acquire))
        return not_ready(h);
    if (id) {
        if (strcmp(id, a->model_id) && (!a->cfg.model_alias[0] || strcmp(id, a->cfg.model_alias))) {
            struct apid_err e;
            apid_err_set(&e, 404, "model", "model_not_found", "the model '%.128s' does not exist", id);
            return apid_reply_error(h, &e);
        }
        return apid_reply_json(h, 200, model_entry(a));
    }
    return apid_reply_json(h, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", model_entry(a)));
}

int apid_handle_health(struct apid_http *h)
{
    const struct apid *a = h->a;
    const unsigned st = LD(a->conn.ctl->state);
    const char *s = apid_serving(a) ? "ok"
                    : st == PI_INST_FAILED ? "failed"
                    : st == PI_INST_STOPPING ? "stopping"
                                             : "loading";
    return apid_reply_json(h, apid_serving(a) ? 200 : 503, json_pack("{s:s}", "status", s));
}

int apid_handle_metrics(struct apid_http *h)
{
    struct apid *a = h->a;
    pthread_mutex_lock(&a->mu);
    const int waiting = a->n_waiting, admitted = a->n_admitted;
    pthread_mutex_unlock(&a->mu);
    char *text = metrics_render(&a->met, a->conn.ctl, waiting, admitted, a->cfg.max_queue);
    if (!text)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(h->conn, 200, r);
    MHD_destroy_response(r);
    metrics_request(&a->met, h->endpoint, 200, (double)(stage_now_ns() - h->t0_ns) / 1e9);
    return ret;
}

/* {"content": TEXT, "add_special": B (true), "with_pieces": B} → {"tokens": [...]} (pieces: objects)
 * {"tokens": [...]} → {"content": TEXT} (llama.cpp's server names) */
int apid_handle_tokenize(struct apid_http *h, const char *body, size_t len, bool detok)
{
    struct apid *a = h->a;
    struct apid_err e;
    if (!atomic_load_explicit(&a->ready, memory_order_acquire))
        return not_ready(h);
    json_error_t je;
    json_t *b = json_loadb(body ? body : "", len, 0, &je);
    if (!b || !json_is_object(b)) {
        json_decref(b);
        apid_err_set(&e, 400, NULL, "invalid_json", "the body must be a JSON object%s%s", b ? "" : ": ", b ? "" : je.text);
        return apid_reply_error(h, &e);
    }
    const struct pi_tokenizer *tok = a->model->tok;
    json_t *reply = NULL;
    if (detok) {
        json_t *ids = json_object_get(b, "tokens");
        if (!json_is_array(ids) || json_array_size(ids) > DETOK_MAX_TOKENS) {
            apid_err_set(&e, 400, "tokens", "invalid_type", "'tokens' must be an array of at most %d token ids",
                         DETOK_MAX_TOKENS);
            goto bad;
        }
        const size_t n = json_array_size(ids);
        int32_t *v = malloc((n ? n : 1) * sizeof *v);
        for (size_t i = 0; v && i < n; i++) {
            json_t *x = json_array_get(ids, i);
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= tok_n_vocab(tok)) {
                apid_err_set(&e, 400, "tokens", "invalid_value", "'tokens[%zu]' must be a token id in [0, %d)", i,
                             tok_n_vocab(tok));
                free(v);
                goto bad;
            }
            v[i] = (int32_t)json_integer_value(x);
        }
        char *text = NULL;
        size_t tl = 0;
        if (!v || tok_decode(tok, v, n, false, &text, &tl)) {
            free(v);
            apid_err_set(&e, 500, NULL, NULL, "cannot decode: %s", pi_errmsg());
            goto bad;
        }
        free(v);
        json_t *s = json_stringn(text, tl);
        free(text);
        if (!s) /* the ids end inside a character, or are not text */
            s = json_string("");
        reply = json_pack("{s:o}", "content", s);
    } else {
        json_t *c = json_object_get(b, "content");
        json_t *as = json_object_get(b, "add_special"), *wp = json_object_get(b, "with_pieces");
        if (!json_is_string(c)) {
            apid_err_set(&e, 400, "content", "invalid_type", "'content' (a string) is required");
            goto bad;
        }
        if ((as && !json_is_boolean(as)) || (wp && !json_is_boolean(wp))) {
            apid_err_set(&e, 400, as && !json_is_boolean(as) ? "add_special" : "with_pieces", "invalid_type",
                         "'%s' must be true or false", as && !json_is_boolean(as) ? "add_special" : "with_pieces");
            goto bad;
        }
        const bool add = !as || json_is_true(as);
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(tok, json_string_value(c), json_string_length(c), add && tok_add_bos(tok), true, &ids, &n)) {
            apid_err_set(&e, 400, "content", "invalid_value", "cannot tokenize: %s", pi_errmsg());
            goto bad;
        }
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++) {
            if (json_is_true(wp)) {
                char piece[256];
                int pl = tok_piece(tok, ids[i], true, piece, sizeof piece);
                json_t *ps = pl >= 0 ? json_stringn(piece, (size_t)pl < sizeof piece ? (size_t)pl : sizeof piece) : NULL;
                json_array_append_new(arr, json_pack("{s:i, s:o}", "id", ids[i], "piece", ps ? ps : json_null()));
            } else {
                json_array_append_new(arr, json_integer(ids[i]));
            }
        }
        free(ids);
        reply = json_pack("{s:o}", "tokens", arr);
    }
    json_decref(b);
    return apid_reply_json(h, 200, reply);
bad:
    json_decref(b);
    return apid_reply_error(h, &e);
}

static const char *stage_state_str(unsigned s)
{
    switch (s) {
    case PI_STAGE_DOWN: return "down";
    case PI_STAGE_STARTING: return "starting";
    case PI_STAGE_READY: return "ready";
    case PI_STAGE_FAILED: return "failed";
    default: return "?";
    }
}

static const char *inst_state_str(unsigned s)
{
    static const char *const names[] = { "starting", "loading", "serving", "stopping", "failed" };
    return s < sizeof names / sizeof names[0] ? names[s] : "?";
}

/* What the web page's pipeline view shows, in one object (polled about once a second). */
int apid_handle_status(struct apid_http *h)
{
    struct apid *a = h->a;
    const struct pi_ctl *c = a->conn.ctl;
    const uint64_t now = stage_now_ns();
    json_t *stages = json_object();
    for (int s = 0; s < PI_STAGE_COUNT; s++) {
        const struct pi_stage_info *in = &c->stages[s];
        if (s == PI_STAGE_APID && !LD(in->started_ns))
            continue;
        const uint64_t items = LD(in->items), comp = LD(in->compute_ns), hb = LD(in->heartbeat_ns);
        json_object_set_new(stages, stage_name((enum pi_stage)s),
                            json_pack("{s:s, s:i, s:i, s:I, s:f, s:f, s:I}", "state", stage_state_str(LD(in->state)),
                                      "pid", (int)LD(in->pid), "restarts", (int)LD(in->restarts), "items",
                                      (json_int_t)items, "step_ms", items ? comp / 1e6 / (double)items : 0.0,
                                      "heartbeat_age_ms", hb && now > hb ? (now - hb) / 1e6 : 0.0, "fallbacks",
                                      (json_int_t)LD(in->fallbacks)));
    }
    json_t *slots = json_array();
    int busy = 0;
    for (int i = 0; i < PI_MAX_REQUESTS; i++) {
        const unsigned st = LD(c->reqs[i].state);
        static const char *const names[] = { "free", "queued", "running", "done", "failed" };
        busy += st != PI_REQ_FREE;
        json_array_append_new(slots, json_pack("{s:s, s:i, s:i}", "state", st < 5 ? names[st] : "?", "n_prompt",
                                               st ? c->reqs[i].n_prompt : 0, "n_gen", st ? (int)LD(c->reqs[i].n_gen) : 0));
    }
    uint64_t fired = 0, missed = 0;
    for (int l = 0; l < PI_MAX_LAYERS && l < c->n_layer; l++) {
        fired += LD(c->audit[l].fired);
        missed += LD(c->audit[l].missed);
    }
    pthread_mutex_lock(&a->mu);
    const int waiting = a->n_waiting, admitted = a->n_admitted;
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_lock(&a->met.mu);
    const double tok_s = a->met.last_decode_tok_s;
    const uint64_t gen = a->met.generated_tokens, prompt = a->met.prompt_tokens;
    pthread_mutex_unlock(&a->met.mu);
    json_t *j = json_pack("{s:s, s:s, s:s, s:i, s:o, s:o, s:i, s:{s:i, s:i, s:i}, s:f, s:I, s:I, s:{s:I, s:f}, s:o}",
                          "state", inst_state_str(LD(c->state)), "instance", c->instance, "model",
                          a->model_id[0] ? a->model_id : "", "n_ctx", c->n_ctx, "stages", stages, "slots", slots,
                          "slots_busy", busy, "queue", "waiting", waiting, "admitted", admitted, "capacity",
                          a->cfg.max_queue, "decode_tok_s", tok_s, "generated_tokens", (json_int_t)gen,
                          "prompt_tokens", (json_int_t)prompt, "memory", "weights_bytes",
                          (json_int_t)LD(c->load_total_bytes), "gpu_ffn_share", (double)c->gpu_ffn_share,
                          "predictor_recall", fired ? json_real(1.0 - (double)missed / (double)fired) : json_null());
    if (j && atomic_load_explicit(&a->ready, memory_order_acquire))
        json_object_set_new(j, "chat_template", json_string(chat_family_name(a->family)));
    return apid_reply_json(h, 200, j);
}
