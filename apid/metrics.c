/* metrics.c — counters, histograms and the Prometheus text format (see metrics.h). */
#include "metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_layout.h"
#include "stage.h"

/* Request latency (seconds): from a fast /health to a long generation. */
static const double lat_bounds[MET_LAT_BUCKETS] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                    0.25,  0.5,    1,     2.5,  5,     10,   30 };
/* Time to first token (seconds): prefill plus queueing. */
static const double ttft_bounds[MET_TTFT_BUCKETS] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                      0.5,   1,    2.5,   5,    10,  30 };

static const char *const ep_names[EP_COUNT] = {
    [EP_CHAT] = "/v1/chat/completions", [EP_COMPLETIONS] = "/v1/completions", [EP_MODELS] = "/v1/models",
    [EP_HEALTH] = "/health", [EP_METRICS] = "/metrics", [EP_TOKENIZE] = "/tokenize",
    [EP_DETOKENIZE] = "/detokenize", [EP_STATUS] = "/api/status", [EP_WEB] = "web", [EP_OTHER] = "other",
};

const char *const apid_metric_names[] = {
    "pinfer_http_requests_total", "pinfer_http_request_duration_seconds", "pinfer_time_to_first_token_seconds",
    "pinfer_prompt_tokens_total", "pinfer_generated_tokens_total", "pinfer_decode_tokens_per_second",
    "pinfer_client_disconnects_total", "pinfer_request_timeouts_total", "pinfer_requests_admitted",
    "pinfer_requests_waiting", "pinfer_queue_capacity", "pinfer_queue_depth", "pinfer_slots_busy",
    "pinfer_slots_total", "pinfer_kv_cache_used_tokens", "pinfer_context_size_tokens", "pinfer_instance_serving",
    "pinfer_stage_up", "pinfer_stage_restarts_total", "pinfer_stage_items_total",
    "pinfer_stage_compute_seconds_total", "pinfer_stage_wait_seconds_total", "pinfer_stage_step_seconds",
    "pinfer_stage_fallbacks_total", "pinfer_weights_bytes", "pinfer_gpu_ffn_share", "pinfer_predictor_recall",
    "pinfer_predictor_audited_tokens_total", NULL,
};

const char *apid_endpoint_name(enum apid_endpoint e) { return (unsigned)e < EP_COUNT ? ep_names[e] : "other"; }

void metrics_init(struct apid_metrics *m)
{
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
}

void metrics_fini(struct apid_metrics *m) { pthread_mutex_destroy(&m->mu); }

static void observe(struct met_hist *h, const double *bounds, size_t nb, double v)
{
    size_t i = 0;
    while (i < nb && v > bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->n++;
}

void metrics_request(struct apid_metrics *m, enum apid_endpoint e, int code, double seconds)
{
    if ((unsigned)e >= EP_COUNT)
        e = EP_OTHER;
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < MET_MAX_CODES; i++) {
        if (m->req[e][i].code == code || m->req[e][i].code == 0) {
            m->req[e][i].code = code;
            m->req[e][i].n++;
            break;
        }
    }
    observe(&m->latency[e], lat_bounds, MET_LAT_BUCKETS, seconds);
    pthread_mutex_unlock(&m->mu);
}

void metrics_ttft(struct apid_metrics *m, double seconds)
{
    pthread_mutex_lock(&m->mu);
    observe(&m->ttft, ttft_bounds, MET_TTFT_BUCKETS, seconds);
    pthread_mutex_unlock(&m->mu);
}

void metrics_tokens(struct apid_metrics *m, uint64_t prompt, uint64_t generated, double decode_tok_s)
{
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += prompt;
    m->generated_tokens += generated;
    if (decode_tok_s > 0)
        m->last_decode_tok_s = decode_tok_s;
    pthread_mutex_unlock(&m->mu);
}

void metrics_event(struct apid_metrics *m, uint64_t *counter)
{
    pthread_mutex_lock(&m->mu);
    (*counter)++;
    pthread_mutex_unlock(&m->mu);
}

struct out {
    char *p;
    size_t len, cap;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->p ? o->p + o->len : NULL, o->p ? o->cap - o->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if (o->p && o->len + (size_t)n < o->cap) {
            o->len += (size_t)n;
            return;
        }
        size_t cap = o->cap ? o->cap * 2 : 8192;
        while (cap <= o->len + (size_t)n)
            cap *= 2;
        char *q = realloc(o->p, cap);
        if (!q)
            return;
        o->p = q;
        o->cap = cap;
    }
}

static void head(struct out *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(struct out *o, const char *name, const char *labels, const struct met_hist *h, const double *b,
                 size_t nb)
{
    uint64_t cum = 0;
    for (size_t i = 0; i < nb; i++) {
        cum += h->counts[i];
        put(o, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, labels[0] ? "," : "", b[i], (unsigned long long)cum);
    }
    cum += h->counts[nb];
    put(o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, labels[0] ? "," : "", (unsigned long long)cum);
    put(o, "%s_sum%s%s%s %.6f\n", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "", h->sum);
    put(o, "%s_count%s%s%s %llu\n", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "", (unsigned long long)h->n);
}

#define LD(x) atomic_load_explicit(&(x), memory_order_relaxed)

static void render_ctl(struct out *o, const struct pi_ctl *c, int waiting)
{
    int busy = 0, queued = 0;
    long long kv = 0;
    for (int i = 0; i < PI_MAX_REQUESTS; i++) {
        const unsigned st = LD(c->reqs[i].state);
        busy += st != PI_REQ_FREE;
        queued += st == PI_REQ_QUEUED;
        if (st == PI_REQ_RUNNING)
            kv += c->reqs[i].n_prompt + (long long)LD(c->reqs[i].n_gen);
    }
    head(o, "pinfer_queue_depth", "gauge", "Requests waiting to run: in apid for a slot, and queued in a slot");
    put(o, "pinfer_queue_depth %d\n", waiting + queued);
    head(o, "pinfer_slots_busy", "gauge", "Request slots in use (queued, running, or finished and not released)");
    put(o, "pinfer_slots_busy %d\n", busy);
    head(o, "pinfer_slots_total", "gauge", "Request slots of the instance");
    put(o, "pinfer_slots_total %d\n", PI_MAX_REQUESTS);
    head(o, "pinfer_kv_cache_used_tokens", "gauge", "Tokens (prompt + generated) of the running requests");
    put(o, "pinfer_kv_cache_used_tokens %lld\n", kv);
    head(o, "pinfer_context_size_tokens", "gauge", "Context (KV cache) length of a sequence");
    put(o, "pinfer_context_size_tokens %d\n", c->n_ctx);
    head(o, "pinfer_instance_serving", "gauge", "1 when the instance serves requests");
    put(o, "pinfer_instance_serving %d\n", LD(c->state) == PI_INST_SERVING);
    head(o, "pinfer_weights_bytes", "gauge", "Bytes of model weights held in shared memory (host RAM)");
    put(o, "pinfer_weights_bytes %llu\n", (unsigned long long)LD(c->load_total_bytes));
    head(o, "pinfer_gpu_ffn_share", "gauge", "Share of FFN neurons computed by gpud");
    put(o, "pinfer_gpu_ffn_share %g\n", (double)c->gpu_ffn_share);

    static const struct { const char *name, *type, *help; } st_heads[] = {
        { "pinfer_stage_up", "gauge", "1 when the stage is READY" },
        { "pinfer_stage_restarts_total", "counter", "Restarts of the stage after a death" },
        { "pinfer_stage_items_total", "counter", "Work items (layer evaluations) the stage did" },
        { "pinfer_stage_compute_seconds_total", "counter", "Time the stage spent computing" },
        { "pinfer_stage_wait_seconds_total", "counter", "Time the stage spent waiting for its inputs" },
        { "pinfer_stage_step_seconds", "gauge", "Mean compute time per work item of the stage" },
        { "pinfer_stage_fallbacks_total", "counter", "Layers where gpud computed a dead stage's share" },
    };
    for (size_t h = 0; h < sizeof st_heads / sizeof st_heads[0]; h++) {
        head(o, st_heads[h].name, st_heads[h].type, st_heads[h].help);
        for (int s = 0; s < PI_STAGE_COUNT; s++) {
            const struct pi_stage_info *in = &c->stages[s];
            if (s == PI_STAGE_APID && !LD(in->started_ns))
                continue;
            const char *nm = stage_name((enum pi_stage)s);
            const uint64_t items = LD(in->items), comp = LD(in->compute_ns);
            switch (h) {
            case 0: put(o, "%s{stage=\"%s\"} %d\n", st_heads[h].name, nm, LD(in->state) == PI_STAGE_READY); break;
            case 1: put(o, "%s{stage=\"%s\"} %u\n", st_heads[h].name, nm, LD(in->restarts)); break;
            case 2: put(o, "%s{stage=\"%s\"} %llu\n", st_heads[h].name, nm, (unsigned long long)items); break;
            case 3: put(o, "%s{stage=\"%s\"} %.6f\n", st_heads[h].name, nm, comp / 1e9); break;
            case 4: put(o, "%s{stage=\"%s\"} %.6f\n", st_heads[h].name, nm, LD(in->wait_ns) / 1e9); break;
            case 5: put(o, "%s{stage=\"%s\"} %.9f\n", st_heads[h].name, nm, items ? comp / 1e9 / (double)items : 0.0); break;
            default: put(o, "%s{stage=\"%s\"} %llu\n", st_heads[h].name, nm, (unsigned long long)LD(in->fallbacks)); break;
            }
        }
    }
    uint64_t tokens = 0, fired = 0, missed = 0;
    for (int l = 0; l < PI_MAX_LAYERS && l < c->n_layer; l++) {
        tokens += LD(c->audit[l].tokens);
        fired += LD(c->audit[l].fired);
        missed += LD(c->audit[l].missed);
    }
    head(o, "pinfer_predictor_audited_tokens_total", "counter", "Token-layer evaluations the predictor audit checked");
    put(o, "pinfer_predictor_audited_tokens_total %llu\n", (unsigned long long)tokens);
    head(o, "pinfer_predictor_recall", "gauge", "Share of fired neurons the predictors predicted (audit; NaN without)");
    if (fired)
        put(o, "pinfer_predictor_recall %.6f\n", 1.0 - (double)missed / (double)fired);
    else
        put(o, "pinfer_predictor_recall NaN\n");
}

char *metrics_render(struct apid_metrics *m, const struct pi_ctl *ctl, int waiting, int admitted, int max_queue)
{
    struct out o = { 0 };
    pthread_mutex_lock(&m->mu);
    head(&o, "pinfer_http_requests_total", "counter", "HTTP requests answered, by endpoint and status code");
    for (int e = 0; e < EP_COUNT; e++)
        for (int i = 0; i < MET_MAX_CODES && m->req[e][i].code; i++)
            put(&o, "pinfer_http_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n", ep_names[e], m->req[e][i].code,
                (unsigned long long)m->req[e][i].n);
    head(&o, "pinfer_http_request_duration_seconds", "histogram", "Time from request to the end of its response");
    for (int e = 0; e < EP_COUNT; e++) {
        if (!m->latency[e].n)
            continue;
        char lab[64];
        snprintf(lab, sizeof lab, "endpoint=\"%s\"", ep_names[e]);
        hist(&o, "pinfer_http_request_duration_seconds", lab, &m->latency[e], lat_bounds, MET_LAT_BUCKETS);
    }
    head(&o, "pinfer_time_to_first_token_seconds", "histogram", "Time from a completion request to its first token");
    hist(&o, "pinfer_time_to_first_token_seconds", "", &m->ttft, ttft_bounds, MET_TTFT_BUCKETS);
    head(&o, "pinfer_prompt_tokens_total", "counter", "Prompt tokens of completion requests");
    put(&o, "pinfer_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    head(&o, "pinfer_generated_tokens_total", "counter", "Tokens generated for completion requests");
    put(&o, "pinfer_generated_tokens_total %llu\n", (unsigned long long)m->generated_tokens);
    head(&o, "pinfer_decode_tokens_per_second", "gauge", "Decode speed of the last finished request");
    put(&o, "pinfer_decode_tokens_per_second %.3f\n", m->last_decode_tok_s);
    head(&o, "pinfer_client_disconnects_total", "counter", "Completions whose client left before the end");
    put(&o, "pinfer_client_disconnects_total %llu\n", (unsigned long long)m->disconnects);
    head(&o, "pinfer_request_timeouts_total", "counter", "Completions stopped by the per-request timeout");
    put(&o, "pinfer_request_timeouts_total %llu\n", (unsigned long long)m->timeouts);
    pthread_mutex_unlock(&m->mu);
    head(&o, "pinfer_requests_admitted", "gauge", "Completion requests apid holds (in a slot or waiting for one)");
    put(&o, "pinfer_requests_admitted %d\n", admitted);
    head(&o, "pinfer_requests_waiting", "gauge", "Completion requests waiting in apid for a free slot");
    put(&o, "pinfer_requests_waiting %d\n", waiting);
    head(&o, "pinfer_queue_capacity", "gauge", "Completion requests apid accepts at once (more get 429)");
    put(&o, "pinfer_queue_capacity %d\n", max_queue);
    if (ctl)
        render_ctl(&o, ctl, waiting);
    return o.p;
}
