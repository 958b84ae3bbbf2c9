/* run_disk_status.h — the pipeline's disk tier as pictl status / profile / generate --json-stats
 * show it: the counters of the instance's "ncache" segment (ipc/ncache_shm.h). */
#ifndef PI_PICTL_RUN_DISK_STATUS_H
#define PI_PICTL_RUN_DISK_STATUS_H

#include <jansson.h>
#include <stdio.h>

#include "pipeline_layout.h"

/* {"reader", "loaderd_serving", "tokens", "bytes_read", "bytes_per_token", "hit_rate", ...}, or NULL
 * when the instance has no disk tier (no --ram-budget, or cpud has not opened it yet). */
json_t *run_disk_status_json(const struct pi_ctl *ctl);
/* One "# disk tier: ..." line for pictl profile. */
void run_disk_status_print(FILE *out, json_t *disk);

#endif
