/* ffn_split.c — FFN over a subset of neurons (see ffn_split.h). */
#include "ffn_split.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__x86_64__)
#include <x86intrin.h>
#else
#include <time.h>
#endif

#include "cache_claim.h"
#include "cpu_relax.h"
#include "pi_err.h"
#include "quant.h"
#include "threadpool.h"

/* Room for every run n_ff neurons can have ((n_ff + 1) / 2), once: the scan then checks nothing per
 * run. */
static int runs_reserve(struct ffn_runs *r, int64_t n_ff)
{
    const int64_t need = (n_ff + 1) / 2 + 1;
    if (need > INT32_MAX)
        return pi_fail(PI_E_FORMAT, "ffn: %lld neurons are too many for the runs", (long long)n_ff);
    if (r->cap < need) {
        void *p = realloc(r->run, (size_t)need * sizeof *r->run);
        if (!p)
            return pi_fail(PI_E_NOMEM, "ffn: out of memory for %lld runs", (long long)need);
        r->run = p;
        r->cap = (int32_t)need;
    }
    return 0;
}

/* Neurons are taken 64 at a time as a bitmap (built without branches), and runs are found from its
 * transitions with count-trailing-zeros: a per-neuron branch costs a misprediction at every run
 * boundary, and a 10 % mask has one every few neurons. */
#define RUN_WORD 64
#define PACK8_MUL 0x0102040810204080ull /* 8 bytes of 0/1 → 8 bits (byte k → bit k) in the top byte */
#define PACK8_SHIFT 56

/* Bit k = neuron w0 + k is in (sel == want and on in some mask row), for nb <= 64 neurons: the
 * portable form, for a last partial word (and machines without SSE2) */
static uint64_t word_bits_any(const uint8_t *sel, uint8_t want, const uint8_t *mask, int32_t n_mask, int64_t n_ff,
                              int nb)
{
    uint8_t any[RUN_WORD], on[RUN_WORD];
    memset(any, mask ? 0 : 1, sizeof any);
    for (int32_t b = 0; mask && b < n_mask; b++) {
        const uint8_t *mk = mask + (int64_t)b * n_ff;
        for (int k = 0; k < nb; k++)
            any[k] |= mk[k];
    }
    memset(on, 0, sizeof on);
    for (int k = 0; k < nb; k++)
        on[k] = (uint8_t)((sel[k] == want) & (any[k] != 0));
    uint64_t bits = 0;
    for (int c = 0; c < RUN_WORD / 8; c++) {
        uint64_t x;
        memcpy(&x, on + 8 * c, sizeof x);
        bits |= ((x * PACK8_MUL) >> PACK8_SHIFT) << (8 * c);
    }
    return bits;
}

#if defined(__SSE2__)
/* A full word, 16 neurons per compare and movemask (SSE2 is in every x86-64). A 7B layer's 11 008
 * neurons at cpud's 1.1 % on the dev box: 2.5-4.0 µs warm, 3.5-5.4 from DRAM in the portable form;
 * 1.0-1.9 / 2.0-3.4 here. (The GPU host's Xeon built them in 6-8 µs either way: there the
 * mask's lines, not these operations, set the time.) */
static inline uint64_t word_bits(const uint8_t *sel, uint8_t want, const uint8_t *mask, int32_t n_mask, int64_t n_ff)
{
    const __m128i w = _mm_set1_epi8((char)want), zero = _mm_setzero_si128();
    uint64_t bits = 0;
    for (int c = 0; c < RUN_WORD / 16; c++) {
        __m128i on = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(sel + 16 * c)), w);
        if (mask) {
            __m128i any = zero;
            for (int32_t b = 0; b < n_mask; b++)
                any = _mm_or_si128(any, _mm_loadu_si128((const __m128i *)(mask + (int64_t)b * n_ff + 16 * c)));
            on = _mm_andnot_si128(_mm_cmpeq_epi8(any, zero), on);
        }
        bits |= (uint64_t)(uint16_t)_mm_movemask_epi8(on) << (16 * c);
    }
    return bits;
}
#else
static inline uint64_t word_bits(const uint8_t *sel, uint8_t want, const uint8_t *mask, int32_t n_mask, int64_t n_ff)
{
    return word_bits_any(sel, want, mask, n_mask, n_ff, RUN_WORD);
}
#endif

/* Runs come from the bitmap's transitions, not bit by bit: bits ^ (bits << 1 | the previous word's top
 * bit) has a bit at every run's start and every run's (exclusive) end, and they alternate, so their
 * positions in order are the runs' [start, end] pairs, the layout of run[][2]: one loop a word over its
 * transitions, made lengths at the close. A branch per run and per run end (the scan before) mispredicts
 * at nearly every one when each step's set is new: 1.75 µs for 215 runs on the dev box, 3-5 µs in
 * cpud on the GPU host; here the loop's exit mispredicts about once a word that has transitions. */
struct run_scan {
    int32_t n; /* transitions listed: starts and ends alternating */
    uint64_t top; /* the previous word's bit 63 */
};

/* One word: neurons w0 + k, its bits past n_ff clear */
static inline void runs_word(struct ffn_runs *r, struct run_scan *sc, int64_t w0, uint64_t bits)
{
    int32_t *flat = (int32_t *)r->run; /* the allocation as 2 cap int32s */
    int32_t i = sc->n;
    for (uint64_t t = bits ^ (bits << 1 | sc->top); t; t &= t - 1)
        flat[i++] = (int32_t)(w0 + __builtin_ctzll(t));
    sc->n = i;
    sc->top = bits >> 63;
}

/* A run still open ends at n_ff (n_ff a whole number of words: else the clear bits past it closed
 * it); then the ends become lengths */
static void runs_close(struct ffn_runs *r, struct run_scan *sc, int64_t n_ff)
{
    if (sc->n % 2)
        ((int32_t *)r->run)[sc->n++] = (int32_t)n_ff;
    int64_t n = 0;
    for (int32_t k = 0; k < sc->n / 2; k++) {
        r->run[k][1] -= r->run[k][0];
        n += r->run[k][1];
    }
    r->n = sc->n / 2;
    r->n_neurons = n;
}

int ffn_runs_build(struct ffn_runs *r, const uint8_t *sel, uint8_t want, const uint8_t *mask, int32_t n_mask,
                   int64_t n_ff)
{
    int rc;
    if ((rc = runs_reserve(r, n_ff)))
        return rc;
    struct run_scan sc = { 0 };
    for (int64_t w0 = 0; w0 < n_ff; w0 += RUN_WORD) {
        const int nb = n_ff - w0 < RUN_WORD ? (int)(n_ff - w0) : RUN_WORD;
        const uint8_t *mk = mask ? mask + w0 : NULL;
        runs_word(r, &sc, w0, nb == RUN_WORD ? word_bits(sel + w0, want, mk, n_mask, n_ff)
                                             : word_bits_any(sel + w0, want, mk, n_mask, n_ff, nb));
    }
    runs_close(r, &sc, n_ff);
    return 0;
}

int ffn_runs_from_bits(struct ffn_runs *r, const uint64_t *bits, int64_t n_ff)
{
    int rc;
    if ((rc = runs_reserve(r, n_ff)))
        return rc;
    struct run_scan sc = { 0 };
    for (int64_t w0 = 0; w0 < n_ff; w0 += RUN_WORD) {
        const int nb = n_ff - w0 < RUN_WORD ? (int)(n_ff - w0) : RUN_WORD;
        runs_word(r, &sc, w0, bits[w0 / RUN_WORD] & (nb == RUN_WORD ? ~0ull : (1ull << nb) - 1));
    }
    runs_close(r, &sc, n_ff);
    return 0;
}

void ffn_runs_fini(struct ffn_runs *r)
{
    free(r->run);
    memset(r, 0, sizeof *r);
}

void ffn_scratch_claim(struct ffn_scratch *s)
{
    /* the last input made: xq unless it was the caller's xn (F32 gate rows), xact where made */
    if (s->in_xq && s->in_xq == s->xq.buf)
        cache_claim(s->xq.buf, s->in_xq_stride * (size_t)s->in_B);
    if (s->in_xact)
        cache_claim((void *)s->in_xact, s->in_xact_stride * (size_t)s->in_B);
}

void ffn_scratch_fini(struct ffn_scratch *s)
{
    ops_scratch_fini(&s->xq);
    ops_scratch_fini(&s->xact);
    ops_scratch_fini(&s->aq);
    ops_scratch_fini(&s->drun);
    free(s->act);
    free(s->gacc);
    free(s->gused);
    free(s->grec);
    memset(s, 0, sizeof *s);
}

struct ffn_job {
    const struct pi_model *m;
    const struct pi_layer *l;
    const struct pi_layer_weights *w; /* where each neuron's rows are */
    const struct ffn_runs *runs; /* NULL: the neurons are src's bits (ffn_partial_bits) */
    const struct ffn_bits *src;
    _Atomic int *src_state;      /* SRC_*: whether src's bits have come (the first slice to know says) */
    const uint8_t *mask; /* (B, n_ff) each token's own mask, or NULL: every neuron of runs */
    const char *xq;     /* (B) rows of n in gate's vec_dot_type */
    size_t xq_stride;
    const char *xact;   /* (B) xq rows prepared for quant_gemv_gather_act, xact_stride apart; NULL: none */
    size_t xact_stride;
    float *act;         /* (B, n_ff): gate results, then act */
    float *up;          /* (B, n_ff) */
    const char *aq;     /* (B) rows of act in down's vec_dot_type */
    size_t aq_stride;
    int32_t (*drun)[2]; /* runs widened to whole blocks of down */
    int32_t n_drun;
    float *y;
    int32_t B;
    /* down_t path: neurons in fixed groups of AXPY_GROUP by index, each group's live rows added
     * into its own accumulator, the accumulators then summed in group order */
    const struct pi_tensor *dt; /* NULL: ffn_down path */
    pi_axpy_fn axpy;
    int32_t t0, t1;             /* the tokens of this pass (at most AXPY_TOKENS) */
    int64_t n_groups;
    float *gacc;                /* (n_groups, t1 - t0, n_embd): contiguous for the pass's tokens */
    uint8_t *gused;             /* (n_groups, AXPY_TOKENS): the group has a live neuron for the token */
    struct ffn_group_rec *grec; /* (n_groups) the groups' live neurons and their activations */
    bool by_cols;               /* the AXPYs in the column slices (below), not in the group slices */
    uint32_t stamp;
    int32_t n_red;              /* reduction (or column) slices, after the n_groups group slices */
    int64_t red_chunk;          /* y columns per reduction slice: whole cache lines (and down_t blocks) */
};

/* Runs shorter than this are dotted row by row (vec_dot): the multi-row GEMV prepares the whole
 * activation once per call, which for single-neuron runs costs as much as the row itself. Under a
 * mask the runs depend on the batch; that is harmless because at every kernel level a row's
 * multi-row GEMV result is vec_dot's bit for bit (quant.h; tests/quant_levels.h checks it), so a
 * neuron's activation does not depend on which other tokens share the batch. */
#define GEMV_MIN_ROWS 8

/* Scattered rows (the neurons of a sparse mask) defeat the hardware prefetcher, which needs a few
 * lines of each row to catch on: the next neuron's rows are prefetched while the current one is
 * processed, up to this many bytes of each (the hardware takes over along the row). */
#define ROW_PREFETCH_CAP 4096
#define CACHE_LINE 64

/* the lines of [p, p + n), at most ROW_PREFETCH_CAP bytes of them, into L1 */
static void prefetch_bytes(const void *p, size_t n)
{
    if (n > ROW_PREFETCH_CAP)
        n = ROW_PREFETCH_CAP;
    const uintptr_t a = (uintptr_t)p;
    for (uintptr_t c = a & ~(uintptr_t)(CACHE_LINE - 1); c < a + n; c += CACHE_LINE)
        __builtin_prefetch((const void *)c, 0, 3);
}

/* y[r] = W[r] · x for r in [r0, r1), W the rows of kind `kind` in the view: the multi-row GEMV
 * for long ranges whose rows are all in the model's mapping (every level's GEMV row is its vec_dot
 * bit for bit, so a masked run takes it too), single dots otherwise
 * (prefetching row r+1, or row `next` after the last; next < 0: none) */
static void rows_dot(const struct pi_layer_weights *w, enum pi_ffn_row kind, int64_t n, const char *x, float *y,
                     int64_t r0, int64_t r1, int64_t next)
{
    const struct pi_tensor *W = lw_tensor(w, kind);
    if (!w->slot && r1 - r0 >= GEMV_MIN_ROWS) {
        quant_gemv_rows(W->type, W->data, W->row_bytes, n, x, y, r0, r1);
        return;
    }
    const pi_vec_dot_fn dot = quant_traits(W->type)->vec_dot;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t nx = r + 1 < r1 ? r + 1 : next;
        if (nx >= 0)
            prefetch_bytes(lw_row(w, kind, nx), W->row_bytes);
        dot(n, &y[r], lw_row(w, kind, r), x);
    }
}

/* act[b, i] = act(gate_i · n_b, up_i · n_b) for i in [r0, r1), 0 where token b's mask is off */
static void act_segment(const struct ffn_job *j, int64_t r0, int64_t r1, int64_t next)
{
    const int64_t E = j->m->hp.n_embd, F = j->m->hp.n_ff;
    for (int32_t t = j->t0; t < j->t1; t++) {
        const char *x = j->xq + (size_t)t * j->xq_stride;
        float *a = j->act + (size_t)t * F, *u = j->up + (size_t)t * F;
        rows_dot(j->w, PI_ROW_GATE, E, x, a, r0, r1, next);
        rows_dot(j->w, PI_ROW_UP, E, x, u, r0, r1, next);
        const uint8_t *mk = j->mask ? j->mask + (size_t)t * F : NULL;
        for (int64_t i = r0; i < r1; i++)
            a[i] = mk && !mk[i] ? 0.0f : model_glu(j->m->hp.act, a[i], u[i]);
    }
}

/* This thread's share of the runs (an equal number of neurons each): their activations. */
static void act_worker(void *arg, int ith, int nth)
{
    const struct ffn_job *j = arg;
    const int64_t N = j->runs->n_neurons;
    const int64_t lo = N * ith / nth, hi = N * (ith + 1) / nth;
    int64_t at = 0; /* index of the first neuron of run k in the concatenation */
    for (int32_t k = 0; k < j->runs->n && at < hi; k++) {
        const int64_t s = j->runs->run[k][0], len = j->runs->run[k][1];
        const int64_t a = lo > at ? lo - at : 0, b = hi - at < len ? hi - at : len;
        if (a < b) {
            /* the first neuron of the next run, if this thread's share goes on there */
            const int64_t next = k + 1 < j->runs->n && at + len < hi ? j->runs->run[k + 1][0] : -1;
            act_segment(j, s + a, s + b, next);
        }
        at += len;
    }
}

/* The down_t reduction's order is tied to neuron indices, never to the thread count: neurons form
 * fixed groups of AXPY_GROUP; a group's live neurons are added in ascending order into the group's
 * accumulator (starting from zero), and y sums the accumulators of the groups that have a live
 * neuron for that token, in group order. A token's terms and their order depend only on its own
 * activations. Tokens go AXPY_TOKENS at a time (bounded scratch).
 *
 * Two ways to split that work over threads, the same operations on every element in the same order
 * (the same bits; the AXPY kernels update each element on its own, so a column range of whole blocks
 * of a row gets exactly the updates the whole row gets):
 *  - by groups: a group slice adds its live down_t rows into the group's n_embd-long accumulator,
 *    and the reduction slices, one per column range, sum the accumulators into y;
 *  - by columns (few live neurons a group, e.g. a hybrid run's cold share, ~4 a group): a group
 *    slice only computes its activations; column slice c then takes, group after group, the
 *    group's live rows restricted to its columns, sums them from zero in registers and adds that
 *    into y (quant_axpy_rows_add). With ~4 live neurons a group nearly every group
 *    would otherwise write a 16 KB accumulator that another core reads back (~690 KB a layer for
 *    ~1 MB of weights); by columns no accumulator leaves its core. */
#define AXPY_GROUP 256
#define AXPY_TOKENS 16

/* What a group slice hands over, in one record per group: its stamp, its live neurons (some token
 * reads their down_t rows) in ascending order, and their activations per token of the pass (the
 * group's own AXPYs, by groups, read them from here too). Every
 * column slice reads every group's hand-over, on another core than the one that wrote it: before,
 * the stamp, the count, the list and each live neuron's activation (scattered over act) sat in
 * different lines — ~3 + one per live neuron a group, each a transfer between cores, one after the
 * other (a slice's loop waits for the stamp, then reads the count, the list, then act). Here a group
 * with up to 14 live neurons is two lines for one token. The GPU host, hybrid s4's cold share (1.5 MB
 * a layer, 15 threads, rdtsc timeline of the job): the column slices ran 25-29 µs past the last
 * group, for ~220 live neurons. */
#define GREC_ACT_LINE 64
struct ffn_group_rec {
    _Alignas(GREC_ACT_LINE) _Atomic uint32_t done; /* == the pass's stamp: the rest is written */
    int32_t rows;                                   /* live neurons */
    int32_t live[AXPY_GROUP];                       /* ascending */
    int32_t n_pred;                                 /* the group's neurons computed (for *bytes) */
    _Alignas(GREC_ACT_LINE) float act[AXPY_TOKENS][AXPY_GROUP]; /* act[t][k]: token t0 + t, neuron live[k] */
};
/* By columns (FFN_SPLIT_AUTO) while the batch's predicted neurons (the union of the masks' runs)
 * average at most this many a group: there the group accumulators cost more than the rows they sum
 * (dev, 2 cores, 7B Q4_0 at 1.5 % of the neurons: by columns faster at 1 and 2 threads, in the
 * caches and from DRAM). Above it (the all-CPU path's ~10 %: 26 a group) the whole rows a group
 * slice reads stay the way to read them until the GPU host says otherwise (bench/cpu_host/cold_ab.sh
 * measures both). Either way gives the same bits, so the choice needs no invariance argument. */
#define COLS_MAX_PER_GROUP 16
/* ... and only where quant_axpy_rows_add keeps the column sum in registers (AVX2: Q4_0, Q8_0, F16,
 * BF16): its tile fallback made the F16 hybrid's cold share slower than the groups (H200 host,
 * 2026-12-02, before F16 had its own kernel: s16 at --vram-budget 8.39, cpud 114–135 → 162–167 µs a
 * layer, decode −20 %; s4 +8–14 %). F16 and BF16 have a native kernel since: F16 by columns there
 * against the groups, hybrid s16 at 8.39, medians 159.9 vs 156.1 tok/s (docs/BENCHMARKS.md). */

/* The live neurons of group [lo, hi): their indices and gate/up rows, for the gathered GEMV */
struct group_rows {
    int32_t n;
    int64_t idx[AXPY_GROUP];
    const void *gu[2 * AXPY_GROUP]; /* the n gate rows, then the n up rows: one gather for both */
    float v[2 * AXPY_GROUP];        /* their dots, in that order */
    const void *down[AXPY_GROUP]; /* one token's live down_t rows, and their activations */
    float a[AXPY_GROUP];
};

/* ffn_partial_bits: whether the bits have come. The first slice to ask waits (src->wait) and says
 * for all; one that finds the answer given reads the bits after that release. */
enum { SRC_WAIT, SRC_READY, SRC_NEVER };
static bool bits_ready(const struct ffn_job *j)
{
    /* acquire: pairs with the release (the CAS) of the slice that waited */
    int st = atomic_load_explicit(j->src_state, memory_order_acquire);
    if (st == SRC_WAIT) {
        const int got = j->src->wait(j->src->arg) ? SRC_READY : SRC_NEVER;
        st = SRC_WAIT;
        if (atomic_compare_exchange_strong_explicit(j->src_state, &st, got, memory_order_acq_rel,
                                                    memory_order_acquire))
            st = got;
    }
    return st == SRC_READY;
}

/* Group [lo, hi)'s word-aligned bits of src (lo is a multiple of 64), the ones past hi cleared */
static uint64_t group_word(const struct ffn_job *j, int64_t w, int64_t hi)
{
    const uint64_t b = j->src->bits[w];
    const int64_t left = hi - w * 64;
    return left >= 64 ? b : b & ((1ull << left) - 1);
}

/* gr's up rows after its n gate rows (one gather for both) */
static void collect_up_rows(const struct ffn_job *j, struct group_rows *gr)
{
    for (int32_t r = 0; r < gr->n; r++)
        gr->gu[gr->n + r] = lw_row(j->w, PI_ROW_UP, gr->idx[r]);
}

/* The neurons of group [lo, hi) from src's bits, into gr (indices and gate, then up rows) */
static void group_collect_bits(const struct ffn_job *j, int64_t lo, int64_t hi, struct group_rows *gr)
{
    gr->n = 0;
    for (int64_t w = lo / 64; w * 64 < hi; w++)
        for (uint64_t b = group_word(j, w, hi); b; b &= b - 1) {
            const int64_t i = w * 64 + __builtin_ctzll(b);
            gr->idx[gr->n] = i;
            gr->gu[gr->n] = lw_row(j->w, PI_ROW_GATE, i);
            gr->n++;
        }
    collect_up_rows(j, gr);
}

static void group_collect(const struct ffn_job *j, int64_t lo, int64_t hi, struct group_rows *gr)
{
    /* first run that may reach the group (runs are sorted and disjoint): a binary search, as there
     * are ~n_ff / 10 runs */
    int32_t k = 0, hi_k = j->runs->n;
    while (k < hi_k) {
        const int32_t mid = k + (hi_k - k) / 2;
        if (j->runs->run[mid][0] + j->runs->run[mid][1] <= lo)
            k = mid + 1;
        else
            hi_k = mid;
    }
    gr->n = 0;
    for (int32_t q = k; q < j->runs->n && j->runs->run[q][0] < hi; q++) {
        const int64_t s = j->runs->run[q][0] > lo ? j->runs->run[q][0] : lo;
        const int64_t e = j->runs->run[q][0] + j->runs->run[q][1] < hi ? j->runs->run[q][0] + j->runs->run[q][1] : hi;
        for (int64_t i = s; i < e; i++) {
            gr->idx[gr->n] = i;
            gr->gu[gr->n] = lw_row(j->w, PI_ROW_GATE, i);
            gr->n++;
        }
    }
    collect_up_rows(j, gr);
}

/* Token t0 + t's live neurons of group record rec (ascending): their activations into a, their down_t
 * rows (from byte `off` on: a column range) into rows; returns how many. Read from the record, so a
 * column slice's reads stay in its lines. */
static int32_t rec_rows(const struct ffn_job *j, const struct ffn_group_rec *rec, int32_t t, size_t off, float *a,
                        const void **rows)
{
    int32_t nl = 0;
    for (int32_t k = 0; k < rec->rows; k++) {
        const float v = rec->act[t][k];
        if (v == 0.0f)
            continue;
        a[nl] = v;
        rows[nl] = (const char *)lw_row(j->w, PI_ROW_DOWN_T, rec->live[k]) + off;
        nl++;
    }
    return nl;
}

/* Group g: the activations of its neurons (one gathered GEMV of its gate and up rows per token: the
 * activation is prepared once for the group's rows, and no prefetch strays past a row), its neurons
 * live for some token (glive), and unless the AXPYs go by columns their AXPYs in ascending neuron
 * order into the group's accumulators; then the group is marked done. */
static void group_one(const struct ffn_job *j, int64_t g)
{
    const int64_t E = j->m->hp.n_embd, F = j->m->hp.n_ff;
    const int32_t nt = j->t1 - j->t0;
    const uint32_t gate_type = lw_tensor(j->w, PI_ROW_GATE)->type;
    struct group_rows gr;
    const int64_t lo = g * AXPY_GROUP, hi = lo + AXPY_GROUP < F ? lo + AXPY_GROUP : F;
    float *acc = j->gacc + (size_t)g * (size_t)nt * (size_t)E;
    uint8_t *used = j->gused + (size_t)g * AXPY_TOKENS;
    struct ffn_group_rec *rec = &j->grec[g];
    int32_t *live = rec->live;
    memset(used, 0, AXPY_TOKENS);
    rec->rows = 0;
    /* the group's share of act is zeroed here rather than all of it by the caller: off its path */
    for (int32_t t = j->t0; t < j->t1; t++)
        memset(j->act + (size_t)t * F + lo, 0, (size_t)(hi - lo) * sizeof(float));
    if (!j->src)
        group_collect(j, lo, hi, &gr);
    else if (bits_ready(j))
        group_collect_bits(j, lo, hi, &gr);
    else
        gr.n = 0; /* the bits never come: the caller drops the step */
    rec->n_pred = gr.n;
    int64_t rows = 0;
    if (gr.n) {
        for (int32_t t = j->t0; t < j->t1; t++) {
            const char *x = j->xq + (size_t)t * j->xq_stride;
            const char *xa = j->xact ? j->xact + (size_t)t * j->xact_stride : NULL;
            /* gate and up rows in one gather: one prefetch pipeline, started once (gate and up share a
             * type: ffn_partial checks it) */
            quant_gemv_gather_act(gate_type, E, x, xa, gr.gu, 2 * (int64_t)gr.n, gr.v);
            const uint8_t *mk = j->mask ? j->mask + (size_t)t * F : NULL;
            float *a = j->act + (size_t)t * F;
            for (int32_t r = 0; r < gr.n; r++) {
                const int64_t i = gr.idx[r];
                a[i] = mk && !mk[i] ? 0.0f : model_glu(j->m->hp.act, gr.v[r], gr.v[gr.n + r]);
            }
        }
        /* the neurons whose down_t row some token reads, in ascending order */
        for (int32_t r = 0; r < gr.n; r++) {
            bool on = false;
            for (int32_t t = j->t0; t < j->t1 && !on; t++)
                on = j->act[(size_t)t * F + gr.idx[r]] != 0.0f;
            if (on)
                live[rows++] = (int32_t)gr.idx[r];
        }
        rec->rows = (int32_t)rows;
        for (int32_t t = 0; t < nt; t++) /* the live neurons' activations, beside their list */
            for (int64_t k = 0; k < rows; k++)
                rec->act[t][k] = j->act[(size_t)(j->t0 + t) * F + live[k]];
        /* each token's live neurons in ascending order, added into its accumulator (which starts at
         * zero with the first of them) a few rows per pass */
        for (int32_t t = 0; t < nt && !j->by_cols; t++) {
            const int32_t nl = rec_rows(j, rec, t, 0, gr.a, gr.down);
            used[t] = nl > 0;
            if (nl)
                quant_axpy_rows(j->dt->type, E, acc + (size_t)t * E, gr.a, gr.down, nl, true);
        }
    }
    /* release: the activations, the record, the accumulators and gused are written before a
     * reduction or column slice (or the caller, after the job) takes them; pairs with the acquire
     * in group_wait */
    atomic_store_explicit(&rec->done, j->stamp, memory_order_release);
}

/* bench_ffn -T's timeline (ffn_split.h): the trace, each thread's id in it and its slice's wait so far */
static struct ffn_trace *trace_on;
static _Atomic int32_t trace_tids;
static _Thread_local int32_t trace_tid = -1;
static _Thread_local uint64_t trace_wait, trace_rec, trace_axpy;

void ffn_trace_set(struct ffn_trace *t)
{
    trace_on = t;
}

uint64_t ffn_trace_now(void)
{
#if defined(__x86_64__)
    return __rdtsc();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
#endif
}

#define GROUP_WAIT_YIELD 64 /* pauses between yields while a group is still being computed */

/* Wait until group g of this pass is done. Group slices come before every reduction slice, so g is
 * held by a running thread (threadpool.h, "Ordered slices"); the yield lets it run on a busy machine. */
static bool group_is_done(const struct ffn_job *j, int64_t g)
{
    /* acquire: what the group published is read after it (pairs with group_one's release) */
    return atomic_load_explicit(&j->grec[g].done, memory_order_acquire) == j->stamp;
}

static void group_wait(const struct ffn_job *j, int64_t g)
{
    if (group_is_done(j, g))
        return;
    const uint64_t t0 = trace_on ? ffn_trace_now() : 0;
    for (unsigned i = 1; !group_is_done(j, g); i++) {
        cpu_relax();
        if (i % GROUP_WAIT_YIELD == 0)
            sched_yield();
    }
    if (trace_on)
        trace_wait += ffn_trace_now() - t0;
}

/* The columns [*e0, *e1) of reduction or column slice r */
static void slice_cols(const struct ffn_job *j, int32_t r, int64_t *e0, int64_t *e1)
{
    const int64_t E = j->m->hp.n_embd;
    *e0 = (int64_t)r * j->red_chunk;
    *e1 = *e0 + j->red_chunk < E ? *e0 + j->red_chunk : E;
}

/* y[t, e0:e1] = Σ in group order of the accumulators of the groups used by token t, each group
 * taken as soon as it is done: a reduction slice's columns are whole cache lines (no false sharing
 * of y between slices), and it runs along the groups while the last of them are computed. */
static void group_reduce(const struct ffn_job *j, int32_t r)
{
    const int64_t E = j->m->hp.n_embd;
    const int32_t nt = j->t1 - j->t0;
    int64_t e0, e1;
    slice_cols(j, r, &e0, &e1);
    for (int32_t t = 0; t < nt; t++)
        memset(j->y + (size_t)(j->t0 + t) * E + e0, 0, (size_t)(e1 - e0) * sizeof(float));
    for (int64_t g = 0; g < j->n_groups; g++) {
        group_wait(j, g);
        for (int32_t t = 0; t < nt; t++) {
            if (!j->gused[(size_t)g * AXPY_TOKENS + t])
                continue;
            float *y = j->y + (size_t)(j->t0 + t) * E;
            const float *acc = j->gacc + ((size_t)g * (size_t)nt + (size_t)t) * (size_t)E;
            for (int64_t e = e0; e < e1; e++)
                y[e] += acc[e];
        }
    }
}

/* A column slice walks the groups in order, and each group's record is a line (two with its act) that
 * another core wrote. Read one group at a time with the group's AXPYs between them, those transfers
 * came one after the other (~290 ns a group: ~12 µs of a slice's 15–25 on the GPU host, bench_ffn -T,
 * 2026-12-03 k3 / k4). So a slice takes every group already done, up to COL_BATCH of them, reads
 * their records into one list first — independent loads the core overlaps — and then makes their
 * AXPYs, each group's as before (summed from zero in ascending neuron order and added into y in
 * group order: the same operations, the same bits), the next AXPY's row segments prefetched into L1
 * while one runs. The prefetches of the walk before (the live rows of the next groups, the predicted
 * rows of the groups still computed) are gone. GPU host, hybrid s4 at 2.59 GiB, three interleaved
 * rounds (docs/BENCHMARKS.md, 2026-12-03 c3): 291.3 → 298.5 tok/s by the means; without the next
 * AXPY's prefetch the batch lost (264.8: its AXPYs waited for every segment line). */
#define COL_BATCH 8

/* rows a batch holds (48 KiB on the slice's stack): any one group for every token of a pass, or more
 * groups while their rows fit */
#define COL_BATCH_ROWS (AXPY_GROUP * AXPY_TOKENS)

/* A batch: the (token, row count) of each non-empty AXPY in order, and their rows and activations */
struct col_batch {
    int32_t n_seg, n_rows;
    int32_t seg_tok[COL_BATCH * AXPY_TOKENS], seg_rows[COL_BATCH * AXPY_TOKENS];
    float a[COL_BATCH_ROWS];
    const void *rows[COL_BATCH_ROWS];
};

/* Group g's non-empty AXPYs (one a token) into the batch; false, and nothing added, if they would
 * not fit after what the batch holds */
static bool batch_take(const struct ffn_job *j, int64_t g, size_t off, struct col_batch *b)
{
    const struct ffn_group_rec *rec = &j->grec[g];
    const int32_t nt = j->t1 - j->t0, rows = rec->rows;
    if (!rows)
        return true;
    if (b->n_rows + (int64_t)rows * nt > COL_BATCH_ROWS && b->n_seg)
        return false;
    for (int32_t t = 0; t < nt; t++) {
        const int32_t nl = rec_rows(j, rec, t, off, b->a + b->n_rows, b->rows + b->n_rows);
        if (!nl)
            continue;
        b->seg_tok[b->n_seg] = t;
        b->seg_rows[b->n_seg++] = nl;
        b->n_rows += nl;
    }
    return true;
}

/* y[t, e0:e1] by columns: for each group in order (as soon as it is done), token t's live rows of it
 * restricted to the columns, summed in ascending neuron order from zero and added into y
 * (quant_axpy_rows_add): the group accumulator's columns e0..e1, the same operations, never written
 * out. The groups are read a batch at a time (above). */
static void col_add(const struct ffn_job *j, int32_t r)
{
    const int64_t E = j->m->hp.n_embd;
    const int32_t nt = j->t1 - j->t0;
    int64_t e0, e1;
    slice_cols(j, r, &e0, &e1);
    const size_t off = quant_row_size(j->dt->type, e0); /* e0 is a whole number of blocks */
    const size_t len = quant_row_size(j->dt->type, e1 - e0);
    struct col_batch b;
    for (int32_t t = 0; t < nt; t++)
        memset(j->y + (size_t)(j->t0 + t) * E + e0, 0, (size_t)(e1 - e0) * sizeof(float));
    if (j->src && !bits_ready(j))
        return; /* the caller drops the step */
    const bool tracing = trace_on != NULL;
    for (int64_t g = 0; g < j->n_groups;) {
        group_wait(j, g);
        const uint64_t tp = tracing ? ffn_trace_now() : 0;
        b.n_seg = b.n_rows = 0;
        int64_t h = g;
        /* group g is done; those after it that are done too come in the same batch */
        while (h < j->n_groups && h < g + COL_BATCH && (h == g || group_is_done(j, h)) && batch_take(j, h, off, &b))
            h++;
        if (tracing)
            trace_rec += ffn_trace_now() - tp;
        for (int32_t s = 0, at = 0; s < b.n_seg; at += b.seg_rows[s], s++) {
            if (s + 1 < b.n_seg) /* the next AXPY's segments while this one runs */
                for (int32_t q = 0; q < b.seg_rows[s + 1]; q++)
                    prefetch_bytes(b.rows[at + b.seg_rows[s] + q], len);
            const uint64_t ta = tracing ? ffn_trace_now() : 0;
            quant_axpy_rows_add(j->dt->type, e1 - e0, j->y + (size_t)(j->t0 + b.seg_tok[s]) * E + e0, b.a + at,
                                b.rows + at, b.seg_rows[s]);
            if (tracing)
                trace_axpy += ffn_trace_now() - ta;
        }
        g = h;
    }
}

/* One job a pass: slices [0, n_groups) compute the groups, the n_red after them reduce (or add by
 * columns). */
static void group_job(void *arg, int ith, int nth)
{
    const struct ffn_job *j = arg;
    struct ffn_trace *tr = trace_on;
    const uint64_t t0 = tr ? ffn_trace_now() : 0;
    if (tr)
        trace_wait = trace_rec = trace_axpy = 0;
    (void)nth;
    if (ith < j->n_groups)
        group_one(j, ith);
    else if (j->by_cols)
        col_add(j, (int32_t)(ith - j->n_groups));
    else
        group_reduce(j, (int32_t)(ith - j->n_groups));
    if (tr && ith < tr->cap) {
        if (trace_tid < 0)
            trace_tid = atomic_fetch_add_explicit(&trace_tids, 1, memory_order_relaxed);
        tr->slice[ith] = (struct ffn_slice_trace){ t0, ffn_trace_now(), trace_wait, trace_rec, trace_axpy, trace_tid };
    }
}

/* y[b, e] = Σ over runs of down[e, run] · act[b, run] for this thread's rows e */
static void down_worker(void *arg, int ith, int nth)
{
    const struct ffn_job *j = arg;
    const struct pi_tensor *d = &j->l->ffn_down;
    const struct pi_type_traits *tt = quant_traits(d->type);
    const int64_t E = d->ne[1];
    const int64_t e0 = E * ith / nth, e1 = E * (ith + 1) / nth;
    for (int64_t e = e0; e < e1; e++) {
        const char *row = (const char *)d->data + (size_t)e * d->row_bytes;
        for (int32_t t = 0; t < j->B; t++) {
            const char *a = j->aq + (size_t)t * j->aq_stride;
            float acc = 0.0f;
            for (int32_t k = 0; k < j->n_drun; k++) {
                const int64_t s = j->drun[k][0], len = j->drun[k][1];
                float part;
                if (tt->vec_dot_sub && (s % tt->blck_size || len % tt->blck_size))
                    tt->vec_dot_sub(s, s + len, &part, row, a); /* a run inside super-blocks */
                else
                    tt->vec_dot(len, &part, row + quant_row_size(d->type, s), a + quant_row_size(tt->vec_dot_type, s));
                acc += part;
            }
            j->y[(size_t)t * E + e] = acc;
        }
    }
}

static int64_t lcm64(int64_t a, int64_t b)
{
    int64_t x = a, y = b;
    while (y) {
        const int64_t r = x % y;
        x = y;
        y = r;
    }
    return a / x * b;
}

/* Widen runs to whole blocks of blk neurons, merging runs that then touch: a block is read once,
 * and its neurons outside S have act 0, so they add nothing. */
static int32_t widen_runs(const struct ffn_runs *r, int64_t blk, int64_t n_ff, int32_t (*out)[2])
{
    int32_t n = 0;
    for (int32_t k = 0; k < r->n; k++) {
        int64_t s = r->run[k][0] / blk * blk, e = (r->run[k][0] + r->run[k][1] + blk - 1) / blk * blk;
        if (e > n_ff)
            e = n_ff;
        if (n && out[n - 1][0] + out[n - 1][1] >= s) {
            out[n - 1][1] = (int32_t)(e - out[n - 1][0]);
        } else {
            out[n][0] = (int32_t)s;
            out[n][1] = (int32_t)(e - s);
            n++;
        }
    }
    return n;
}

/* ffn_partial's input into s->in_* (ffn_input_prepare without marking it ready) */
static int input_make(struct ffn_scratch *s, const struct pi_model *m, const struct pi_layer_weights *w,
                      const float *xn, int32_t B)
{
    const struct pi_layer *l = w->l;
    const int64_t E = m->hp.n_embd;
    s->in_xq = s->in_xact = NULL; /* nothing to claim (ffn_scratch_claim) if this fails */
    /* n in gate/up's vec_dot_type (gate and up share a type in every file we know; checked) */
    const struct pi_type_traits *gt = quant_traits(l->ffn_gate.type);
    if (l->ffn_up.type != l->ffn_gate.type)
        return pi_fail(PI_E_UNSUPPORTED, "ffn: layer %d has gate %s and up %s: mixed types are not supported",
                       w->layer, gt->name, quant_traits(l->ffn_up.type)->name);
    if (w->slot && !l->ffn_down_t.data)
        return pi_fail(PI_E_UNSUPPORTED, "ffn: layer %d: a neuron cache holds ffn_down_t rows, and the layer has none",
                       w->layer);
    int rc;
    if (gt->vec_dot_type == PI_TYPE_F32) {
        s->in_xq = (const char *)xn;
        s->in_xq_stride = (size_t)E * sizeof(float);
    } else {
        s->in_xq_stride = quant_row_size(gt->vec_dot_type, E);
        if ((rc = ops_scratch_reserve(&s->xq, s->in_xq_stride * (size_t)B)))
            return rc;
        for (int32_t t = 0; t < B; t++)
            quant_traits(gt->vec_dot_type)->from_float(xn + (size_t)t * E, (char *)s->xq.buf + s->in_xq_stride * (size_t)t,
                                                        E);
        s->in_xq = s->xq.buf;
    }
    s->in_xact_stride = 0;
    if (l->ffn_down_t.data) {
        /* each token's activation prepared once for every group's gathers (they would each prepare
         * it: ~86 times a layer), 64-byte aligned as the kernels' aligned loads want */
        const uint32_t gate_type = lw_tensor(w, PI_ROW_GATE)->type;
        s->in_xact_stride = quant_gather_act_bytes(gate_type, E);
        if (s->in_xact_stride) {
            if ((rc = ops_scratch_reserve(&s->xact, s->in_xact_stride * (size_t)B + 64)))
                return rc;
            char *xa = (char *)(((uintptr_t)s->xact.buf + 63) & ~(uintptr_t)63);
            for (int32_t t = 0; t < B; t++)
                quant_gather_act_prepare(gate_type, E, s->in_xq + s->in_xq_stride * (size_t)t,
                                         xa + s->in_xact_stride * (size_t)t);
            s->in_xact = xa;
        }
    }
    s->in_B = B;
    return 0;
}

int ffn_input_prepare(struct ffn_scratch *s, const struct pi_model *m, const struct pi_layer_weights *w,
                      const float *xn, int32_t B)
{
    const int rc = input_make(s, m, w, xn, B);
    s->in_ready = rc == 0;
    s->in_xn = xn;
    s->in_l = w->l;
    return rc;
}

/* The down_t path's one pool job a pass of AXPY_TOKENS tokens (j: all but the group fields set):
 * groups, then the reduction or the column slices. sparse: few neurons a group (by columns where the
 * type's kernel allows). *bytes: what the groups read. */
static int down_t_job(struct pi_pool *pool, struct ffn_scratch *s, struct ffn_job *j, bool sparse, uint64_t *bytes)
{
    const struct pi_layer *l = j->l;
    const int64_t E = j->m->hp.n_embd, F = j->m->hp.n_ff;
    /* down_t: the activations, then each thread AXPYs every live neuron into its slice of y */
    const struct pi_type_traits *tt = quant_traits(l->ffn_down_t.type);
    if (!tt || !tt->axpy)
        return pi_fail(PI_E_UNSUPPORTED, "ffn: tensor '%s' has type %u without an AXPY kernel", l->ffn_down_t.name,
                       l->ffn_down_t.type);
    j->dt = &l->ffn_down_t;
    j->axpy = tt->axpy;
    j->n_groups = (F + AXPY_GROUP - 1) / AXPY_GROUP;
    const size_t gneed = (size_t)j->n_groups * AXPY_TOKENS * (size_t)E;
    if (s->gacc_cap < gneed) {
        float *p = realloc(s->gacc, gneed * sizeof *p);
        uint8_t *u = realloc(s->gused, (size_t)j->n_groups * AXPY_TOKENS);
        if (p)
            s->gacc = p;
        if (u)
            s->gused = u;
        if (!p || !u)
            return pi_fail(PI_E_NOMEM, "ffn: out of memory for %lld neuron groups", (long long)j->n_groups);
        s->gacc_cap = gneed;
    }
    if (s->grec_cap < j->n_groups) {
        struct ffn_group_rec *r = aligned_alloc(GREC_ACT_LINE, (size_t)j->n_groups * sizeof *r);
        if (!r)
            return pi_fail(PI_E_NOMEM, "ffn: out of memory for %lld neuron groups", (long long)j->n_groups);
        for (int64_t g = 0; g < j->n_groups; g++)
            atomic_init(&r[g].done, 0);
        free(s->grec);
        s->grec = r;
        s->grec_cap = j->n_groups;
        s->gstamp = 0;
    }
    j->gacc = s->gacc;
    j->gused = s->gused;
    j->grec = s->grec;
    /* reduction (or column) slices: one per thread, of whole cache lines of y; by columns also
     * of whole blocks of down_t */
    j->by_cols = s->split == FFN_SPLIT_COLS ||
                 (s->split == FFN_SPLIT_AUTO && sparse && quant_axpy_rows_add_native(l->ffn_down_t.type));
    const int64_t line = CACHE_LINE / (int64_t)sizeof(float);
    const int64_t unit = j->by_cols ? lcm64(line, tt->blck_size) : line;
    j->n_red = pool_size(pool);
    j->red_chunk = ((E + j->n_red - 1) / j->n_red + unit - 1) / unit * unit;
    j->n_red = (int32_t)((E + j->red_chunk - 1) / j->red_chunk);
    uint64_t rows = 0, pred = 0;
    for (int32_t t0 = 0; t0 < j->B; t0 += AXPY_TOKENS) {
        j->t0 = t0;
        j->t1 = t0 + AXPY_TOKENS < j->B ? t0 + AXPY_TOKENS : j->B;
        if (++s->gstamp == 0) { /* wrapped: no group may still hold the new stamp */
            for (int64_t g = 0; g < j->n_groups; g++)
                atomic_store_explicit(&s->grec[g].done, 0, memory_order_relaxed);
            s->gstamp = 1;
        }
        j->stamp = s->gstamp;
        /* one slice per group (a thread that finishes its group takes the next one), then the
         * reduction's slices, in one hand-out */
        if (trace_on) {
            trace_on->n_groups = (int32_t)j->n_groups;
            trace_on->n_slices = (int32_t)(j->n_groups + j->n_red);
            trace_on->handout = ffn_trace_now();
        }
        pool_run_n(pool, group_job, j, (int)(j->n_groups + j->n_red));
        for (int64_t g = 0; g < j->n_groups; g++) {
            rows += (uint64_t)j->grec[g].rows;
            pred += t0 == 0 ? (uint64_t)j->grec[g].n_pred : 0;
        }
    }
    if (bytes)
        *bytes = pred * (l->ffn_gate.row_bytes + l->ffn_up.row_bytes) + rows * l->ffn_down_t.row_bytes;
    return 0;
}

/* What both entries do first: j for B tokens of xn through layer w into y, the activations' buffer,
 * and the input (the one ffn_input_prepare made for this call, taken once; else made here: the same
 * operations) */
static int job_begin(struct ffn_scratch *s, const struct pi_model *m, const struct pi_layer_weights *w, const float *xn,
                     int32_t B, float *y, struct ffn_job *j)
{
    const int64_t F = m->hp.n_ff;
    const bool ready = s->in_ready && s->in_xn == xn && s->in_B == B && s->in_l == w->l;
    s->in_ready = false;
    const int64_t need = 2 * (int64_t)B * F;
    if (s->act_cap < need) {
        float *p = realloc(s->act, (size_t)need * sizeof *p);
        if (!p)
            return pi_fail(PI_E_NOMEM, "ffn: out of memory");
        s->act = p;
        s->act_cap = need;
    }
    *j = (struct ffn_job){ .t0 = 0, .t1 = B, .m = m, .l = w->l, .w = w, .act = s->act, .up = s->act + (size_t)B * F,
                           .y = y, .B = B };
    int rc;
    if (!ready && (rc = input_make(s, m, w, xn, B)))
        return rc;
    j->xq = s->in_xq;
    j->xq_stride = s->in_xq_stride;
    j->xact = s->in_xact;
    j->xact_stride = s->in_xact_stride;
    return 0;
}

int ffn_partial_bits(struct pi_pool *pool, struct ffn_scratch *s, const struct pi_model *m,
                     const struct pi_layer_weights *w, const float *xn, const struct ffn_bits *src, float *y, uint64_t *bytes)
{
    if (bytes)
        *bytes = 0;
    if (!w->l->ffn_down_t.data) {
        s->in_ready = false;
        return pi_fail(PI_E_UNSUPPORTED, "ffn: layer %d has no ffn_down_t: its neurons cannot be given as bits",
                       w->layer);
    }
    struct ffn_job j;
    int rc;
    if ((rc = job_begin(s, m, w, xn, 1, y, &j)))
        return rc;
    _Atomic int state = SRC_WAIT;
    j.src = src;
    j.src_state = &state;
    /* a hybrid's cold share: a few neurons a group */
    if ((rc = down_t_job(pool, s, &j, true, bytes)))
        return rc;
    return atomic_load_explicit(&state, memory_order_relaxed) == SRC_READY ? 0 : 1;
}

int ffn_partial(struct pi_pool *pool, struct ffn_scratch *s, const struct pi_model *m,
                const struct pi_layer_weights *w, const float *xn, int32_t B, const struct ffn_runs *runs,
                const uint8_t *mask, float *y, uint64_t *bytes)
{
    const struct pi_layer *l = w->l;
    const int64_t E = m->hp.n_embd, F = m->hp.n_ff;
    if (bytes)
        *bytes = 0;
    if (runs->n == 0) {
        s->in_ready = false; /* the input made ahead is this call's: taken */
        memset(y, 0, (size_t)B * E * sizeof *y);
        return 0;
    }
    struct ffn_job j;
    int rc;
    if ((rc = job_begin(s, m, w, xn, B, y, &j)))
        return rc;
    j.runs = runs;
    j.mask = mask;
    if (l->ffn_down_t.data) {
        bool sparse = runs->n_neurons <= COLS_MAX_PER_GROUP * ((F + AXPY_GROUP - 1) / AXPY_GROUP);
        return down_t_job(pool, s, &j, sparse, bytes);
    }
    /* ffn_down: the activations first, then each thread dots its rows of down with them */
    const struct pi_type_traits *dt = quant_traits(l->ffn_down.type);
    memset(j.act, 0, (size_t)B * F * sizeof *j.act);
    pool_run_n(pool, act_worker, &j, pool_slices_for(pool, runs->n_neurons, 64));
    if (dt->vec_dot_type == PI_TYPE_F32) {
        j.aq = (const char *)j.act;
        j.aq_stride = (size_t)F * sizeof(float);
    } else {
        j.aq_stride = quant_row_size(dt->vec_dot_type, F);
        if ((rc = ops_scratch_reserve(&s->aq, j.aq_stride * (size_t)B)))
            return rc;
        for (int32_t t = 0; t < B; t++)
            quant_traits(dt->vec_dot_type)->from_float(j.act + (size_t)t * F, (char *)s->aq.buf + j.aq_stride * (size_t)t, F);
        j.aq = s->aq.buf;
    }
    /* runs widen to whole blocks of down and of its vec_dot type; the super-block types (256) only
     * to their sub-blocks (16 or 32), which vec_dot_sub dots on their own */
    int64_t blk = dt->vec_dot_sub ? dt->sub_size
                  : dt->blck_size > quant_traits(dt->vec_dot_type)->blck_size ? dt->blck_size
                                                                             : quant_traits(dt->vec_dot_type)->blck_size;
    if ((rc = ops_scratch_reserve(&s->drun, (size_t)runs->n * sizeof(int32_t[2]))))
        return rc;
    int32_t (*drun)[2] = s->drun.buf;
    j.drun = drun;
    j.n_drun = widen_runs(runs, blk, F, drun);
    pool_run_n(pool, down_worker, &j, pool_slices_for(pool, E, 64));
    if (bytes) {
        uint64_t b = (uint64_t)runs->n_neurons * (l->ffn_gate.row_bytes + l->ffn_up.row_bytes);
        uint64_t nd = 0; /* neurons of down read; parts of super-blocks count their share of its bytes */
        for (int32_t k = 0; k < j.n_drun; k++)
            nd += (uint64_t)drun[k][1];
        b += (uint64_t)E * (nd * dt->type_size / (uint64_t)dt->blck_size);
        *bytes = b;
    }
    return 0;
}
