/* gpuidx.h — PowerInfer's GPU neuron index file, MODEL_FILE.generated.gpuidx, read and written
 * exactly as PowerInfer does (powerinfer-py export_split.py, llama.cpp llama_gpu_split_loader):
 *
 *   magic "PWRI", u32 version 3, then a GGUF v3 body with exactly three keys, in this order:
 *     general.architecture           string "generic.gpu_index"
 *     generic.gpu_index.block_count  u32    n_layer
 *     split.vram_capacity            u64    the VRAM budget (bytes) the split was made for
 *   and 2 × n_layer tensors, in this order, all I32 and one-dimensional:
 *     blk.N.gpu_idx     [n_ff]   1 = neuron on the GPU, 0 = on the CPU
 *     blk.N.gpu_bucket  [k]      the k neurons with gpu_idx 1, ascending
 *
 * A layer with no GPU neuron has a bucket of 0 elements, as PowerInfer writes it (the GGUF reader
 * and writer accept empty tensors, as ggml does); the reader also accepts the 1-element bucket
 * that earlier pinfer builds wrote there, since PowerInfer ignores the bucket of such a layer.
 *
 * PowerInfer reuses an index whenever the budget is at least its vram_capacity; we regenerate it
 * unless the budget is equal (a larger budget deserves more neurons on the GPU). */
#ifndef PI_GPUIDX_H
#define PI_GPUIDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "vram_plan.h"

#define GPUIDX_SUFFIX ".generated.gpuidx"
#define GPUIDX_ARCH "generic.gpu_index"
#define GPUIDX_KEY_BLOCKS "generic.gpu_index.block_count"
#define GPUIDX_KEY_CAPACITY "split.vram_capacity"
#define GPUIDX_VERSION 3

/* Write gpu_idx (n_layer × n_ff, nonzero = GPU) to path (atomically: PATH.tmp, fsync, rename). */
int gpuidx_write(const char *path, int32_t n_layer, int64_t n_ff, const uint8_t *gpu_idx, uint64_t vram_capacity);

/* Read and validate a file against the model's shape: magic, version, architecture, block count
 * (-PI_E_RANGE if it is not n_layer), tensor names, order, types and shapes (-PI_E_RANGE if a
 * gpu_idx is not n_ff long), values 0/1, buckets ascending and equal to the set of ones
 * (-PI_E_FORMAT). gpu_idx (n_layer × n_ff) receives 0/1; *vram_capacity (may be NULL) the budget. */
int gpuidx_read(const char *path, int32_t n_layer, int64_t n_ff, uint8_t *gpu_idx, uint64_t *vram_capacity);

/* gpuidx_read against the model, and the budget must equal the file's split.vram_capacity
 * (-PI_E_RANGE naming both otherwise): 0 means the index can be used as it is. */
int gpuidx_load_matching(const char *path, const struct pi_model *m, uint64_t budget, uint8_t *gpu_idx);

/* PowerInfer's name for a model's index: MODEL_PATH + ".generated.gpuidx", or in dir (if not NULL)
 * under the model file's base name. -PI_E_RANGE if it does not fit in cap. */
int gpuidx_path(const char *model_path, const char *dir, char *out, size_t cap);

/* The GPU split for a model, the CUDA backend's parameters (vram_plan.h: context, sequences,
 * batch, cache type) and a budget: the existing index next to the model
 * (or, failing that, in fallback_dir) when it is valid for this model and was made for exactly this
 * budget; otherwise (or with reset: --reset-gpu-index) solved by split_solve and written next to the
 * model — or into fallback_dir (may be NULL) when that fails with a system error (a read-only
 * directory...). gpu_idx
 * (n_layer × n_ff) receives the split, path_out (cap bytes) the file used, *generated (may be NULL)
 * whether it was (re)made. */
int gpuidx_load_or_make(const char *model_path, const char *fallback_dir, const struct pi_model *m,
                        const struct vram_params *vp,
                        uint64_t budget, bool reset, uint8_t *gpu_idx, char *path_out, size_t cap,
                        bool *generated);

#endif
