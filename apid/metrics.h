/* metrics.h — apid's own counters and histograms, and the Prometheus text exposition of them plus
 * the instance's state read from the ctl segment at scrape time (stages, slots, restarts, audit).
 * Every metric name apid exports is listed in metrics.c's table (one place: the dashboard test
 * checks its queries against /metrics). Thread-safe (one mutex; scrapes are rare). */
#ifndef PI_APID_METRICS_H
#define PI_APID_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct pi_ctl;

enum apid_endpoint {
    EP_CHAT = 0, EP_COMPLETIONS, EP_MODELS, EP_HEALTH, EP_METRICS, EP_TOKENIZE, EP_DETOKENIZE, EP_STATUS,
    EP_WEB, EP_OTHER, EP_COUNT
};
const char *apid_endpoint_name(enum apid_endpoint e);

#define MET_MAX_CODES 16           /* distinct status codes tracked per endpoint */
#define MET_LAT_BUCKETS 14
#define MET_TTFT_BUCKETS 12

struct met_hist {
    uint64_t counts[MET_LAT_BUCKETS + 1]; /* per bucket (not cumulative); last = +Inf */
    double sum;
    uint64_t n;
};

struct apid_metrics {
    pthread_mutex_t mu;
    struct { int code; uint64_t n; } req[EP_COUNT][MET_MAX_CODES];
    struct met_hist latency[EP_COUNT];
    struct met_hist ttft;
    uint64_t prompt_tokens, generated_tokens;
    double last_decode_tok_s;
    uint64_t disconnects, timeouts, stops_early;
};

void metrics_init(struct apid_metrics *m);
void metrics_fini(struct apid_metrics *m);
void metrics_request(struct apid_metrics *m, enum apid_endpoint e, int code, double seconds);
void metrics_ttft(struct apid_metrics *m, double seconds);
void metrics_tokens(struct apid_metrics *m, uint64_t prompt, uint64_t generated, double decode_tok_s);
void metrics_event(struct apid_metrics *m, uint64_t *counter); /* ++ under the lock */

/* The exposition text (malloc'd). waiting: requests apid holds that wait for a slot. */
char *metrics_render(struct apid_metrics *m, const struct pi_ctl *ctl, int waiting, int admitted, int max_queue);

/* Every metric family name apid exports, NULL-terminated (for tests and the dashboard check). */
extern const char *const apid_metric_names[];

#endif
