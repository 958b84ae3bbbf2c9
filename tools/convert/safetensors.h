/* safetensors.h — read Hugging Face safetensors checkpoints (one file or a sharded set), mmap'd.
 *
 * File: u64 little-endian header length N, N bytes of JSON
 *   {"NAME": {"dtype": "F32"|"F16"|"BF16", "shape": [d0, d1, ...], "data_offsets": [begin, end]},
 *    ..., "__metadata__": {...}}
 * then the data; offsets are relative to the byte after the header. Shapes are numpy order (the
 * last dimension is contiguous). A sharded checkpoint has model.safetensors.index.json with
 * {"weight_map": {"NAME": "model-00001-of-00002.safetensors", ...}}.
 *
 * Every offset, size and dtype×shape product is checked against the file before use; a bad file
 * yields -PI_E_FORMAT / -PI_E_TRUNCATED / -PI_E_UNSUPPORTED naming the tensor and the file. */
#ifndef PI_SAFETENSORS_H
#define PI_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 4

enum st_dtype { ST_F32 = 0, ST_F16 = 1, ST_BF16 = 2 };

struct st_tensor {
    char *name;
    enum st_dtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS]; /* numpy order: shape[n_dims-1] is contiguous */
    int64_t n_elems;
    const void *data;           /* into the mapping; may be unaligned (read with memcpy) */
    size_t nbytes;
    const char *file;           /* path of the file holding it (owned by the set) */
};

struct st_set;

/* Open DIR/model.safetensors.index.json with its shards if it exists, else DIR/model.safetensors. */
int st_open_dir(struct st_set **out, const char *dir);
/* Open one safetensors file. */
int st_open_file(struct st_set **out, const char *path);
void st_close(struct st_set *s);

size_t st_n_tensors(const struct st_set *s);
const struct st_tensor *st_tensor_at(const struct st_set *s, size_t i); /* sorted by name */
const struct st_tensor *st_find(const struct st_set *s, const char *name); /* or NULL */

/* Bytes per element of a dtype. */
size_t st_dtype_size(enum st_dtype t);
const char *st_dtype_name(enum st_dtype t);

/* Elements [first, first+n) of a tensor (flat index) converted to f32. The caller keeps the range
 * inside the tensor. */
void st_read_f32(const struct st_tensor *t, int64_t first, int64_t n, float *dst);

#endif
