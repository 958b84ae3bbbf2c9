/* run_disk_status.c — the disk tier's counters for pictl (run_disk_status.h). */
#include "run_disk_status.h"

#include <fcntl.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ncache_shm.h"

#define LD(f) ((json_int_t)atomic_load_explicit(&n->f, memory_order_relaxed))

json_t *run_disk_status_json(const struct pi_ctl *ctl)
{
    if (!ctl->ram_budget)
        return NULL;
    char inst[PI_INSTANCE_MAX];
    snprintf(inst, sizeof inst, "%s", ctl->instance);
    struct ncshm_view v;
    if (ncshm_attach(&v, inst, true))
        return NULL;
    const struct ncshm_hdr *h = v.hdr;
    const struct ncshm_counters *n = &h->n;
    const int32_t lpid = atomic_load_explicit(&h->loader_pid, memory_order_relaxed);
    const bool serving = lpid > 0 && atomic_load_explicit(&ctl->stages[PI_STAGE_LOADERD].pid, memory_order_relaxed) == lpid &&
                         ncshm_pid_alive(lpid);
    const json_int_t tokens = LD(c_tokens), needed = LD(c_needed), bytes = LD(c_bytes_read);
    const json_int_t pf_tokens = LD(c_prefill_tokens);
    json_t *j = json_object();
    json_object_set_new(j, "reader", json_string(serving ? h->loader_io : "cpud pread (loaderd down)"));
    json_object_set_new(j, "loaderd_serving", json_boolean(serving));
    json_object_set_new(j, "ram_budget_bytes", json_integer((json_int_t)ctl->ram_budget));
    json_object_set_new(j, "segment_bytes", json_integer((json_int_t)v.seg.size));
    json_object_set_new(j, "pinned_neurons", json_integer(LD(c_pinned)));
    json_object_set_new(j, "pinned_bytes", json_integer(LD(c_pinned_bytes)));
    json_object_set_new(j, "cache_slots", json_integer(LD(c_slots)));
    json_object_set_new(j, "cache_bytes", json_integer(LD(c_cache_bytes)));
    json_object_set_new(j, "tokens", json_integer(tokens));
    json_object_set_new(j, "bytes_read", json_integer(bytes));
    json_object_set_new(j, "bytes_per_token", json_real(tokens ? (double)bytes / (double)tokens : 0.0));
    json_object_set_new(j, "reads", json_integer(LD(c_reads)));
    json_object_set_new(j, "needed", json_integer(needed));
    json_object_set_new(j, "hits", json_integer(LD(c_hits)));
    json_object_set_new(j, "prefetched", json_integer(LD(c_prefetched)));
    json_object_set_new(j, "misses", json_integer(LD(c_misses)));
    json_object_set_new(j, "hit_rate", json_real(needed ? (double)(LD(c_hits) + LD(c_prefetched)) / (double)needed : 0.0));
    json_object_set_new(j, "evictions", json_integer(LD(c_evictions)));
    json_object_set_new(j, "in_flight", json_integer(LD(c_in_flight)));
    json_object_set_new(j, "wait_ms", json_real((double)LD(c_wait_ns) / 1e6));
    json_object_set_new(j, "wait_ms_per_token", json_real(tokens ? (double)LD(c_wait_ns) / 1e6 / (double)tokens : 0.0));
    json_object_set_new(j, "fallback_reads", json_integer(LD(c_fallback_reads)));
    json_object_set_new(j, "fallback_bytes", json_integer(LD(c_fallback_bytes)));
    json_object_set_new(j, "prefill_tokens", json_integer(pf_tokens));
    json_object_set_new(j, "prefill_bytes", json_integer(LD(c_prefill_bytes)));
    json_object_set_new(j, "prefill_reads", json_integer(LD(c_prefill_reads)));
    json_object_set_new(j, "prefill_ms", json_real((double)LD(c_prefill_ns) / 1e6));
    json_object_set_new(j, "loaderd_reads", json_integer(LD(l_reads)));
    json_object_set_new(j, "loaderd_bytes", json_integer(LD(l_bytes)));
    json_object_set_new(j, "loaderd_in_flight", json_integer(LD(l_in_flight)));
    json_object_set_new(j, "loaderd_errors", json_integer(LD(l_errors)));
    ncshm_detach(&v);
    /* the weights segment's memory: its size, and what tmpfs holds (the FFN rows punched out) */
    char name[SHM_NAME_CAP], path[SHM_NAME_CAP + sizeof SHM_DIR];
    struct stat st;
    if (!shm_name(name, sizeof name, geteuid(), inst, "weights")) {
        snprintf(path, sizeof path, "%s%s", SHM_DIR, name);
        if (!stat(path, &st)) {
            json_object_set_new(j, "weights_segment_bytes", json_integer((json_int_t)st.st_size));
            json_object_set_new(j, "weights_resident_bytes", json_integer((json_int_t)st.st_blocks * 512));
        }
    }
    const uint64_t tr = atomic_load_explicit(&ctl->weights_trimmed, memory_order_relaxed);
    json_object_set_new(j, "weights_trimmed_bytes", json_integer(tr == UINT64_MAX ? -1 : (json_int_t)tr));
    return j;
}

void run_disk_status_print(FILE *out, json_t *d)
{
    if (!d)
        return;
#define I(k) ((long long)json_integer_value(json_object_get(d, k)))
#define R(k) json_real_value(json_object_get(d, k))
    fprintf(out,
            "# disk tier: %lld tokens, %.1f KiB read/token, hit rate %.3f, %lld reads (%lld in flight), disk wait "
            "%.2f ms/token, %lld fallback reads by cpud, prefill %lld tokens %.1f MiB in %lld reads; reader: %s\n",
            I("tokens"), R("bytes_per_token") / 1024, R("hit_rate"), I("reads"), I("in_flight"), R("wait_ms_per_token"),
            I("fallback_reads"), I("prefill_tokens"), (double)I("prefill_bytes") / (1 << 20), I("prefill_reads"),
            json_string_value(json_object_get(d, "reader")));
#undef I
#undef R
}
