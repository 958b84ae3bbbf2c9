/* bundle.h — the bundled FFN layout: a sidecar file next to a PowerInfer model (as the gpuidx is)
 * in which neuron i of layer l has its gate row, up row and ffn_down_t row back to back, in one
 * O_DIRECT-aligned record, so that one read brings everything the sparse FFN needs of a neuron
 * ("LLM in a Flash", Apple 2023). The disk tier (engine/ncache.h) reads neurons from it.
 *
 * File (little-endian; docs/ARCHITECTURE.md, "The disk tier"):
 *   [0, BUNDLE_HDR_BYTES)   struct bundle_hdr, zero-padded
 *   data_off + (l·n_ff + i)·stride   neuron (l, i): gate row (gate_bytes), up row (up_bytes),
 *                           down_t row (down_bytes), zeros up to stride (a multiple of align)
 *   the file ends right after the last record (size = data_off + n_layer·n_ff·stride)
 *
 * The rows are the model's bytes, unchanged: a neuron computed from its bundle gives the same bits
 * as from the model. A bundle belongs to one model: the header carries the shapes, the row types
 * and bytes, and a fingerprint of the model (its hyperparameters, tensor types, and the bytes of
 * every layer's ffn_norm and the output norm — tensors that are always resident, so a stage whose
 * FFN rows are partly on disk can check it too); bundle_check refuses a bundle of another model,
 * naming what differs. `pictl bundle --verify` compares every row. */
#ifndef PI_ENGINE_BUNDLE_H
#define PI_ENGINE_BUNDLE_H

#include <stdint.h>

#include "model.h"

#define BUNDLE_MAGIC 0x42464950u   /* "PIFB" read as a little-endian u32 */
#define BUNDLE_VERSION 1u
#define BUNDLE_HDR_BYTES 4096u     /* the header block (the records start O_DIRECT-aligned after it) */
#define BUNDLE_DEFAULT_ALIGN 4096u /* record alignment: a 4K-sector device's O_DIRECT unit */
#define BUNDLE_SUFFIX ".ffnbundle" /* MODEL.gguf → MODEL.gguf.ffnbundle */

struct bundle_hdr {
    uint32_t magic, version;
    uint32_t n_layer, n_ff, n_embd, align;
    uint32_t gate_type, up_type, down_type, pad0;
    uint64_t gate_bytes, up_bytes, down_bytes; /* one row of each */
    uint64_t stride;                           /* bytes per neuron record */
    uint64_t data_off;                         /* first record */
    uint64_t file_bytes;                       /* the whole file */
    uint64_t fingerprint;                      /* bundle_fingerprint(model) */
    uint64_t hdr_sum;                          /* FNV-1a of the fields above */
};

/* The header a bundle of model m with record alignment align (a power of two ≥ 512) has. The model
 * must be a PowerInfer file whose layers have ffn_down_t and uniform FFN row types. */
int bundle_plan(const struct pi_model *m, uint32_t align, struct bundle_hdr *h);
/* 64-bit fingerprint of the model (see the top of this file). */
uint64_t bundle_fingerprint(const struct pi_model *m);
/* Parse and check a header read from a file of file_bytes bytes (magic, version, sums, sizes). */
int bundle_parse(const void *buf, uint64_t file_bytes, struct bundle_hdr *h);
/* h belongs to m: same shapes, types, row bytes and fingerprint; the message names the difference. */
int bundle_check(const struct bundle_hdr *h, const struct pi_model *m);
/* File offset of neuron (layer, i)'s record. */
static inline uint64_t bundle_offset(const struct bundle_hdr *h, int layer, int64_t i)
{
    return h->data_off + ((uint64_t)layer * h->n_ff + (uint64_t)i) * h->stride;
}

/* Write m's bundle to path (path.tmp, fsync, rename). *bytes (may be NULL) receives its size. */
int bundle_write(const struct pi_model *m, const char *path, uint32_t align, uint64_t *bytes);
/* Open and check path against m (NULL: the header alone, for a reader that checked it before): an fd (O_RDONLY | O_DIRECT when direct and the file system takes
 * it; *direct says what was opened) and the header. */
int bundle_open(const char *path, const struct pi_model *m, bool want_direct, int *fd, bool *direct,
                struct bundle_hdr *h);
/* Compare every record of the open bundle with the model's rows (pictl bundle --verify). */
int bundle_verify(int fd, const struct bundle_hdr *h, const struct pi_model *m);
/* "MODEL.gguf.ffnbundle" for model path p. */
int bundle_default_path(const char *model_path, char *out, size_t cap);

#endif
