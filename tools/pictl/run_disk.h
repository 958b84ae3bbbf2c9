/* run_disk.h — pictl run --inproc --ram-budget: the disk tier in process (placement, bundle, neuron
 * cache, io_uring reader), its counters for [perf] and --json-stats, and the disk floor measured in
 * the same run (random record reads at the reader's size and queue depth). */
#ifndef PI_PICTL_RUN_DISK_H
#define PI_PICTL_RUN_DISK_H

#include <jansson.h>

#include "eval.h"
#include "ncache.h"
#include "stream.h"
#include "tiers.h"

struct run_disk {
    struct ncache *nc;
    struct stream_io sio;
    bool have_sio;
    uint8_t *tier;
    struct tier_report rep;
    char bundle[4096];
    const char *reader;
    double floor_mib_s;  /* random record reads, MiB/s (0: not measured) */
    double floor_ms_per_token;
};

/* Place the tiers for ram_budget_gib, open the bundle (bundle_path, NULL: next to the model) and
 * the cache, and attach it to c. */
int run_disk_open(struct run_disk *d, const struct pi_model *m, const char *model_path, const char *bundle_path,
                  double ram_budget_gib, unsigned qd, struct pi_ctx *c);
/* Measure the floor: n random records of the bundle read as the streamer reads them. */
int run_disk_floor(struct run_disk *d, int n);
void run_disk_print(const struct run_disk *d, FILE *f);
json_t *run_disk_json(const struct run_disk *d);
void run_disk_close(struct run_disk *d);

#endif
