/* act.h — the "act" segment: the per-layer exchange between gpud, predictord and cpud.
 *
 * Created by the supervisor (sizes from the model), attached by the data-plane stages. Contents
 * (offsets in the segment header):
 *   offsets[0]  struct act_hdr           geometry, and the key of the step gpud is waiting on
 *   offsets[1]  h      float [n_batch][n_embd]   residual after attention (gpud writes)
 *   offsets[2]  mask   uint8 [n_batch][n_ff]     predicted-active neurons (predictord writes), then
 *               cold_bits uint64 [(n_ff + 63) / 64]  one token's predicted-active neurons that are not
 *                                                  on the device, 64 a word (gpud's device writes)
 *   offsets[3]  ycold  float [n_batch][n_embd]   cpud's FFN share (cpud writes)
 *   offsets[4]  gpu_idx uint8 [n_layer][n_ff]    1 = neuron computed by gpud ("hot"), 0 = cpud
 *   offsets[5..9] rings of struct act_item: ACT_RING_PRED_IN (gpud→predictord),
 *               ACT_RING_PRED_GPU (predictord→gpud), ACT_RING_PRED_CPU (predictord→cpud),
 *               ACT_RING_GPU_CPU (gpud→cpud, used while predictord is down),
 *               ACT_RING_CPU_GPU (cpud→gpud)
 * The protocol (who writes what, when, and the memory orders) is in docs/ARCHITECTURE.md. */
#ifndef PI_IPC_ACT_H
#define PI_IPC_ACT_H

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring.h"
#include "shm.h"

enum act_ring {
    ACT_RING_PRED_IN = 0,
    ACT_RING_PRED_GPU = 1,
    ACT_RING_PRED_CPU = 2,
    ACT_RING_GPU_CPU = 3,
    ACT_RING_CPU_GPU = 4,
    ACT_RING_COUNT = 5,
};

#define ACT_OFF_HDR 0
#define ACT_OFF_H 1
#define ACT_OFF_MASK 2
#define ACT_OFF_YCOLD 3
#define ACT_OFF_GPU_IDX 4
#define ACT_OFF_RING0 5
#define ACT_RING_SLOTS 64

/* One step of one layer: what every message on the rings carries. Work is idempotent and keyed:
 * a result whose (epoch, seq) is not the step gpud waits on is stale and dropped. */
struct act_item {
    uint64_t epoch;  /* gpud session (pi_ctl.epoch) that issued the step */
    uint64_t seq;    /* step number within the session, strictly increasing */
    uint64_t req_id; /* request the step belongs to */
    int32_t pos;     /* position of the first token */
    int32_t n_tok;   /* tokens in the step (1 in decode, up to n_batch in prefill) */
    int32_t layer;
    uint32_t flags;  /* ACT_ITEM_* */
};
#define ACT_ITEM_ALL_ACTIVE 1u /* no predictor mask: every neuron of the share is active */
#define ACT_ITEM_TO_CPUD 2u    /* on PRED_GPU: predictord also handed the step to cpud */
#define ACT_ITEM_FAILED 4u     /* on CPU_GPU: cpud could not compute the step (a disk read failed);
                                  the reason is in cpud's pi_stage_info.last_error, written before */
#define ACT_ITEM_DEV_KEY 8u    /* on GPU_CPU: gpud's device writes this step's h and masks into the
                                  segment and then stores seq into act_hdr.dev_seq; gpud hands the
                                  step over before its device gets there, so the consumer waits for
                                  that key (act_wait_dev) instead of reading cur_seq / mask_seq */
#define ACT_ITEM_COLD_BITS 16u /* on GPU_CPU, with ACT_ITEM_DEV_KEY, one token: the device also writes
                                  cold_bits, the token's mask ∧ gpu_idx == 0 as bits (bit k of word w
                                  = neuron 64 w + k), so cpud lists its neurons from 1.4 KB instead of
                                  the mask's and gpu_idx's 22 KB */
static_assert(sizeof(struct act_item) == 40, "act_item is on the wire between stages");

struct act_hdr {
    int32_t n_layer, n_embd, n_ff, n_batch;
    float gpu_ffn_share;
    uint32_t reserved;
    /* The step gpud currently waits on: gpud stores seq with release after writing h and the
     * item's other fields; predictord and cpud load it with acquire before computing, to skip
     * work that is already stale (an optimisation: correctness comes from the keys). */
    _Atomic uint64_t cur_epoch;
    _Atomic uint64_t cur_seq;
    /* Keys of the buffers' contents: each writer stores the seq with release after writing the
     * buffer; a reader acquires it and compares with the item's seq before use. */
    _Atomic uint64_t mask_seq;
    _Atomic uint64_t ycold_seq;
    /* cpud waits on two input rings: producers bump this doorbell (release) after committing and
     * FUTEX_WAKE it when cpud_sleeping is set (see cpud/cpud.c for the lost-wakeup argument). */
    _Atomic uint32_t cpud_bell;
    _Atomic uint32_t cpud_sleeping;
    /* The key of h and the masks that gpud's device wrote (ACT_ITEM_DEV_KEY steps): the device
     * stores seq here with a system-scope release after writing them; cpud acquires it. Strictly
     * increasing within a gpud session, and sessions number their steps from epoch << 40, so a key
     * an older session left is below every step of a newer one. On its own cache line: cpud spins on
     * it while the line above changes every step. */
    _Alignas(64) _Atomic uint64_t dev_seq;
    /* The key of h alone: the device may store seq here (same release) as soon as h is written, before
     * its predictor has made the masks, so that cpud normalizes h while the predictor runs. A device
     * that writes h with the masks stores only dev_seq, which covers h too (act_wait_dev_h). */
    _Alignas(64) _Atomic uint64_t dev_h_seq;
};

struct act_params {
    int32_t n_layer, n_embd, n_ff;
    int32_t n_batch;     /* most tokens per pipeline step (prefill chunk) */
    float gpu_ffn_share; /* fraction of each layer's neurons gpud computes (rounded to blocks of 32) */
};

/* Bytes of the act segment for these parameters (0 if invalid). */
size_t act_seg_bytes(const struct act_params *p);
/* Lay out a freshly created act segment (seg from shm_create(kind PI_SEG_KIND_ACT,
 * act_seg_bytes)): header, buffers, gpu_idx split, rings. The caller then calls shm_publish. */
int act_seg_init(struct shm_seg *seg, const struct act_params *p);

/* Process-local view of an attached act segment. */
struct act_view {
    struct act_hdr *hdr;
    float *h, *ycold;
    uint8_t *mask, *gpu_idx;
    uint64_t *cold_bits; /* (n_ff + 63) / 64 words, after the masks */
    struct ring rings[ACT_RING_COUNT];
};
int act_view_attach(struct act_view *v, struct shm_seg *seg);

/* Ring doorbell for cpud: call after committing to ACT_RING_PRED_CPU or ACT_RING_GPU_CPU. */
void act_ring_cpud_bell(struct act_hdr *h);

/* Wait for the device's announcement of step it (an ACT_ITEM_DEV_KEY item): true once dev_seq ==
 * it->seq (acquire: the step's h and masks may be read), false when the step will never be
 * announced to us — a later step was (dev_seq > it->seq: gpud settled this one without us), another
 * gpud session began (cur_epoch != it->epoch), or gone() says so (called every check_every polls:
 * gpud died, or we are stopping). Spins with a pause between polls: the announcement comes within
 * a layer's GPU part. */
bool act_wait_dev(const struct act_hdr *h, const struct act_item *it, bool (*gone)(void *), void *arg,
                  uint32_t check_every);
/* The same for h alone: true once dev_h_seq == it->seq or dev_seq == it->seq (acquire: h may be read;
 * the masks only after act_wait_dev), false as act_wait_dev, or when dev_h_seq is past it->seq. */
bool act_wait_dev_h(const struct act_hdr *h, const struct act_item *it, bool (*gone)(void *), void *arg,
                    uint32_t check_every);

/* Words of cold_bits for n_ff neurons. */
static inline int64_t act_cold_words(int64_t n_ff) { return (n_ff + 63) / 64; }

#endif
