/* test_gguf_malformed — the GGUF reader on corrupted images: a valid image is built by hand (so every
 * field's offset is known), then each corruption must give the expected negative code and a message
 * naming the problem, from memory and from a file; then every truncation and random byte flips must
 * fail cleanly (these run under ASan/UBSan in CI, so an over-read is a failure too). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "pi_err.h"
#include "quant.h"
#include "testutil.h"

#define IMG_CAP 4096
#define ALIGN 32
#define N_FLIPS 3000
#define FLIP_SEED 12345u

/* The hand-built image and the offsets of the fields the corruptions patch. */
struct img {
    uint8_t b[IMG_CAP];
    size_t n;
    size_t version, n_tensors, n_kv;
    size_t kv_align_type, kv_align_val;
    size_t kv_name_keylen, kv_name_key, kv_name_type, kv_name_strlen;
    size_t kv_list_count, kv_list_str1;
    size_t kv_arr_elem, kv_arr_count;
    size_t kv_flag_key, kv_flag_val;
    size_t t0_name, t0_ndims, t0_ne0, t0_ne1;
    size_t t1_name, t1_ne0, t1_type, t1_offset;
    size_t data;
};

static size_t put(struct img *m, const void *p, size_t n)
{
    size_t at = m->n;
    REQUIRE(m->n + n <= IMG_CAP, "image too big");
    memcpy(m->b + m->n, p, n);
    m->n += n;
    return at;
}
static size_t put_u32(struct img *m, uint32_t v) { return put(m, &v, sizeof v); }
static size_t put_u64(struct img *m, uint64_t v) { return put(m, &v, sizeof v); }
static size_t put_str(struct img *m, const char *s) /* returns the offset of the length */
{
    size_t at = put_u64(m, strlen(s));
    put(m, s, strlen(s));
    return at;
}

static void build(struct img *m)
{
    memset(m, 0, sizeof *m);
    put_u32(m, GGUF_MAGIC_GGUF);
    m->version = put_u32(m, 3);
    m->n_tensors = put_u64(m, 2);
    m->n_kv = put_u64(m, 5);
    /* kv #0 general.alignment u32 32 */
    put_str(m, "general.alignment");
    m->kv_align_type = put_u32(m, GGUF_TYPE_UINT32);
    m->kv_align_val = put_u32(m, ALIGN);
    /* kv #1 general.name string "tiny" */
    m->kv_name_keylen = put_str(m, "general.name");
    m->kv_name_key = m->kv_name_keylen + 8;
    m->kv_name_type = put_u32(m, GGUF_TYPE_STRING);
    m->kv_name_strlen = put_str(m, "tiny");
    /* kv #2 tok.list [string] {"a", "bcd"} */
    put_str(m, "tok.list");
    put_u32(m, GGUF_TYPE_ARRAY);
    put_u32(m, GGUF_TYPE_STRING);
    m->kv_list_count = put_u64(m, 2);
    put_str(m, "a");
    m->kv_list_str1 = put_str(m, "bcd");
    /* kv #3 arr.i32 [i32] {1, 2, 3} */
    put_str(m, "arr.i32");
    put_u32(m, GGUF_TYPE_ARRAY);
    m->kv_arr_elem = put_u32(m, GGUF_TYPE_INT32);
    m->kv_arr_count = put_u64(m, 3);
    for (int32_t i = 1; i <= 3; i++)
        put(m, &i, sizeof i);
    /* kv #4 arr.b32 bool 1 (its key is one letter away from kv #3's) */
    m->kv_flag_key = put_str(m, "arr.b32") + 8;
    put_u32(m, GGUF_TYPE_BOOL);
    uint8_t one = 1;
    m->kv_flag_val = put(m, &one, 1);
    /* tensor #0 t.a f32 [32, 2] at 0 (256 bytes) */
    m->t0_name = put_str(m, "t.a") + 8;
    m->t0_ndims = put_u32(m, 2);
    m->t0_ne0 = put_u64(m, 32);
    m->t0_ne1 = put_u64(m, 2);
    put_u32(m, PI_TYPE_F32);
    put_u64(m, 0);
    /* tensor #1 t.b q8_0 [64] at 256 (2 blocks of 34 bytes) */
    m->t1_name = put_str(m, "t.b") + 8;
    put_u32(m, 1);
    m->t1_ne0 = put_u64(m, 64);
    m->t1_type = put_u32(m, PI_TYPE_Q8_0);
    m->t1_offset = put_u64(m, 256);
    m->n = (m->n + ALIGN - 1) / ALIGN * ALIGN;
    m->data = m->n;
    for (size_t i = 0; i < 256 + 2 * 34; i++)
        m->b[m->n++] = (uint8_t)(i * 7);
    m->n = (m->n + ALIGN - 1) / ALIGN * ALIGN;
}

static void patch32(struct img *m, size_t at, uint32_t v) { memcpy(m->b + at, &v, sizeof v); }
static void patch64(struct img *m, size_t at, uint64_t v) { memcpy(m->b + at, &v, sizeof v); }

/* Open an exact-size heap copy so that ASan sees any read past the end. */
static int open_exact(const uint8_t *b, size_t n, struct gguf_file **f)
{
    uint8_t *copy = malloc(n ? n : 1);
    REQUIRE(copy, "malloc");
    memcpy(copy, b, n);
    int rc = gguf_open_mem(f, copy, n);
    if (rc == 0)
        gguf_close(*f);
    free(copy);
    return rc;
}

static char tmpdir[] = "/tmp/test_gguf_malformed.XXXXXX";

/* The corrupted image must fail with code and a message containing word, from memory and a file. */
static void expect(const char *what, const struct img *m, int code, const char *word)
{
    struct gguf_file *f = NULL;
    pi_errmsg_clear();
    int rc = open_exact(m->b, m->n, &f);
    CHECK(rc == code, "%s: rc %d (%s), expected %d (%s); msg: %s", what, rc, pi_strerror(rc), code,
          pi_strerror(code), pi_errmsg());
    CHECK(pi_errmsg()[0] != '\0', "%s: empty message", what);
    CHECK(strstr(pi_errmsg(), word) != NULL, "%s: message '%s' lacks '%s'", what, pi_errmsg(), word);
    fprintf(stderr, "  %-28s -> %s\n", what, pi_errmsg());

    char path[sizeof tmpdir + 32];
    snprintf(path, sizeof path, "%s/bad.gguf", tmpdir);
    FILE *fp = fopen(path, "wb");
    REQUIRE(fp, "create %s", path);
    bool written = fwrite(m->b, 1, m->n, fp) == m->n;
    written &= fclose(fp) == 0;
    REQUIRE(written, "write %s", path);
    pi_errmsg_clear();
    rc = gguf_open(&f, path);
    if (rc == 0)
        gguf_close(f);
    CHECK(rc == code, "%s (file): rc %d, expected %d; msg: %s", what, rc, code, pi_errmsg());
    CHECK(pi_errmsg()[0] != '\0', "%s (file): empty message", what);
    unlink(path);
}

int main(void)
{
    struct img good, m;
    struct gguf_file *f = NULL;
    const char *dir = mkdtemp(tmpdir); /* REQUIRE evaluates its condition twice */
    REQUIRE(dir, "mkdtemp");
    build(&good);

    /* The unmodified image is valid. */
    int rc = gguf_open_mem(&f, good.b, good.n);
    REQUIRE(rc == 0, "valid image rejected: %d %s", rc, pi_errmsg());
    CHECK(gguf_n_kv(f) == 5 && gguf_n_tensors(f) == 2, "counts");
    CHECK(gguf_data_offset(f) == good.data, "data offset %zu vs %zu", gguf_data_offset(f), good.data);
    gguf_close(f);

#define CASE(name, code, word, ...)                                                                \
    do {                                                                                           \
        m = good;                                                                                  \
        __VA_ARGS__;                                                                               \
        expect(name, &m, -(code), word);                                                           \
    } while (0)

    CASE("bad magic", PI_E_FORMAT, "magic", memcpy(m.b, "GGUX", 4));
    CASE("version 1", PI_E_UNSUPPORTED, "version 1", patch32(&m, m.version, 1));
    CASE("version 4", PI_E_UNSUPPORTED, "version 4", patch32(&m, m.version, 4));
    CASE("big-endian version", PI_E_UNSUPPORTED, "big-endian", patch32(&m, m.version, 0x03000000));
    CASE("truncated in header", PI_E_TRUNCATED, "n_tensors", m.n = 12);
    CASE("truncated in kv", PI_E_TRUNCATED, "kv #2 'tok.list'", m.n = m.kv_list_str1 + 9);
    CASE("huge string length", PI_E_TRUNCATED, "string length 99999",
         patch64(&m, m.kv_name_strlen, 99999));
    CASE("huge key length", PI_E_TRUNCATED, "kv #1", patch64(&m, m.kv_name_keylen, UINT64_MAX));
    CASE("empty key", PI_E_FORMAT, "empty key", patch64(&m, m.kv_name_keylen, 0));
    CASE("NUL in key", PI_E_FORMAT, "NUL", m.b[m.kv_name_key + 3] = 0);
    CASE("huge array count", PI_E_TRUNCATED, "array count",
         patch64(&m, m.kv_arr_count, (uint64_t)1 << 62));
    CASE("huge string array count", PI_E_TRUNCATED, "array count",
         patch64(&m, m.kv_list_count, UINT64_MAX));
    CASE("unknown kv type", PI_E_FORMAT, "unknown value type 13", patch32(&m, m.kv_name_type, 13));
    CASE("unknown array elem type", PI_E_FORMAT, "element type 99", patch32(&m, m.kv_arr_elem, 99));
    CASE("nested array", PI_E_UNSUPPORTED, "arrays of arrays",
         patch32(&m, m.kv_arr_elem, GGUF_TYPE_ARRAY));
    CASE("bool not 0/1", PI_E_FORMAT, "bool", m.b[m.kv_flag_val] = 2);
    CASE("duplicate key", PI_E_FORMAT, "duplicate key", m.b[m.kv_flag_key + 4] = 'i');
    CASE("n_kv absurd", PI_E_TRUNCATED, "n_kv", patch64(&m, m.n_kv, (uint64_t)1 << 60));
    CASE("n_tensors absurd", PI_E_TRUNCATED, "n_tensors", patch64(&m, m.n_tensors, UINT64_MAX));
    CASE("alignment not pow2", PI_E_FORMAT, "power of two", patch32(&m, m.kv_align_val, 24));
    CASE("alignment zero", PI_E_FORMAT, "general.alignment", patch32(&m, m.kv_align_val, 0));
    CASE("alignment not u32", PI_E_FORMAT, "expected u32",
         patch32(&m, m.kv_align_type, GGUF_TYPE_INT32));
    CASE("n_dims 0", PI_E_FORMAT, "n_dims 0", patch32(&m, m.t0_ndims, 0));
    CASE("n_dims 5", PI_E_FORMAT, "n_dims 5", patch32(&m, m.t0_ndims, 5));
    CASE("ne above INT64_MAX", PI_E_FORMAT, "ne[0]", patch64(&m, m.t0_ne0, (uint64_t)1 << 63));
    CASE("ne overflow", PI_E_FORMAT, "overflow", patch64(&m, m.t0_ne1, (uint64_t)1 << 62));
    CASE("ne[0] not block multiple", PI_E_FORMAT, "block size", patch64(&m, m.t1_ne0, 48));
    CASE("unknown tensor type", PI_E_UNSUPPORTED, "'t.b': unknown tensor type 77",
         patch32(&m, m.t1_type, 77));
    CASE("misaligned offset", PI_E_FORMAT, "alignment", patch64(&m, m.t1_offset, 260));
    CASE("data beyond EOF", PI_E_TRUNCATED, "beyond end of file",
         patch64(&m, m.t1_offset, (uint64_t)1 << 20));
    CASE("offset overflow", PI_E_TRUNCATED, "'t.b'", patch64(&m, m.t1_offset, UINT64_MAX - 31));
    CASE("overlapping data", PI_E_FORMAT, "overlap", patch64(&m, m.t1_offset, 224)); /* t.a is 0..256 */
    CASE("same data", PI_E_FORMAT, "'t.a' (data 0 + 256 bytes) and 't.b' (data at 0) overlap", patch64(&m, m.t1_offset, 0));
    CASE("duplicate tensor name", PI_E_FORMAT, "duplicate tensor", m.b[m.t1_name + 2] = 'a');
    CASE("empty tensor name", PI_E_FORMAT, "empty name", patch64(&m, m.t0_name - 8, 0));
    CASE("truncated data section", PI_E_TRUNCATED, "'t.b'", m.n = m.data + 300);

    /* Every block type: ne[0] off its block size is refused; a tensor whose bytes (from the
     * type's block size) reach past the file is refused; one that fits opens with exactly those
     * bytes. t.b starts 256 bytes into the data section. */
    const uint32_t block_types[] = { PI_TYPE_Q4_0, PI_TYPE_Q4_1, PI_TYPE_Q5_0, PI_TYPE_Q5_1, PI_TYPE_Q8_0,
                                     PI_TYPE_IQ4_NL, PI_TYPE_Q2_K, PI_TYPE_Q3_K, PI_TYPE_Q4_K, PI_TYPE_Q5_K,
                                     PI_TYPE_Q6_K, PI_TYPE_IQ4_XS };
    const size_t avail = good.n - good.data - 256;
    for (size_t k = 0; k < sizeof block_types / sizeof block_types[0]; k++) {
        const struct pi_type_traits *tr = quant_traits(block_types[k]);
        char name[64];
        snprintf(name, sizeof name, "%s ne[0] half a block", tr->name);
        CASE(name, PI_E_FORMAT, "block size", patch32(&m, m.t1_type, block_types[k]);
             patch64(&m, m.t1_ne0, (uint64_t)tr->blck_size / 2));
        snprintf(name, sizeof name, "%s ne[0] a block and 16", tr->name);
        CASE(name, PI_E_FORMAT, "block size", patch32(&m, m.t1_type, block_types[k]);
             patch64(&m, m.t1_ne0, (uint64_t)tr->blck_size + 16));
        /* the fewest whole blocks that no longer fit */
        const uint64_t nblk = avail / tr->type_size + 1;
        snprintf(name, sizeof name, "%s %llu blocks past EOF", tr->name, (unsigned long long)nblk);
        CASE(name, PI_E_TRUNCATED, "beyond end of file", patch32(&m, m.t1_type, block_types[k]);
             patch64(&m, m.t1_ne0, nblk * (uint64_t)tr->blck_size));
        if (avail >= tr->type_size) {
            m = good;
            patch32(&m, m.t1_type, block_types[k]);
            patch64(&m, m.t1_ne0, (uint64_t)tr->blck_size);
            rc = gguf_open_mem(&f, m.b, m.n);
            CHECK(rc == 0, "%s: one block rejected: %s", tr->name, pi_errmsg());
            if (rc == 0) {
                const struct gguf_tensor *t = gguf_find_tensor(f, "t.b");
                CHECK(t && t->nbytes == tr->type_size, "%s: one block is %zu bytes", tr->name, tr->type_size);
                gguf_close(f);
            }
        }
    }

    /* Every truncation fails cleanly with a message; the full image opens. */
    int trunc_bad = 0;
    for (size_t len = 0; len < good.n; len++) {
        if (len >= good.data + 256 + 2 * 34)
            break; /* only the trailing padding is missing: the file is still complete */
        pi_errmsg_clear();
        rc = open_exact(good.b, len, &f);
        if (rc >= 0 || pi_errmsg()[0] == '\0') {
            if (trunc_bad++ < 5)
                CHECK(0, "truncation at %zu: rc %d msg '%s'", len, rc, pi_errmsg());
        }
    }
    CHECK(trunc_bad == 0, "%d truncations were not rejected", trunc_bad);

    /* Random single-byte flips: either valid or a clean error with a message; never a crash. */
    srand(FLIP_SEED);
    int flip_ok = 0, flip_err = 0, flip_bad = 0;
    for (int i = 0; i < N_FLIPS; i++) {
        m = good;
        size_t at = (size_t)rand() % good.data; /* header and infos: the data bytes are opaque */
        m.b[at] ^= (uint8_t)(1u << (rand() % 8));
        if (rand() % 2)
            m.b[(size_t)rand() % good.data] = (uint8_t)rand();
        pi_errmsg_clear();
        rc = open_exact(m.b, m.n, &f);
        if (rc == 0)
            flip_ok++;
        else if (rc < 0 && pi_errmsg()[0])
            flip_err++;
        else
            flip_bad++;
    }
    CHECK(flip_bad == 0, "%d flips gave no message", flip_bad);
    CHECK(flip_err > N_FLIPS / 4, "only %d of %d flips rejected", flip_err, N_FLIPS);
    fprintf(stderr, "  flips: %d still valid, %d rejected\n", flip_ok, flip_err);

    /* Not a file at all. */
    pi_errmsg_clear();
    CHECK(gguf_open(&f, tmpdir) < 0 && pi_errmsg()[0], "a directory must be rejected");
    char missing[sizeof tmpdir + 16];
    snprintf(missing, sizeof missing, "%s/missing", tmpdir);
    CHECK(gguf_open(&f, missing) < 0 && strstr(pi_errmsg(), "missing"), "missing file");

    rmdir(tmpdir);
    return tu_finish("gguf_malformed");
}
