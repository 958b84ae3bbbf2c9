/* cpud.c — wait for a step on either input ring (from predictord, or from gpud while predictord is
 * down), compute the cold share, publish it.
 *
 * Waiting on two rings: cpud sleeps on the act header's doorbell, which both producers bump after
 * committing (act_ring_cpud_bell). No wake-up is lost: cpud reads the bell, sets cpud_sleeping
 * (seq_cst), re-checks both rings, then FUTEX_WAITs on the bell value it read; a producer commits,
 * bumps the bell (seq_cst), then reads cpud_sleeping (seq_cst). In the single total order of these
 * seq_cst operations either cpud's re-check comes after the commit (and sees the message) or the
 * producer's read comes after the flag (and wakes; the bell differs from the value cpud read, so
 * the wait returns at once even if the wake came first). */
#include "cpud.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache_claim.h"
#include "dataplane.h"
#include "futex.h"
#include "pi_err.h"
#include "predictor.h"
#include "threadpool.h"
#include "tiers.h"

#define CPUD_SPIN_POLLS 4000   /* polls of both rings before sleeping (each yields the core) */
#define CPUD_SLEEP_MS 100      /* bounded sleep, to notice a stop request */
#define DISK_LOG_STEPS 32      /* a disk-tier line in cpud's log every this many steps */
/* Beside a device, idle workers spin this long for the next step before sleeping: steps come every
 * ~100-300 µs during decode (a layer's GPU part), and waking 15 sleeping workers on a virtual
 * machine's vCPUs costs tens of µs per step; the cores are cpud's (gpud keeps one, device_check). */
#define CPUD_WORKER_SPIN_US 3000

/* The disk tier: the same placement as pictl run --inproc --ram-budget (tiers.c) over the act
 * segment's split, the bundle next to the model, the neuron cache in the "ncache" segment, its
 * reads done by loaderd (io_uring), or by cpud itself (pread) while loaderd is down (disk_io.h). */
static int disk_open(struct cpud *c)
{
    const struct pi_ctl *ctl = c->rt.ctl;
    const struct pi_model *m = c->m;
    const int64_t L = m->hp.n_layer, F = m->hp.n_ff;
    char path[PI_PATH_MAX + 16];
    struct bundle_hdr h;
    int fd, rc;
    bool direct;
    if ((rc = bundle_default_path(ctl->model_path, path, sizeof path)) ||
        (rc = bundle_open(path, m, false, &fd, &direct, &h)))
        return rc;
    close(fd);
    c->tier = malloc((size_t)(L * F));
    c->mask2 = malloc((size_t)c->act.hdr->n_batch * (size_t)F);
    if (!c->tier || !c->mask2)
        return pi_fail(PI_E_NOMEM, "cpud: out of memory");
    struct tier_report r;
    const int64_t slots = tier_default_cache_slots(m);
    if ((rc = tier_place(m, ctl->ram_budget, h.stride, slots, c->act.gpu_idx, c->tier, &r)))
        return rc;
    disk_io_init(&c->dio, c->rt.ctl, c->rt.instance, path);
    c->have_dio = true;
    const struct ncache_params np = { .path = path, .tier = c->tier, .window_slots = slots, .window = 1,
                                      .direct = true, .io = &c->dio.io, .alloc = disk_io_alloc,
                                      .alloc_arg = &c->dio };
    if ((rc = ncache_new(&c->nc, m, &np)))
        return rc;
    struct ncache_stats st;
    ncache_get_stats(c->nc, &st);
    disk_io_publish(&c->dio, &st);
    fprintf(stderr,
            "cpud: disk tier: budget %.2f GiB = dense %.2f + cache %.2f + RAM tier %.2f GiB (%lld neurons); disk tier "
            "%.2f GiB (%lld neurons) read from %s with %s\n",
            (double)r.budget / (1 << 30), (double)r.dense_bytes / (1 << 30), (double)r.cache_bytes / (1 << 30),
            (double)r.ram_bytes / (1 << 30), (long long)r.ram_neurons, (double)r.disk_bytes / (1 << 30),
            (long long)r.disk_neurons, path, c->dio.io.name);
    return 0;
}

/* The cold runs' rows through the neuron cache, and the next layer's predicted cold neurons queued */
static int disk_layer(struct cpud *c, const struct act_item *it, const uint8_t *mask, struct pi_layer_weights *w)
{
    const struct pi_model *m = c->m;
    const int64_t F = m->hp.n_ff;
    struct ncache_stats a, b;
    ncache_get_stats(c->nc, &a);
    const uint64_t t0 = stage_now_ns();
    int rc = ncache_layer(c->nc, it->layer, &c->cold, w);
    const int next = it->layer + 1;
    if (!rc && next < m->hp.n_layer &&
        !(rc = pred_eval(c->pool, &c->pred, &m->layers[next], c->act.h, it->n_tok, m->hp.sparse_threshold, c->mask2,
                         NULL)) &&
        !(rc = ffn_runs_build(&c->next, c->act.gpu_idx + (size_t)next * F, 0, c->mask2, it->n_tok, F)))
        rc = ncache_prefetch(c->nc, next, &c->next);
    ncache_get_stats(c->nc, &b);
    if (it->n_tok > 1) { /* a prefill chunk: its reads are counted apart (they stream whole runs) */
        c->dio.pf_tokens += it->layer == 0 ? (uint64_t)it->n_tok : 0;
        c->dio.pf_bytes += b.bytes_read - a.bytes_read;
        c->dio.pf_reads += b.reads - a.reads;
        c->dio.pf_ns += stage_now_ns() - t0;
    }
    disk_io_publish(&c->dio, &b);
    return rc;
}

/* ---- pre-faulting the cold rows ----
 * The weights image is a shared-memory mapping: the first time cpud reads a page of it, the kernel
 * maps it (a minor fault, and 15 threads faulting at once contend on the process's page tables).
 * Cold neurons fire rarely, so during decode nearly every cold row cpud reads was never touched by
 * it: measured 2026-12-01 on the H200 host, the cold share ran at 5-17 GB/s instead of DRAM speed.
 * So cpud maps the rows it may read (the neurons not on gpud) at start, in parallel: madvise
 * MADV_POPULATE_READ (Linux 5.14), else a read per page. Not with the disk tier (RAM budget): its
 * cold rows come from the neuron cache, and the image is not meant to be resident. */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#define PREFAULT_PAGE 4096

struct prefault_job {
    const struct pi_model *m;
    const uint8_t *gpu_idx;
    struct ffn_runs *runs; /* one per layer, built before the run */
    _Atomic uint64_t bytes;
};

static uint64_t prefault_range(const void *p, size_t n)
{
    if (!p || !n)
        return 0;
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(PREFAULT_PAGE - 1), e = (uintptr_t)p + n;
    if (madvise((void *)a, e - a, MADV_POPULATE_READ) != 0) {
        for (uintptr_t q = a; q < e; q += PREFAULT_PAGE)
            (void)*(volatile const char *)q;
    }
    return e - a;
}

static void prefault_worker(void *arg, int ith, int nth)
{
    struct prefault_job *j = arg;
    const int L = j->m->hp.n_layer;
    uint64_t bytes = 0;
    for (int l = ith; l < L; l += nth) {
        const struct pi_layer *ly = &j->m->layers[l];
        const struct ffn_runs *r = &j->runs[l];
        for (int32_t k = 0; k < r->n; k++) {
            const int64_t s = r->run[k][0], len = r->run[k][1];
            bytes += prefault_range((const char *)ly->ffn_gate.data + (size_t)s * ly->ffn_gate.row_bytes,
                                    (size_t)len * ly->ffn_gate.row_bytes);
            bytes += prefault_range((const char *)ly->ffn_up.data + (size_t)s * ly->ffn_up.row_bytes,
                                    (size_t)len * ly->ffn_up.row_bytes);
            if (ly->ffn_down_t.data)
                bytes += prefault_range((const char *)ly->ffn_down_t.data + (size_t)s * ly->ffn_down_t.row_bytes,
                                        (size_t)len * ly->ffn_down_t.row_bytes);
        }
        if (!ly->ffn_down_t.data && r->n) /* ffn_down's rows are output dims: every one holds cold columns */
            bytes += prefault_range(ly->ffn_down.data, ly->ffn_down.row_bytes * (size_t)ly->ffn_down.ne[1]);
    }
    atomic_fetch_add_explicit(&j->bytes, bytes, memory_order_relaxed);
}

static int prefault_cold(struct cpud *c)
{
    const struct pi_model *m = c->m;
    const int L = m->hp.n_layer;
    const int64_t F = m->hp.n_ff;
    struct prefault_job j = { .m = m, .gpu_idx = c->act.gpu_idx, .runs = calloc((size_t)L, sizeof *j.runs) };
    if (!j.runs)
        return pi_fail(PI_E_NOMEM, "cpud: out of memory");
    int rc = 0;
    const uint64_t t0 = stage_now_ns();
    for (int l = 0; !rc && l < L; l++)
        rc = ffn_runs_build(&j.runs[l], c->act.gpu_idx + (size_t)l * F, 0, NULL, 1, F);
    if (!rc)
        pool_run(c->pool, prefault_worker, &j);
    for (int l = 0; l < L; l++)
        ffn_runs_fini(&j.runs[l]);
    free(j.runs);
    if (!rc)
        fprintf(stderr, "cpud: mapped the cold rows (%.1f MiB) in %.3f s\n",
                (double)atomic_load_explicit(&j.bytes, memory_order_relaxed) / (1 << 20),
                (double)(stage_now_ns() - t0) / 1e9);
    return rc;
}

int cpud_init(struct cpud *c, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->act_seg.fd = -1;
    int rc = stage_init(&c->rt, PI_STAGE_CPUD, argc, argv);
    if (rc || (rc = dataplane_open(&c->rt, &c->m, &c->act_seg, &c->act)))
        return rc;
    const struct pi_ctl *ctl = c->rt.ctl;
    const int32_t nt = ctl->cpud_threads > 0 ? ctl->cpud_threads : ctl->n_threads > 0 ? ctl->n_threads : 1;
    if ((rc = pool_new(&c->pool, nt)))
        return rc;
    c->xn = malloc((size_t)c->act.hdr->n_batch * c->act.hdr->n_embd * sizeof(float));
    if (!c->xn)
        return pi_fail(PI_E_NOMEM, "cpud: out of memory");
    if (ctl->ram_budget && (rc = disk_open(c)))
        return rc;
    if (!ctl->ram_budget && (rc = prefault_cold(c)))
        return rc;
    stage_set_ready(&c->rt);
    fprintf(stderr, "cpud: %d worker threads\n", nt);
    return 0;
}

static int cmp_u32(const void *a, const void *b)
{
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The involuntary context switches of this process's threads so far (/proc/self/task/N/status):
 * a worker taken off its core mid-slice holds the whole step, so a heavy tail of steps with many of
 * these points at the scheduler, not the memory system. -1 where /proc cannot be read. */
static long long involuntary_switches(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    long long sum = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[64], line[128];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/status", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        long long v;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "nonvoluntary_ctxt_switches: %lld", &v) == 1)
                sum += v;
        fclose(f);
    }
    closedir(d);
    return sum;
}

void cpud_fini(struct cpud *c)
{
    if (c->ph_steps) {
        const size_t n = c->ph_steps < CPUD_FFN_SAMPLES ? (size_t)c->ph_steps : CPUD_FFN_SAMPLES;
        qsort(c->ph_ffn_sample, n, sizeof *c->ph_ffn_sample, cmp_u32);
        /* the tail: steps over 4x the median and the time they spent beyond it */
        const uint32_t med = c->ph_ffn_sample[n / 2];
        size_t slow = 0;
        double over_ms = 0.0;
        for (size_t i = 0; i < n; i++)
            if (c->ph_ffn_sample[i] > 4u * med)
                slow++, over_ms += (double)(c->ph_ffn_sample[i] - med) / 1e6;
        fprintf(stderr, "cpud: %llu one-token steps, per step: prep %.1f us (norm %.1f of which the FFN's input %.1f, runs %.1f; then %.1f us waiting "
                "for the masks after an early h), ffn %.1f us "
                "(median %.1f, p90 %.1f, p99 %.1f, max %.1f of the last %zu; %zu over 4x the median, %.2f ms "
                "beyond it), publish %.1f us; gap to the next step %.1f us; involuntary context switches %lld\n",
                (unsigned long long)c->ph_steps, (double)c->ph_prep_ns / 1e3 / (double)c->ph_steps,
                (double)c->ph_norm_ns / 1e3 / (double)c->ph_steps, (double)c->ph_input_ns / 1e3 / (double)c->ph_steps,
                (double)c->ph_runs_ns / 1e3 / (double)c->ph_steps,
                (double)c->ph_mwait_ns / 1e3 / (double)c->ph_steps, (double)c->ph_ffn_ns / 1e3 / (double)c->ph_steps,
                med / 1e3, c->ph_ffn_sample[n * 9 / 10] / 1e3,
                c->ph_ffn_sample[n * 99 / 100] / 1e3, c->ph_ffn_sample[n - 1] / 1e3, n, slow, over_ms,
                (double)c->ph_pub_ns / 1e3 / (double)c->ph_steps, (double)c->ph_gap_ns / 1e3 / (double)c->ph_steps,
                involuntary_switches());
    }
    ncache_free(c->nc);
    if (c->have_dio)
        disk_io_fini(&c->dio);
    free(c->tier);
    free(c->mask2);
    ops_scratch_fini(&c->pred);
    ffn_runs_fini(&c->next);
    free(c->xn);
    ffn_runs_fini(&c->cold);
    ffn_scratch_fini(&c->ffn);
    pool_free(c->pool);
    model_free(c->m);
    shm_detach(&c->act_seg);
    stage_fini(&c->rt);
}

/* The step is still the one gpud waits on, and not one we already answered. A step whose inputs
 * gpud's device writes (ACT_ITEM_DEV_KEY) comes before they are there: its key is waited for later
 * (wait_device); here only its session is checked. */
static bool current(struct cpud *c, const struct act_item *it)
{
    const struct act_hdr *h = c->act.hdr;
    /* acquire: pairs with gpud's release of cur_seq after writing h */
    const uint64_t seq = atomic_load_explicit(&h->cur_seq, memory_order_acquire);
    const uint64_t epoch = atomic_load_explicit(&h->cur_epoch, memory_order_relaxed);
    if (it->epoch != epoch || (!(it->flags & ACT_ITEM_DEV_KEY) && it->seq != seq))
        return false;
    return !(it->epoch == c->last_epoch && it->seq == c->last_seq);
}

/* Polls of the device's key between two checks that gpud is still there (a kill(2) each) */
#define CPUD_DEV_CHECK_POLLS 4096

static bool dev_gone(void *arg)
{
    struct cpud *c = arg;
    return stage_should_stop(&c->rt) || !dataplane_stage_alive(c->rt.ctl, PI_STAGE_GPUD);
}

/* An ACT_ITEM_DEV_KEY step: gpud handed it over when it enqueued it; wait until its device has
 * written h (act_hdr.dev_h_seq, or dev_seq with the masks; do_step waits for those). false: the step
 * will never come (act_wait_dev_h). */
static bool wait_device(struct cpud *c, const struct act_item *it)
{
    if (!(it->flags & ACT_ITEM_DEV_KEY))
        return true;
    if (it->layer >= 0 && it->layer < c->m->hp.n_layer) {
        /* meanwhile, the first weights the step reads beside h into the cache (the RMSNorm's) */
        const char *nw = c->m->layers[it->layer].ffn_norm.data;
        for (size_t o = 0; nw && o < (size_t)c->m->hp.n_embd * sizeof(float); o += 64)
            __builtin_prefetch(nw + o);
    }
    return act_wait_dev_h(c->act.hdr, it, dev_gone, c, CPUD_DEV_CHECK_POLLS);
}

/* Once gpud says which backend it opened: beside a GPU, gpud's one host thread launches kernels and
 * spins on the copy event and the result ring the whole time cpud computes, so cpud leaves it a core
 * of the -t threads (16 threads on 16 cores made the pool's oversubscription check go solo: one
 * thread for the cold share, ~2.4 ms per layer), and its workers stay awake between layers (the GPU
 * computes attention; no host thread of gpud needs their cores). With the CPU backend gpud computes
 * attention on the cores cpud's workers would spin on, so they are parked after each step. */
static int device_check(struct cpud *c)
{
    const struct pi_ctl *ctl = c->rt.ctl;
    if (c->dev_known || !ctl->backend_used[0])
        return 0;
    c->dev_known = true;
    c->beside_device = strcmp(ctl->backend_used, "cpu") != 0;
    const int nt = pool_size(c->pool);
    if (!c->beside_device || nt < 2)
        return 0;
    struct pi_pool *p;
    int rc = pool_new(&p, nt - 1);
    if (rc)
        return rc;
    pool_free(c->pool);
    c->pool = p;
    /* PINFER_CPUD_SPIN_US overrides the spin (0: the pool's default; for A/B benchmarks) */
    const char *e = getenv("PINFER_CPUD_SPIN_US");
    const int spin = e ? atoi(e) : CPUD_WORKER_SPIN_US;
    pool_set_spin_us(p, spin > 0 ? (unsigned)spin : 0u);
    c->spin_us = spin > 0 ? (unsigned)spin : 0u;
    fprintf(stderr, "cpud: gpud runs on %s: %d worker threads (one core left to gpud's host thread), not parked, "
            "workers spin %d us between steps\n", ctl->backend_used, nt - 1, spin > 0 ? spin : 0);
    return 0;
}

/* A step's preparation: the RMSNorm of h (~8 µs for 4096 on the GPU host while its sum of squares
 * was one chain; ops_rmsnorm now sums 8 chains, ~3× faster on dev, not re-measured there) and the
 * runs of its predicted-active cold neurons (from the masks), independent of each other: beside a
 * device, where the workers spin between steps, one of them builds the runs while the caller
 * normalizes (the same functions on the same inputs: the same results). */
struct prep_job {
    struct cpud *c;
    const struct act_item *it;
    const uint8_t *mask;
    uint64_t norm_ns; /* the norm's own time (and the FFN input's: norm_and_input) */
    int norm_rc;      /* norm_and_input's */
    uint64_t runs_ns; /* the runs' */
    uint64_t mwait_ns; /* prep_dev: the wait for the masks after the norm */
    int rc;
};

/* The runs of the step's predicted-active cold neurons: from the device's bits when it wrote them
 * (ACT_ITEM_COLD_BITS: 1.4 KB of DMA-written lines instead of the mask's and gpu_idx's 22 KB, which
 * set the runs' 6-8 µs on the GPU host), else from the masks — the same runs for one token
 * (ffn_runs_from_bits = ffn_runs_build). */
static int build_runs(struct cpud *c, const struct act_item *it, const uint8_t *mask)
{
    const int64_t F = c->m->hp.n_ff;
    if (it->flags & ACT_ITEM_COLD_BITS) {
        /* every line of the bits on its way first (the device wrote them: they come from memory). Read
         * all at once they took 0.1 µs of the runs' ~5 on the H200 host (2026-12-03, q1): the stores to
         * the run array, which the workers had read, were the cost (claim_scratch) */
        const char *b = (const char *)c->act.cold_bits;
        for (size_t o = 0; o < (size_t)act_cold_words(F) * sizeof(uint64_t); o += 64)
            __builtin_prefetch(b + o);
        return ffn_runs_from_bits(&c->cold, c->act.cold_bits, F);
    }
    return ffn_runs_build(&c->cold, c->act.gpu_idx + (size_t)it->layer * F, 0, mask, it->n_tok, F);
}

/* xn = the step's RMSNorm of h; then, without a disk tier (whose view of the layer comes later), the
 * FFN's input from it (ffn_input_prepare: xn quantized for the gate rows), which ffn_partial would
 * otherwise make after the masks: beside a device this runs while they are on their way */
static int norm_and_input(struct cpud *c, const struct act_item *it)
{
    const struct pi_model *m = c->m;
    ops_rmsnorm_rows(c->xn, c->act.h, m->layers[it->layer].ffn_norm.data, it->n_tok, m->hp.n_embd, m->hp.norm_eps);
    c->input_ns = 0;
    if (c->nc)
        return 0;
    const uint64_t t = stage_now_ns();
    const struct pi_layer_weights w = model_layer_weights(m, it->layer);
    const int rc = ffn_input_prepare(&c->ffn, m, &w, c->xn, it->n_tok);
    c->input_ns = stage_now_ns() - t;
    return rc;
}

static void prep_slice(void *arg, int ith, int nth)
{
    (void)nth;
    struct prep_job *j = arg;
    struct cpud *c = j->c;
    const uint64_t t = stage_now_ns();
    if (ith == 0) {
        j->norm_rc = norm_and_input(c, j->it);
        j->norm_ns = stage_now_ns() - t;
    } else {
        j->rc = build_runs(c, j->it, j->mask);
        j->runs_ns = stage_now_ns() - t;
    }
}

/* An ACT_ITEM_DEV_KEY step whose h came before its masks (the device hands h out while its predictor
 * runs): the norm of h now, on this thread, then the masks' key, then the runs. The same functions on
 * the same inputs as prep_slice. 1: the masks will never come. */
static int prep_dev(struct cpud *c, const struct act_item *it, const uint8_t *mask, struct prep_job *j)
{
    uint64_t t = stage_now_ns();
    if ((j->norm_rc = norm_and_input(c, it)))
        return j->norm_rc;
    j->norm_ns = stage_now_ns() - t;
    t = stage_now_ns();
    if (!act_wait_dev(c->act.hdr, it, dev_gone, c, CPUD_DEV_CHECK_POLLS))
        return 1;
    j->mwait_ns = stage_now_ns() - t;
    t = stage_now_ns();
    const int rc = build_runs(c, it, mask);
    j->runs_ns = stage_now_ns() - t;
    return rc;
}

/* A one-token step whose device writes its cold neurons as bits (ACT_ITEM_COLD_BITS), without a disk
 * tier: the FFN's job is handed to the workers right after the norm, and its slices wait for the
 * masks' key themselves and take their own words of the bits (ffn_partial_bits). The workers are
 * then running when the bits come, and no run list is built between the key and the FFN: on the
 * H200 host that was ~3 µs of runs plus the job's hand-out, every layer, on the critical path. */
struct bits_wait {
    struct cpud *c;
    const struct act_item *it;
    _Atomic uint64_t at_ns; /* when a slice first saw the key (for the exit line's wait) */
};

static bool dev_bits_wait(void *arg)
{
    struct bits_wait *b = arg;
    const bool ok = act_wait_dev(b->c->act.hdr, b->it, dev_gone, b->c, CPUD_DEV_CHECK_POLLS);
    uint64_t none = 0;
    atomic_compare_exchange_strong_explicit(&b->at_ns, &none, stage_now_ns(), memory_order_relaxed,
                                            memory_order_relaxed);
    return ok;
}

static bool bits_step(const struct cpud *c, const struct act_item *it)
{
    const uint32_t want = ACT_ITEM_DEV_KEY | ACT_ITEM_COLD_BITS;
    return (it->flags & want) == want && !(it->flags & ACT_ITEM_ALL_ACTIVE) && it->n_tok == 1 && !c->nc;
}

/* Beside a device, after a step: the lines this thread writes first in the next step (xn, the runs,
 * the FFN's prepared input) were read by the workers in this step's FFN (cache_claim.h: the runs from
 * the device's 1.4 KB of bits took 5 µs on the H200 host, 2026-12-03, reading those bits 0.1 of it).
 * Claimed now, while gpud computes the next layer's attention. PINFER_CPUD_CLAIM=0: not (A/B). */
static void claim_scratch(struct cpud *c, int32_t n_tok)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("PINFER_CPUD_CLAIM");
        on = !e || atoi(e) != 0;
    }
    if (!on)
        return;
    cache_claim(c->xn, (size_t)n_tok * (size_t)c->m->hp.n_embd * sizeof(float));
    /* the runs this step had, and a margin: the array has room for the worst case (n_ff / 2 runs) */
    const int32_t runs = c->cold.n + 64 < c->cold.cap ? c->cold.n + 64 : c->cold.cap;
    cache_claim(c->cold.run, (size_t)runs * sizeof *c->cold.run);
    ffn_scratch_claim(&c->ffn);
}

/* 0, a negative code, or 1: the step's masks will never come (prep_dev) */
static int do_step(struct cpud *c, const struct act_item *it)
{
    const struct pi_model *m = c->m;
    struct act_view *a = &c->act;
    const uint64_t t0 = stage_now_ns();
    if (it->layer < 0 || it->layer >= m->hp.n_layer || it->n_tok < 1 || it->n_tok > a->hdr->n_batch)
        return pi_fail(PI_E_FORMAT, "cpud: bad step (layer %d, %d tokens)", it->layer, it->n_tok);
    const int32_t B = it->n_tok;
    int rc;
    if ((rc = device_check(c)))
        return rc;
    const uint8_t *mask = NULL;
    /* acquire: pairs with predictord's release of mask_seq; a mask of another step is not used
     * (computing every neuron instead is always exact). The device's key (wait_device) covers the
     * masks it wrote with h. */
    if (!(it->flags & ACT_ITEM_ALL_ACTIVE) &&
        ((it->flags & ACT_ITEM_DEV_KEY) || atomic_load_explicit(&a->hdr->mask_seq, memory_order_acquire) == it->seq))
        mask = a->mask;
    struct prep_job pj = { .c = c, .it = it, .mask = mask };
    const bool by_bits = bits_step(c, it);
    if (by_bits) { /* the masks' wait and the runs are the FFN job's (below) */
        const uint64_t t = stage_now_ns();
        pj.norm_rc = norm_and_input(c, it);
        pj.norm_ns = stage_now_ns() - t;
    } else if ((it->flags & ACT_ITEM_DEV_KEY) &&
               /* acquire: pairs with the device's release of dev_seq after the masks */
               atomic_load_explicit(&a->hdr->dev_seq, memory_order_acquire) != it->seq) {
        if ((rc = prep_dev(c, it, mask, &pj)))
            return rc;
    } else if (c->beside_device) {
        pool_run_n(c->pool, prep_slice, &pj, 2);
    } else { /* parked workers: waking one would cost more than the runs take */
        prep_slice(&pj, 0, 2);
        prep_slice(&pj, 1, 2);
    }
    if ((rc = pj.norm_rc) || (rc = pj.rc))
        return rc;
    uint64_t bytes = 0;
    struct pi_layer_weights w = model_layer_weights(m, it->layer);
    /* the disk tier serves every step: with --ram-budget the weights segment may have no FFN rows
     * (pi_ctl.weights_trimmed); an unmasked step reads all its cold neurons through the cache */
    if (c->nc && (rc = disk_layer(c, it, mask, &w)))
        return rc;
    uint64_t t1 = stage_now_ns();
    if (by_bits) {
        struct bits_wait bw = { .c = c, .it = it };
        struct ffn_bits src = { .bits = a->cold_bits, .wait = dev_bits_wait, .arg = &bw };
        if ((rc = ffn_partial_bits(c->pool, &c->ffn, m, &w, c->xn, &src, a->ycold, &bytes)))
            return rc; /* 1: the masks will never come */
        const uint64_t at = atomic_load_explicit(&bw.at_ns, memory_order_relaxed);
        if (at > t1) { /* the FFN's time from the key on, as when the wait came first */
            pj.mwait_ns = at - t1;
            t1 = at;
        }
    } else {
        /* the runs from the bits are exactly the one token's active cold neurons: no mask to look up */
        const uint8_t *ffn_mask = it->flags & ACT_ITEM_COLD_BITS ? NULL : mask;
        if ((rc = ffn_partial(c->pool, &c->ffn, m, &w, c->xn, B, &c->cold, ffn_mask, a->ycold, &bytes)))
            return rc;
    }
    const uint64_t t2 = stage_now_ns();
    if (c->nc && it->layer == m->hp.n_layer - 1) {
        if ((rc = ncache_step(c->nc, B)))
            return rc;
        struct ncache_stats st;
        ncache_get_stats(c->nc, &st);
        if (st.steps % DISK_LOG_STEPS == 0)
            fprintf(stderr, "cpud: disk tier: %llu tokens, %.1f KiB read/token, hit rate %.3f, %llu misses, disk wait %.2f ms/token\n",
                    (unsigned long long)st.tokens, (double)(st.bytes_read - st.pinned_bytes) / 1024 / (double)st.tokens,
                    st.needed ? (double)(st.hits + st.prefetched) / (double)st.needed : 0.0,
                    (unsigned long long)st.misses, (double)st.wait_ns / 1e6 / (double)st.tokens);
    }
    /* release: ycold is written before gpud can see it as this step's */
    atomic_store_explicit(&a->hdr->ycold_seq, it->seq, memory_order_release);
    int prc = ring_push(&a->rings[ACT_RING_CPU_GPU], it, sizeof *it, 1000);
    if (prc)
        fprintf(stderr, "cpud: result ring to gpud is full (%s); gpud will compute the step itself\n",
                pi_strerror(prc));
    c->last_epoch = it->epoch;
    c->last_seq = it->seq;
    if (!c->beside_device)
        pool_park(c->pool); /* gpud runs the next attention on these cores */
    else
        claim_scratch(c, B);
    const uint64_t t3 = stage_now_ns();
    if (B == 1 && !c->nc) {
        c->ph_steps++;
        c->ph_prep_ns += t1 - t0 - pj.mwait_ns;
        c->ph_mwait_ns += pj.mwait_ns;
        c->ph_norm_ns += pj.norm_ns;
        c->ph_input_ns += c->input_ns;
        c->ph_runs_ns += pj.runs_ns;
        c->ph_ffn_ns += t2 - t1;
        c->ph_ffn_sample[(c->ph_steps - 1) % CPUD_FFN_SAMPLES] = t2 - t1 < UINT32_MAX ? (uint32_t)(t2 - t1) : UINT32_MAX;
        c->ph_pub_ns += t3 - t2;
        c->ph_gap_ns += c->ph_last_end && t0 > c->ph_last_end ? t0 - c->ph_last_end : 0;
    }
    c->ph_last_end = t3;
    stage_prof(&c->rt, it->layer, t3 - t0, 0, bytes);
    return 0;
}

/* The step failed (a read of the disk tier, most likely): tell gpud, which fails the requests of the
 * step with the reason (stage_fail wrote it to our last_error before this release) instead of
 * waiting for a result that never comes. The cache stays usable for the next steps. */
static void step_failed(struct cpud *c, const struct act_item *it, int rc)
{
    stage_fail(&c->rt, rc, "step");
    struct act_item f = *it;
    f.flags |= ACT_ITEM_FAILED;
    if (ring_push(&c->act.rings[ACT_RING_CPU_GPU], &f, sizeof f, 1000))
        fprintf(stderr, "cpud: result ring to gpud is full; gpud will compute the step itself\n");
    c->last_epoch = it->epoch;
    c->last_seq = it->seq;
    pool_park(c->pool);
}

/* Take one message from ring r if there is one: 1 handled, 0 empty. The input slot is released only
 * after the result is published, so a cpud killed mid-step redoes it after its restart. */
static int poll_ring(struct cpud *c, struct ring *r)
{
    const void *msg;
    uint32_t len;
    int rc = ring_peek(r, &msg, &len);
    if (rc == -EAGAIN)
        return 0;
    if (rc == 0 && len == sizeof(struct act_item)) {
        struct act_item it;
        memcpy(&it, msg, sizeof it);
        if (current(c, &it) && wait_device(c, &it) && (rc = do_step(c, &it)) != 1) {
            if (rc)
                step_failed(c, &it, rc);
        } else { /* stale, or its masks will never come (do_step's 1) */
            atomic_fetch_add_explicit(&c->rt.me->stale_dropped, 1, memory_order_relaxed);
        }
    }
    ring_release(r);
    return 1;
}

int cpud_run(struct cpud *c)
{
    struct act_hdr *h = c->act.hdr;
    struct ring *pred = &c->act.rings[ACT_RING_PRED_CPU], *gpu = &c->act.rings[ACT_RING_GPU_CPU];
    int idle = 0;
    uint64_t busy_end = 0; /* beside a device: when the last step ended */
    while (!stage_should_stop(&c->rt)) {
        if (poll_ring(c, pred) + poll_ring(c, gpu)) {
            idle = 0;
            busy_end = c->beside_device ? stage_now_ns() : 0;
            continue;
        }
        /* beside a device, as long as the workers spin (the next step is due within a layer's GPU
         * part: a futex wake-up here would be on every layer's critical path); else a few thousand
         * yields (2 cores: let the producer run) */
        if (++idle < CPUD_SPIN_POLLS ||
            (busy_end && stage_now_ns() - busy_end < (uint64_t)c->spin_us * 1000u)) {
            sched_yield();
            continue;
        }
        const uint32_t bell = atomic_load_explicit(&h->cpud_bell, memory_order_seq_cst);
        atomic_store_explicit(&h->cpud_sleeping, 1, memory_order_seq_cst);
        if (ring_count(pred) == 0 && ring_count(gpu) == 0) {
            const uint64_t w0 = stage_now_ns();
            pi_futex_wait(&h->cpud_bell, bell, CPUD_SLEEP_MS);
            atomic_fetch_add_explicit(&c->rt.me->wait_ns, stage_now_ns() - w0, memory_order_relaxed);
        }
        atomic_store_explicit(&h->cpud_sleeping, 0, memory_order_relaxed);
        idle = 0;
    }
    return 0;
}
