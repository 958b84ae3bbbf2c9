/* test_gguf — GGUF writer → reader round trip: every KV type, string arrays (with embedded NULs and
 * empty strings), F32/F16/Q8_0/Q4_0 tensors of random bytes, typed getters with range checks, PWRI
 * magic, custom alignment, streaming writes (PATH.tmp until close), copy_kv, and open_mem. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "pi_err.h"
#include "quant.h"
#include "testutil.h"

#define N_TENSORS 5
#define RNG_SEED 0x9e3779b97f4a7c15ull

static char tmpdir[] = "/tmp/test_gguf.XXXXXX";

/* xorshift64: reproducible random bytes without libc's rand state. */
static uint64_t rng = RNG_SEED;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

struct tdesc {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    size_t nbytes;
    uint8_t *data;
};

static struct tdesc tensors[N_TENSORS] = {
    {"tok_embd.weight", PI_TYPE_F32, 2, {7, 3, 1, 1}, 0, NULL},
    {"blk.0.attn_q.weight", PI_TYPE_F16, 3, {5, 2, 3, 1}, 0, NULL},
    {"blk.0.ffn_up.weight", PI_TYPE_Q8_0, 2, {64, 3, 1, 1}, 0, NULL},
    {"blk.0.ffn_down.weight", PI_TYPE_Q4_0, 4, {32, 2, 2, 2}, 0, NULL},
    {"output_norm.weight", PI_TYPE_F32, 1, {1, 1, 1, 1}, 0, NULL},
};

/* Values of the scalar keys, one per type (the ones without a typed setter go through set_scalar). */
static const uint8_t v_u8 = 200;
static const int8_t v_i8 = -100;
static const uint16_t v_u16 = 60000;
static const int16_t v_i16 = -30000;
static const int64_t v_i64 = INT64_MIN + 5;
static const double v_f64 = 3.141592653589793;
static const char *const vocab[] = {"<unk>", "", "hello", "w\xc3\xb6rld", "a\0b"};
static const size_t vocab_len[] = {5, 0, 5, 6, 3};
#define VOCAB_N (sizeof vocab / sizeof *vocab)
static const float arr_f32[] = {0.5f, -1.25f, 1e30f};
static const int32_t arr_i32[] = {-1, 0, 2147483647};
static const uint64_t arr_u64[] = {0, UINT64_MAX};

static void make_tensors(void)
{
    for (int i = 0; i < N_TENSORS; i++) {
        struct tdesc *t = &tensors[i];
        t->nbytes = quant_row_size(t->type, t->ne[0]) * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        REQUIRE(t->nbytes > 0, "row size of %s", t->name);
        t->data = malloc(t->nbytes);
        REQUIRE(t->data, "malloc");
        for (size_t j = 0; j < t->nbytes; j++)
            t->data[j] = (uint8_t)rnd();
    }
}

static void set_keys(struct gguf_writer *w)
{
    CHECK_OK(gguf_writer_set_str(w, "general.architecture", "llama"));
    CHECK_OK(gguf_writer_set_str(w, "general.name", "placeholder")); /* replaced below */
    CHECK_OK(gguf_writer_set_str(w, "general.name", "round trip"));
    CHECK_OK(gguf_writer_set_str(w, "empty.str", ""));
    CHECK_OK(gguf_writer_set_u32(w, "llama.block_count", 32));
    CHECK_OK(gguf_writer_set_i32(w, "test.i32", -7));
    CHECK_OK(gguf_writer_set_u64(w, "test.u64", (uint64_t)1 << 40));
    CHECK_OK(gguf_writer_set_u64(w, "test.u64_small", 12345));
    CHECK_OK(gguf_writer_set_f32(w, "test.f32", 1e-5f));
    CHECK_OK(gguf_writer_set_bool(w, "test.bool", true));
    CHECK_OK(gguf_writer_set_scalar(w, "test.u8", GGUF_TYPE_UINT8, &v_u8));
    CHECK_OK(gguf_writer_set_scalar(w, "test.i8", GGUF_TYPE_INT8, &v_i8));
    CHECK_OK(gguf_writer_set_scalar(w, "test.u16", GGUF_TYPE_UINT16, &v_u16));
    CHECK_OK(gguf_writer_set_scalar(w, "test.i16", GGUF_TYPE_INT16, &v_i16));
    CHECK_OK(gguf_writer_set_scalar(w, "test.i64", GGUF_TYPE_INT64, &v_i64));
    CHECK_OK(gguf_writer_set_scalar(w, "test.f64", GGUF_TYPE_FLOAT64, &v_f64));
    CHECK_OK(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", vocab, vocab_len, VOCAB_N));
    const char *merges[] = {"a b", "c d"};
    CHECK_OK(gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 2));
    CHECK_OK(gguf_writer_set_arr(w, "test.arr_f32", GGUF_TYPE_FLOAT32, arr_f32, 3));
    CHECK_OK(gguf_writer_set_arr(w, "test.arr_i32", GGUF_TYPE_INT32, arr_i32, 3));
    CHECK_OK(gguf_writer_set_arr(w, "test.arr_u64", GGUF_TYPE_UINT64, arr_u64, 2));
    CHECK_OK(gguf_writer_set_arr(w, "test.arr_empty", GGUF_TYPE_UINT8, NULL, 0));
    /* Misuse is refused. */
    CHECK(gguf_writer_set_arr(w, "bad", GGUF_TYPE_STRING, arr_i32, 1) == -PI_E_INVAL, "string arr");
    CHECK(gguf_writer_set_u32(w, "", 1) == -PI_E_INVAL, "empty key");
}

#define N_KEYS 21

static void check_keys(const struct gguf_file *f, size_t n_kv)
{
    const char *s;
    uint32_t u32;
    uint64_t u64;
    int32_t i32;
    float f32;
    bool b;
    CHECK(gguf_n_kv(f) == n_kv, "n_kv %zu, expected %zu", gguf_n_kv(f), n_kv);
    CHECK_OK(gguf_get_str(f, "general.architecture", &s));
    CHECK(strcmp(s, "llama") == 0, "arch '%s'", s);
    CHECK_OK(gguf_get_str(f, "general.name", &s));
    CHECK(strcmp(s, "round trip") == 0, "name '%s'", s);
    CHECK_OK(gguf_get_str(f, "empty.str", &s));
    CHECK(s[0] == '\0', "empty string");
    CHECK_OK(gguf_get_u32(f, "llama.block_count", &u32));
    CHECK(u32 == 32, "block_count %u", u32);
    CHECK_OK(gguf_get_i32(f, "test.i32", &i32));
    CHECK(i32 == -7, "i32 %d", i32);
    CHECK_OK(gguf_get_u64(f, "test.u64", &u64));
    CHECK(u64 == (uint64_t)1 << 40, "u64");
    CHECK_OK(gguf_get_f32(f, "test.f32", &f32));
    CHECK(f32 == 1e-5f, "f32 %g", f32);
    CHECK_OK(gguf_get_bool(f, "test.bool", &b));
    CHECK(b, "bool");

    /* Integer getters convert between integer types when the value fits. */
    CHECK_OK(gguf_get_u32(f, "test.u8", &u32));
    CHECK(u32 == v_u8, "u8 as u32: %u", u32);
    CHECK_OK(gguf_get_i32(f, "test.i8", &i32));
    CHECK(i32 == v_i8, "i8 as i32: %d", i32);
    CHECK_OK(gguf_get_u32(f, "test.u16", &u32));
    CHECK(u32 == v_u16, "u16");
    CHECK_OK(gguf_get_i32(f, "test.i16", &i32));
    CHECK(i32 == v_i16, "i16");
    CHECK_OK(gguf_get_i32(f, "llama.block_count", &i32));
    CHECK(i32 == 32, "u32 as i32");
    CHECK_OK(gguf_get_u32(f, "test.u64_small", &u32));
    CHECK(u32 == 12345, "u64 as u32");
    CHECK_OK(gguf_get_f32(f, "test.f64", &f32));
    CHECK(f32 == (float)v_f64, "f64 as f32");
    int64_t ki = gguf_find_key(f, "test.i64");
    REQUIRE(ki >= 0, "test.i64 missing");
    CHECK(gguf_kv_type(f, (size_t)ki) == GGUF_TYPE_INT64, "i64 type");
    int64_t i64;
    memcpy(&i64, gguf_kv_data(f, (size_t)ki), sizeof i64);
    CHECK(i64 == v_i64, "i64 raw");
    double f64;
    memcpy(&f64, gguf_kv_data(f, (size_t)gguf_find_key(f, "test.f64")), sizeof f64);
    CHECK(f64 == v_f64, "f64 raw");

    /* ... and refuse values that do not fit or types that are not integers. */
    pi_errmsg_clear();
    CHECK(gguf_get_u32(f, "test.i32", &u32) == -PI_E_TYPE, "negative into u32");
    CHECK(strstr(pi_errmsg(), "test.i32"), "message names the key: %s", pi_errmsg());
    CHECK(gguf_get_u64(f, "test.i8", &u64) == -PI_E_TYPE, "negative into u64");
    CHECK(gguf_get_u32(f, "test.u64", &u32) == -PI_E_TYPE, "2^40 into u32");
    CHECK(gguf_get_i32(f, "test.i64", &i32) == -PI_E_TYPE, "INT64_MIN+5 into i32");
    CHECK(gguf_get_i32(f, "test.u16", &i32) == 0, "u16 into i32");
    CHECK(gguf_get_u32(f, "general.name", &u32) == -PI_E_TYPE, "string as u32");
    CHECK(gguf_get_u32(f, "test.bool", &u32) == -PI_E_TYPE, "bool as u32");
    CHECK(gguf_get_bool(f, "test.u8", &b) == -PI_E_TYPE, "u8 as bool");
    CHECK(gguf_get_f32(f, "test.i32", &f32) == -PI_E_TYPE, "i32 as f32");
    CHECK(gguf_get_str(f, "test.u8", &s) == -PI_E_TYPE, "u8 as string");
    pi_errmsg_clear();
    CHECK(gguf_get_u32(f, "no.such.key", &u32) == -PI_E_NOTFOUND, "absent key");
    CHECK(pi_errmsg()[0] == '\0', "absent key must not record a message: %s", pi_errmsg());
    CHECK(gguf_find_key(f, "no.such.key") == -1, "find absent");
    CHECK(gguf_kv_key(f, gguf_n_kv(f)) == NULL, "kv_key out of range");
    CHECK(gguf_kv_type(f, gguf_n_kv(f)) == GGUF_TYPE_COUNT, "kv_type out of range");
    CHECK(gguf_kv_data(f, (size_t)gguf_find_key(f, "general.name")) == NULL, "no raw data for str");

    /* Arrays. */
    enum gguf_type et;
    size_t n, len;
    const void *data;
    CHECK_OK(gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n, &data));
    CHECK(et == GGUF_TYPE_STRING && n == VOCAB_N && data == NULL, "tokens array");
    for (size_t i = 0; i < VOCAB_N; i++) {
        CHECK_OK(gguf_get_arr_str(f, "tokenizer.ggml.tokens", i, &s, &len));
        CHECK(len == vocab_len[i] && memcmp(s, vocab[i], len) == 0 && s[len] == '\0', "token %zu",
              i);
    }
    CHECK(gguf_get_arr_str(f, "tokenizer.ggml.tokens", VOCAB_N, &s, &len) == -PI_E_RANGE, "index");
    CHECK(gguf_get_arr_str(f, "test.arr_i32", 0, &s, &len) == -PI_E_TYPE, "i32 array as strings");
    CHECK_OK(gguf_get_arr_str(f, "tokenizer.ggml.merges", 1, &s, &len));
    CHECK(len == 3 && strcmp(s, "c d") == 0, "merge 1");
    CHECK_OK(gguf_get_arr(f, "test.arr_f32", &et, &n, &data));
    CHECK(et == GGUF_TYPE_FLOAT32 && n == 3 && memcmp(data, arr_f32, sizeof arr_f32) == 0, "f32 arr");
    CHECK_OK(gguf_get_arr(f, "test.arr_i32", &et, &n, &data));
    CHECK(et == GGUF_TYPE_INT32 && n == 3 && memcmp(data, arr_i32, sizeof arr_i32) == 0, "i32 arr");
    CHECK_OK(gguf_get_arr(f, "test.arr_u64", &et, &n, &data));
    CHECK(et == GGUF_TYPE_UINT64 && n == 2 && memcmp(data, arr_u64, sizeof arr_u64) == 0, "u64 arr");
    CHECK_OK(gguf_get_arr(f, "test.arr_empty", &et, &n, &data));
    CHECK(et == GGUF_TYPE_UINT8 && n == 0, "empty arr");
    CHECK(gguf_get_arr(f, "general.name", &et, &n, &data) == -PI_E_TYPE, "string as array");
}

static void check_tensors(const struct gguf_file *f, bool check_ptr_alignment)
{
    CHECK(gguf_n_tensors(f) == N_TENSORS, "n_tensors %zu", gguf_n_tensors(f));
    for (int i = 0; i < N_TENSORS; i++) {
        const struct tdesc *d = &tensors[i];
        const struct gguf_tensor *t = gguf_find_tensor(f, d->name);
        REQUIRE(t, "tensor %s missing", d->name);
        CHECK(t == gguf_tensor(f, (size_t)i), "declared order");
        CHECK(strcmp(t->name, d->name) == 0, "name");
        CHECK(t->type == d->type && t->n_dims == d->n_dims, "%s type/n_dims", d->name);
        for (int k = 0; k < GGUF_MAX_DIMS; k++)
            CHECK(t->ne[k] == d->ne[k], "%s ne[%d] %lld", d->name, k, (long long)t->ne[k]);
        CHECK(t->nbytes == d->nbytes, "%s nbytes %zu vs %zu", d->name, t->nbytes, d->nbytes);
        CHECK(memcmp(t->data, d->data, d->nbytes) == 0, "%s data differs", d->name);
        CHECK(t->offset % gguf_alignment(f) == 0, "%s offset %llu", d->name,
              (unsigned long long)t->offset);
        CHECK((const uint8_t *)t->data ==
                  (const uint8_t *)gguf_base(f) + gguf_data_offset(f) + t->offset, "data pointer");
        if (check_ptr_alignment)
            CHECK((uintptr_t)t->data % gguf_alignment(f) == 0, "%s data pointer misaligned", d->name);
    }
    CHECK(gguf_find_tensor(f, "nope") == NULL, "absent tensor");
    CHECK(gguf_tensor(f, N_TENSORS) == NULL, "tensor out of range");
    CHECK(gguf_data_offset(f) % gguf_alignment(f) == 0, "data offset aligned");
}

static void add_tensors(struct gguf_writer *w, bool with_data)
{
    for (int i = 0; i < N_TENSORS; i++)
        CHECK_OK(gguf_writer_add_tensor(w, tensors[i].name, tensors[i].type, tensors[i].n_dims,
                                        tensors[i].ne, with_data ? tensors[i].data : NULL));
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int main(void)
{
    char path[sizeof tmpdir + 32], path2[sizeof tmpdir + 32], tmp[sizeof tmpdir + 40];
    struct gguf_writer *w = NULL;
    struct gguf_file *f = NULL;
    const char *dir = mkdtemp(tmpdir); /* REQUIRE evaluates its condition twice */
    REQUIRE(dir, "mkdtemp");
    snprintf(path, sizeof path, "%s/a.gguf", tmpdir);
    snprintf(path2, sizeof path2, "%s/b.gguf", tmpdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    make_tensors();

    /* 1. write_file with every kv type and four tensor types, read back through mmap. */
    CHECK_OK(gguf_writer_new(&w, GGUF_MAGIC_GGUF));
    set_keys(w);
    add_tensors(w, true);
    int64_t bad_ne[2] = {48, 1};
    CHECK(gguf_writer_add_tensor(w, "bad", PI_TYPE_Q8_0, 2, bad_ne, NULL) == -PI_E_INVAL, "ne[0]");
    CHECK(gguf_writer_add_tensor(w, tensors[0].name, PI_TYPE_F32, 1, bad_ne, NULL) == -PI_E_INVAL,
          "duplicate tensor");
    CHECK(gguf_writer_add_tensor(w, "bad", 77, 1, bad_ne, NULL) == -PI_E_UNSUPPORTED, "bad type");
    CHECK_OK(gguf_writer_write_file(w, path));
    gguf_writer_free(w);
    CHECK(!exists(tmp), "PATH.tmp left behind");

    int rc = gguf_open(&f, path);
    REQUIRE(rc == 0, "open: %d %s", rc, pi_errmsg());
    CHECK(gguf_magic(f) == GGUF_MAGIC_GGUF && !gguf_is_powerinfer(f), "magic");
    CHECK(gguf_version(f) == 3, "version");
    CHECK(gguf_alignment(f) == GGUF_DEFAULT_ALIGNMENT, "alignment");
    check_keys(f, N_KEYS);
    check_tensors(f, true);

    /* 2. open_mem on the same image (a heap copy: pointers relative to it). */
    size_t size = gguf_size(f);
    uint8_t *copy = malloc(size);
    REQUIRE(copy, "malloc");
    memcpy(copy, gguf_base(f), size);
    struct gguf_file *fm = NULL;
    CHECK_OK(gguf_open_mem(&fm, copy, size));
    if (fm) {
        check_keys(fm, N_KEYS);
        check_tensors(fm, false);
        CHECK(gguf_base(fm) == copy, "base is the caller's buffer");
        gguf_close(fm);
    }
    free(copy);

    /* 2b. gguf_open_read: the same file read into (huge-page) anonymous memory: the same keys and
     * tensor bytes, the image 2 MiB-aligned and read-only; a file that is not there, a directory and
     * a file shorter than a header are refused naming the path. */
    struct gguf_file *fr = NULL;
    CHECK_OK(gguf_open_read(&fr, path));
    if (fr) {
        check_keys(fr, N_KEYS);
        check_tensors(fr, true);
        CHECK(gguf_size(fr) == size && memcmp(gguf_base(fr), gguf_base(f), size) == 0, "read image = mapped image");
        CHECK(((uintptr_t)gguf_base(fr) & ((2u << 20) - 1)) == 0, "read image on a 2 MiB boundary");
        CHECK(gguf_huge_bytes(fr) <= size, "huge bytes %zu within the image", gguf_huge_bytes(fr));
        gguf_close(fr);
    }
    CHECK(gguf_huge_bytes(f) == 0, "a file mapping reports no huge pages");
    char missing[sizeof tmpdir + 40];
    snprintf(missing, sizeof missing, "%s/none.gguf", tmpdir);
    pi_errmsg_clear();
    CHECK(gguf_open_read(&fr, missing) < 0 && strstr(pi_errmsg(), "none.gguf") && !fr, "missing file: %s", pi_errmsg());
    pi_errmsg_clear();
    CHECK(gguf_open_read(&fr, tmpdir) == -PI_E_INVAL && strstr(pi_errmsg(), "not a regular file"), "directory: %s",
          pi_errmsg());
    FILE *shortf = fopen(missing, "wb");
    REQUIRE(shortf, "create %s", missing);
    fputs("GGUF", shortf);
    fclose(shortf);
    pi_errmsg_clear();
    CHECK(gguf_open_read(&fr, missing) == -PI_E_TRUNCATED && strstr(pi_errmsg(), "header"), "short file: %s",
          pi_errmsg());
    unlink(missing);

    /* 3. copy_kv into a PWRI file with a 64-byte alignment; every key survives. */
    CHECK_OK(gguf_writer_new(&w, GGUF_MAGIC_PWRI));
    CHECK_OK(gguf_writer_copy_kv(w, f));
    CHECK_OK(gguf_writer_set_u32(w, "general.alignment", 64));
    add_tensors(w, true);
    CHECK_OK(gguf_writer_write_file(w, path2));
    gguf_writer_free(w);
    struct gguf_file *f2 = NULL;
    rc = gguf_open(&f2, path2);
    REQUIRE(rc == 0, "open copy: %d %s", rc, pi_errmsg());
    CHECK(gguf_is_powerinfer(f2) && gguf_magic(f2) == GGUF_MAGIC_PWRI, "PWRI magic");
    CHECK(gguf_alignment(f2) == 64, "alignment %zu", gguf_alignment(f2));
    CHECK(gguf_n_kv(f2) == N_KEYS + 1, "copied kv count %zu", gguf_n_kv(f2));
    for (size_t i = 0; i < gguf_n_kv(f); i++) {
        const char *key = gguf_kv_key(f, i);
        CHECK(strcmp(gguf_kv_key(f2, i), key) == 0, "key order %zu", i);
        CHECK(gguf_kv_type(f2, i) == gguf_kv_type(f, i), "%s type", key);
        size_t sz = gguf_type_size(gguf_kv_type(f, i));
        if (sz)
            CHECK(memcmp(gguf_kv_data(f2, i), gguf_kv_data(f, i), sz) == 0, "%s value", key);
    }
    gguf_close(f);
    check_keys(f2, N_KEYS + 1); /* + general.alignment */
    check_tensors(f2, true);
    gguf_close(f2);

    /* 4. Streaming: header at open, data one tensor at a time; nothing under PATH before close. */
    unlink(path);
    CHECK_OK(gguf_writer_new(&w, GGUF_MAGIC_GGUF));
    set_keys(w);
    add_tensors(w, false);
    CHECK(gguf_writer_write_file(w, path) == -PI_E_INVAL, "write_file without data");
    CHECK(gguf_writer_write_tensor(w, tensors[0].data) == -PI_E_INVAL, "write before open");
    CHECK_OK(gguf_writer_open(w, path));
    CHECK(exists(tmp) && !exists(path), "writes go to PATH.tmp");
    CHECK(gguf_writer_set_u32(w, "late", 1) == -PI_E_INVAL, "key after open");
    for (int i = 0; i < N_TENSORS; i++)
        CHECK_OK(gguf_writer_write_tensor(w, tensors[i].data));
    CHECK(gguf_writer_write_tensor(w, tensors[0].data) == -PI_E_INVAL, "one tensor too many");
    CHECK_OK(gguf_writer_close(w));
    CHECK(exists(path) && !exists(tmp), "renamed at close");
    gguf_writer_free(w);
    rc = gguf_open(&f, path);
    REQUIRE(rc == 0, "open streamed: %d %s", rc, pi_errmsg());
    check_keys(f, N_KEYS);
    check_tensors(f, true);
    gguf_close(f);

    /* 5. An incomplete stream fails at close and leaves neither file; free removes a leftover. */
    unlink(path);
    CHECK_OK(gguf_writer_new(&w, GGUF_MAGIC_GGUF));
    add_tensors(w, false);
    CHECK_OK(gguf_writer_open(w, path));
    CHECK_OK(gguf_writer_write_tensor(w, tensors[0].data));
    pi_errmsg_clear();
    CHECK(gguf_writer_close(w) == -PI_E_INVAL, "close with missing tensors");
    CHECK(strstr(pi_errmsg(), tensors[1].name), "message names the next tensor: %s", pi_errmsg());
    CHECK(!exists(path) && !exists(tmp), "no file after a failed close");
    CHECK_OK(gguf_writer_open(w, path));
    CHECK(exists(tmp), "tmp while open");
    gguf_writer_free(w);
    CHECK(!exists(path) && !exists(tmp), "free removes PATH.tmp");

    /* 6. A writer with no tensors and no keys gives a valid, minimal file. */
    CHECK_OK(gguf_writer_new(&w, GGUF_MAGIC_GGUF));
    CHECK_OK(gguf_writer_write_file(w, path));
    gguf_writer_free(w);
    rc = gguf_open(&f, path);
    CHECK(rc == 0, "empty file: %d %s", rc, pi_errmsg());
    if (rc == 0) {
        CHECK(gguf_n_kv(f) == 0 && gguf_n_tensors(f) == 0, "empty counts");
        gguf_close(f);
    }
    CHECK(gguf_writer_new(&w, 0x12345678u) == -PI_E_INVAL, "bad writer magic");

    unlink(path);
    unlink(path2);
    rmdir(tmpdir);
    for (int i = 0; i < N_TENSORS; i++)
        free(tensors[i].data);
    return tu_finish("gguf");
}
