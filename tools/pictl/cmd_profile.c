/* pictl profile — per stage and per layer: work items, compute and wait time, weight bytes read
 * (ctl.stages[s].layers, relaxed counters the stages add to), as a table or --json; --trace FILE
 * writes the stages' recent work items as Chrome trace-event JSON (chrome://tracing, Perfetto). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "instance.h"
#include "run_disk_status.h"
#include "pi_err.h"
#include "pictl.h"
#include "prof_snap.h"
#include "stage.h"

#define NS_PER_MS 1e6
#define NS_PER_US 1e3
#define MB 1e6

static json_t *layer_row(int layer, const struct pi_layer_prof *lp)
{
    return json_pack("{s:i, s:I, s:f, s:f, s:f}", "layer", layer, "items",
                     (json_int_t)atomic_load_explicit(&lp->items, memory_order_relaxed), "compute_ms",
                     atomic_load_explicit(&lp->compute_ns, memory_order_relaxed) / NS_PER_MS, "wait_ms",
                     atomic_load_explicit(&lp->wait_ns, memory_order_relaxed) / NS_PER_MS, "mb_read",
                     atomic_load_explicit(&lp->bytes, memory_order_relaxed) / MB);
}

/* {"gpud": {"items":..., "compute_ms":..., "wait_ms":..., "mb_read":..., "layers":[rows with items]}} */
static json_t *profile_json(const struct pi_ctl *ctl)
{
    json_t *j = json_object();
    for (int s = 0; s < PI_STAGE_COUNT; s++) {
        const struct pi_stage_info *in = &ctl->stages[s];
        json_t *layers = json_array();
        for (int l = 0; l < PI_MAX_LAYERS; l++)
            if (atomic_load_explicit(&in->layers[l].items, memory_order_relaxed))
                json_array_append_new(layers, layer_row(l, &in->layers[l]));
        json_object_set_new(j, stage_name((enum pi_stage)s),
                            json_pack("{s:I, s:f, s:f, s:f, s:o}", "items",
                                      (json_int_t)atomic_load_explicit(&in->items, memory_order_relaxed), "compute_ms",
                                      atomic_load_explicit(&in->compute_ns, memory_order_relaxed) / NS_PER_MS,
                                      "wait_ms", atomic_load_explicit(&in->wait_ns, memory_order_relaxed) / NS_PER_MS,
                                      "mb_read", atomic_load_explicit(&in->bytes, memory_order_relaxed) / MB,
                                      "layers", layers));
    }
    /* the hand-off over PCIe (gpud beside a device) and per-layer time per item, gpud against cpud */
    struct prof_snap *now = malloc(sizeof *now);
    if (now) {
        prof_snap_take(ctl, now);
        const struct pi_stage_info *g = &ctl->stages[PI_STAGE_GPUD];
        const uint64_t span = atomic_load_explicit(&g->compute_ns, memory_order_relaxed) +
                              atomic_load_explicit(&g->wait_ns, memory_order_relaxed);
        const int64_t tok = (int64_t)atomic_load_explicit(&g->layers[0].items, memory_order_relaxed);
        json_object_set_new(j, "split", prof_snap_span(NULL, now, ctl->n_layer, tok, span));
        free(now);
    }
    json_object_set_new(j, "audit", inst_audit_json(ctl));
    json_t *disk = run_disk_status_json(ctl);
    if (disk)
        json_object_set_new(j, "disk", disk);
    return j;
}

static void print_table(json_t *prof)
{
    const char *stage;
    json_t *st;
    json_object_foreach(prof, stage, st) {
        if (!strcmp(stage, "audit") || !strcmp(stage, "split") || !strcmp(stage, "disk"))
            continue;
        printf("# %s: %lld items, compute %.1f ms, wait %.1f ms, %.1f MB read\n", stage,
               (long long)json_integer_value(json_object_get(st, "items")),
               json_real_value(json_object_get(st, "compute_ms")), json_real_value(json_object_get(st, "wait_ms")),
               json_real_value(json_object_get(st, "mb_read")));
        json_t *layers = json_object_get(st, "layers");
        if (!json_array_size(layers))
            continue;
        printf("%6s %10s %12s %12s %10s %10s\n", "layer", "items", "compute_ms", "wait_ms", "MB_read", "us/item");
        size_t i;
        json_t *r;
        json_array_foreach(layers, i, r) {
            long long items = json_integer_value(json_object_get(r, "items"));
            double cms = json_real_value(json_object_get(r, "compute_ms"));
            printf("%6lld %10lld %12.2f %12.2f %10.2f %10.1f\n", (long long)json_integer_value(json_object_get(r, "layer")),
                   items, cms, json_real_value(json_object_get(r, "wait_ms")),
                   json_real_value(json_object_get(r, "mb_read")), items ? cms * 1e3 / items : 0.0);
        }
    }
}

/* Predictor recall measured on live traffic, per layer (only when tokens were audited). */
static void print_audit(json_t *audit)
{
    if (!json_integer_value(json_object_get(audit, "tokens")))
        return;
    printf("# predictor audit: rate %.3f, %lld token-layers, recall %.4f\n",
           json_real_value(json_object_get(audit, "rate")), (long long)json_integer_value(json_object_get(audit, "tokens")),
           json_real_value(json_object_get(audit, "recall")));
    printf("%6s %10s %10s %12s %12s\n", "layer", "tokens", "recall", "fired/tok", "predicted/tok");
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(audit, "layers"), i, r)
        printf("%6lld %10lld %10.4f %12.1f %12.1f\n", (long long)json_integer_value(json_object_get(r, "layer")),
               (long long)json_integer_value(json_object_get(r, "tokens")), json_real_value(json_object_get(r, "recall")),
               json_real_value(json_object_get(r, "fired_per_token")),
               json_real_value(json_object_get(r, "predicted_per_token")));
}

static int write_trace(const struct pi_ctl *ctl, const char *path)
{
    json_t *events = json_array();
    for (int s = 0; s < PI_STAGE_COUNT; s++) {
        json_array_append_new(events, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "process_name", "ph", "M",
                                                "pid", s, "tid", 0, "args", "name", stage_name((enum pi_stage)s)));
        const struct pi_trace *tr = &ctl->traces[s];
        /* acquire: pairs with the stage's release store of head after writing an event */
        const uint64_t head = atomic_load_explicit(&tr->head, memory_order_acquire);
        const uint64_t n = head < PI_TRACE_EVENTS ? head : PI_TRACE_EVENTS;
        for (uint64_t k = head - n; k < head; k++) {
            const struct pi_trace_event *ev = &tr->ev[k % PI_TRACE_EVENTS];
            char name[48];
            const char *kind = ev->kind == PI_TRACE_WAIT ? "wait " : "";
            if (ev->layer >= 0)
                snprintf(name, sizeof name, "%slayer %d", kind, ev->layer);
            else
                snprintf(name, sizeof name, "%sstep", kind);
            json_array_append_new(events, json_pack("{s:s, s:s, s:f, s:f, s:i, s:i, s:{s:i, s:I, s:s}}", "name", name,
                                                    "ph", "X", "ts", ev->ts_ns / NS_PER_US, "dur",
                                                    ev->dur_ns / NS_PER_US, "pid", s, "tid", 0, "args", "layer",
                                                    ev->layer, "pos", (json_int_t)ev->pos, "kind",
                                                    ev->kind == PI_TRACE_WAIT ? "wait" : "compute"));
        }
    }
    json_t *j = json_pack("{s:o, s:s}", "traceEvents", events, "displayTimeUnit", "ms");
    if (!j)
        return pi_fail(PI_E_NOMEM, "cannot build the trace");
    int rc = json_dump_file(j, path, JSON_COMPACT) ? pi_fail(PI_E_IO, "cannot write trace '%s'", path) : 0;
    json_decref(j);
    return rc;
}

int cmd_profile(int argc, char **argv)
{
    static const struct option opts[] = { { "name", required_argument, NULL, 'N' }, { "json", no_argument, NULL, 'j' },
                                           { "trace", required_argument, NULL, 'T' },
                                           { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
    const char *name = INST_DEFAULT_NAME, *trace = NULL;
    bool as_json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (c == 'N')
            name = optarg;
        else if (c == 'j')
            as_json = true;
        else if (c == 'T')
            trace = optarg;
        else if (c == 'h') {
            printf("usage: pictl profile [--name NAME] [--json] [--trace FILE]\n");
            return 0;
        } else
            return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "pictl profile: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    int rc = inst_check_name(name);
    if (rc)
        return pictl_error("profile", "--name", rc);
    struct shm_seg seg;
    const struct pi_ctl *ctl;
    if ((rc = inst_attach_ctl(name, &seg, &ctl)))
        return pictl_error("profile", name, rc == -ENOENT ? pi_fail(ENOENT, "instance '%s' is not running", name) : rc);
    json_t *prof = profile_json(ctl);
    if (trace)
        rc = write_trace(ctl, trace);
    shm_detach(&seg);
    if (!prof)
        return pictl_error("profile", name, -PI_E_NOMEM);
    if (as_json) {
        char *text = json_dumps(prof, JSON_INDENT(1));
        if (text)
            puts(text);
        free(text);
    } else {
        print_table(prof);
        json_t *pt = json_object_get(json_object_get(prof, "split"), "per_token");
        if (pt)
            printf("# per step (all layers): gpud compute %.3f ms, wait %.3f ms | cpud compute %.3f ms, wait %.3f ms | "
                   "PCIe %.3f MB to the host, %.3f MB back\n",
                   json_real_value(json_object_get(pt, "gpud_compute_ms")),
                   json_real_value(json_object_get(pt, "gpud_wait_ms")),
                   json_real_value(json_object_get(pt, "cpud_compute_ms")),
                   json_real_value(json_object_get(pt, "cpud_wait_ms")), json_real_value(json_object_get(pt, "pcie_d2h_mb")),
                   json_real_value(json_object_get(pt, "pcie_h2d_mb")));
        print_audit(json_object_get(prof, "audit"));
        run_disk_status_print(stdout, json_object_get(prof, "disk"));
    }
    json_decref(prof);
    if (rc)
        return pictl_error("profile", trace, rc);
    return 0;
}
