/* prof_snap.h — a copy of the stages' profile counters (pi_ctl.stages), and what a span between two
 * copies comes to per layer and per token: gpud's and cpud's compute and wait time per layer, the
 * bytes each read, the PCIe bytes of the hand-off and their rate over the span. pictl run / generate
 * take one copy when the first token arrives and one at the end, so --json-stats describes decode
 * alone (the prefill's steps would weigh every per-layer figure otherwise); pictl profile reads the
 * whole life of the instance (a copy against zero). */
#ifndef PI_PROF_SNAP_H
#define PI_PROF_SNAP_H

#include <jansson.h>
#include <stdint.h>

#include "pipeline_layout.h"

struct prof_row {
    uint64_t items, compute_ns, wait_ns, bytes;
};
struct prof_stage {
    struct prof_row total, layers[PI_MAX_LAYERS];
    uint64_t d2h_bytes, h2d_bytes;
};
struct prof_snap {
    struct prof_stage st[PI_STAGE_COUNT];
};

void prof_snap_take(const struct pi_ctl *ctl, struct prof_snap *s);
/* The span from `before` (NULL: from zero) to `after`, over n_tokens tokens taking span_ns (the
 * client's wall time of decode; pictl profile, which has no wall time, passes gpud's FFN-step time,
 * so its wall_ms and pcie_gb_s are over that):
 * {"tokens", "per_layer": [{layer, gpud_compute_us, gpud_wait_us, cpud_compute_us, cpud_wait_us,
 *  gpud_mb, cpud_mb} per item], "per_token": {gpud_compute_ms, gpud_wait_ms, cpud_compute_ms,
 *  cpud_wait_ms, pcie_d2h_mb, pcie_h2d_mb}, "pcie_gb_s" (hand-off bytes over the span's time)}.
 * NULL when out of memory. */
json_t *prof_snap_span(const struct prof_snap *before, const struct prof_snap *after, int64_t n_layer,
                       int64_t n_tokens, uint64_t span_ns);

#endif
