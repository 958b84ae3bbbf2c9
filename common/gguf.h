/* gguf.h — GGUF v3 reader (mmap, fully validated) and writer (streaming).
 *
 * Format (little-endian): magic "GGUF" (or "PWRI" for PowerInfer sparse files), u32 version (2 or 3),
 * u64 n_tensors, u64 n_kv, then n_kv × {gguf string key, u32 type, value}, then n_tensors ×
 * {string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset}, padding to
 * general.alignment (default 32), then the data section. A gguf string is u64 len + bytes (no NUL).
 *
 * The reader validates every count, length, dimension, type and offset against the file size before
 * anything uses it; a malformed file yields -PI_E_FORMAT / -PI_E_TRUNCATED / -PI_E_UNSUPPORTED with a
 * pi_errmsg() naming the field. After gguf_open succeeds, every accessor is safe. */
#ifndef PI_GGUF_H
#define PI_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GGUF_MAGIC_GGUF 0x46554747u /* "GGUF" read as little-endian u32 */
#define GGUF_MAGIC_PWRI 0x49525750u /* "PWRI" */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

/* Metadata value types; values are on disk. */
enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};

struct gguf_file;

struct gguf_tensor {
    const char *name;           /* NUL-terminated copy */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];  /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    uint32_t type;              /* ggml type number (enum pi_type in quant.h) */
    uint64_t offset;            /* relative to the data section */
    size_t nbytes;              /* from type traits and ne */
    const void *data;           /* into the mapping */
};

/* Open and validate a file (mmap, read-only: the page cache's 4 KiB pages). */
int gguf_open(struct gguf_file **out, const char *path);
/* Open and validate a file read into anonymous memory, 2 MiB-aligned and advised for transparent
 * huge pages (read-only once read; llama.cpp's --no-mmap). Costs the file's size in RAM that the
 * kernel cannot reclaim, and the read; gains a TLB entry per 2 MiB instead of per 4 KiB, which is
 * what scattered sparse-FFN rows and, in a VM (two-level page walks), even streamed GEMV rows pay
 * for. Without THP (transparent_hugepage=never) the pages are 4 KiB: correct, just no faster. */
int gguf_open_read(struct gguf_file **out, const char *path);
/* Bytes of f's image on huge pages (AnonHugePages of its mapping in /proc/self/smaps); 0 for a
 * file mapping or an in-memory image, or when the kernel gave none. */
size_t gguf_huge_bytes(const struct gguf_file *f);
/* Validate an in-memory image (not copied: must outlive the handle). */
int gguf_open_mem(struct gguf_file **out, const void *data, size_t size);
void gguf_close(struct gguf_file *f);

uint32_t gguf_magic(const struct gguf_file *f);     /* GGUF_MAGIC_GGUF or GGUF_MAGIC_PWRI */
bool gguf_is_powerinfer(const struct gguf_file *f); /* magic == PWRI */
uint32_t gguf_version(const struct gguf_file *f);
size_t gguf_alignment(const struct gguf_file *f);
const void *gguf_base(const struct gguf_file *f);   /* start of the whole file image */
size_t gguf_size(const struct gguf_file *f);
size_t gguf_data_offset(const struct gguf_file *f); /* file offset of the data section */

/* ---- metadata ---- */
size_t gguf_n_kv(const struct gguf_file *f);
int64_t gguf_find_key(const struct gguf_file *f, const char *key); /* index or -1 */
const char *gguf_kv_key(const struct gguf_file *f, size_t i);
enum gguf_type gguf_kv_type(const struct gguf_file *f, size_t i); /* GGUF_TYPE_COUNT if i is out of range */
/* Raw little-endian bytes of the i-th value when it is a scalar number or bool (gguf_type_size bytes,
 * may be unaligned), else NULL. Lets generic code (gguf_writer_copy_kv, dumpers) handle every type. */
const void *gguf_kv_data(const struct gguf_file *f, size_t i);
/* Bytes of one value of a scalar type (0 for STRING, ARRAY and unknown types), and its name. */
size_t gguf_type_size(enum gguf_type t);
const char *gguf_type_name(enum gguf_type t); /* "u32", "string"...; "?" if unknown */

/* Typed getters: 0, -PI_E_NOTFOUND (absent; no message recorded), or -PI_E_TYPE (present with an
 * incompatible type or a value that does not fit; message names the key). Integer getters accept
 * any integer type whose value fits; gguf_get_f32 accepts FLOAT32 and FLOAT64. */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out);
int gguf_get_i32(const struct gguf_file *f, const char *key, int32_t *out);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out);
/* String value: NUL-terminated copy owned by the handle. */
int gguf_get_str(const struct gguf_file *f, const char *key, const char **out);
/* Array: element type and count; for numeric arrays *data points at the raw little-endian elements
 * (may be unaligned: read with memcpy). For string arrays *data is NULL: use gguf_get_arr_str. */
int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_type *elem_type, size_t *n,
                 const void **data);
/* i-th string of a string array (NUL-terminated copy owned by the handle; len excludes the NUL and
 * the string may contain embedded NULs, so use len). */
int gguf_get_arr_str(const struct gguf_file *f, const char *key, size_t i, const char **s, size_t *len);

/* ---- tensors ---- */
size_t gguf_n_tensors(const struct gguf_file *f);
const struct gguf_tensor *gguf_tensor(const struct gguf_file *f, size_t i);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name); /* or NULL */

/* ---- writer ----
 * Streaming so that a converter never holds a whole model: declare keys and tensors, then
 * gguf_writer_open() writes the header, then gguf_writer_write_tensor() once per tensor in declared
 * order, then gguf_writer_close() (writes to PATH.tmp, fsyncs and renames, so a failed write never
 * leaves a half file under the final name). gguf_writer_write_file() does all of it for tensors
 * declared with data. Setting an existing key replaces it. */
struct gguf_writer;
int gguf_writer_new(struct gguf_writer **out, uint32_t magic /* GGUF_MAGIC_GGUF or _PWRI */);
void gguf_writer_free(struct gguf_writer *w); /* also removes PATH.tmp if not closed */
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* Any scalar number or bool type: gguf_type_size(type) raw little-endian bytes copied from v. */
int gguf_writer_set_scalar(struct gguf_writer *w, const char *key, enum gguf_type type, const void *v);
/* Numeric array: n elements of elem_type copied from data. */
int gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_type elem_type,
                        const void *data, size_t n);
/* String array: strs[i] with lens[i] bytes (lens may be NULL: strlen). Copied. */
int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *strs,
                            const size_t *lens, size_t n);
/* Copy every key of a reader (e.g. to re-write a model with extra keys). */
int gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_file *src);
/* Declare a tensor; data (nbytes from type and ne) is referenced, not copied, and may be NULL when
 * the caller streams it with gguf_writer_write_tensor. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, const void *data);
int gguf_writer_open(struct gguf_writer *w, const char *path);
int gguf_writer_write_tensor(struct gguf_writer *w, const void *data); /* next declared tensor */
int gguf_writer_close(struct gguf_writer *w);
int gguf_writer_write_file(struct gguf_writer *w, const char *path);
/* A tool's output must never be one of its inputs: 0 when OUT is not the same file as IN (same
 * device and inode, so also through a hard or symbolic link or another spelling of the path; an OUT
 * that does not exist yet is never IN), else -PI_E_INVAL with a message naming both. The writer
 * replaces OUT by rename, so without this check `calibrate m.gguf -o m.gguf` would silently replace
 * its input. `what` names the input in the message ("the model", "--data file"). */
int gguf_check_not_input(const char *out, const char *in, const char *what);

#endif
