/* test_disk_tier — the third tier (models larger than RAM):
 *  - the FFN bundle sidecar: written, checked against its model, every record = the model's rows;
 *    refused when truncated, damaged, or made from another model;
 *  - three-tier placement: exact byte accounting (dense + cache + k records → exactly k RAM
 *    neurons, the k hottest), GPU neurons first, a budget below the dense part refused;
 *  - the neuron cache in the evaluator: logits bitwise the all-in-RAM run's with most neurons on
 *    disk (pread, a late out-of-order reader, and io_uring), misses read, prefetches counted, the
 *    window evicting, consecutive neurons read together; an injected read error fails the step naming the file offset; a bundle
 *    changed on disk is detected. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle.h"
#include "eval.h"
#include "gguf.h"
#include "model.h"
#include "ncache.h"
#include "pi_err.h"
#include "pwri_testmodel.h"
#include "quant.h"
#include "stream.h"
#include "tiers.h"
#include "testutil.h"

#define N_PROMPT 6
#define N_GEN 10

static struct pwri_cfg cfg(uint32_t type)
{
    return (struct pwri_cfg){ .arch = "llama", .pwri = true, .n_embd = 64, .n_layer = 3, .n_ff = 256, .n_head = 4,
                              .n_head_kv = 2, .head_dim = 16, .ffn_type = type, .down_t = true,
                              .pred = PRED_RANDOM, .act_freq = true };
}

static struct pi_model *make(const char *path, uint32_t type, uint64_t seed)
{
    struct pwri_cfg c = cfg(type);
    struct pwri_weights w;
    pwri_make(&c, &w, seed);
    pwri_write(path, &c, &w);
    pwri_free(&c, &w);
    struct pi_model *m = NULL;
    int rc = model_load(&m, path);
    REQUIRE(rc == 0, "load %s: %s", path, pi_errmsg());
    return m;
}

static void test_bundle(const char *dir)
{
    char mp[512], bp[512], other[512];
    snprintf(mp, sizeof mp, "%s/b.gguf", dir);
    snprintf(other, sizeof other, "%s/other.gguf", dir);
    struct pi_model *m = make(mp, PI_TYPE_Q8_0, 7), *m2 = make(other, PI_TYPE_Q8_0, 8);
    CHECK_OK(bundle_default_path(mp, bp, sizeof bp));
    CHECK(!strcmp(bp + strlen(bp) - strlen(BUNDLE_SUFFIX), BUNDLE_SUFFIX), "default path %s", bp);
    uint64_t bytes = 0;
    CHECK_OK(bundle_write(m, bp, 512, &bytes));
    struct stat st;
    REQUIRE(stat(bp, &st) == 0, "bundle written");
    CHECK((uint64_t)st.st_size == bytes, "size %lld, reported %llu", (long long)st.st_size, (unsigned long long)bytes);
    int fd;
    bool direct;
    struct bundle_hdr h;
    CHECK_OK(bundle_open(bp, m, false, &fd, &direct, &h));
    const struct pi_layer *l1 = &m->layers[1];
    CHECK(h.stride % 512 == 0 && h.stride >= l1->ffn_gate.row_bytes + l1->ffn_up.row_bytes + l1->ffn_down_t.row_bytes,
          "stride %llu", (unsigned long long)h.stride);
    CHECK_OK(bundle_verify(fd, &h, m));
    /* neuron (1, 77)'s record holds its three rows back to back */
    char *rec = malloc(h.stride);
    REQUIRE(pread(fd, rec, h.stride, (off_t)bundle_offset(&h, 1, 77)) == (ssize_t)h.stride, "read a record");
    CHECK(!memcmp(rec, (const char *)l1->ffn_gate.data + 77 * h.gate_bytes, h.gate_bytes) &&
              !memcmp(rec + h.gate_bytes, (const char *)l1->ffn_up.data + 77 * h.up_bytes, h.up_bytes) &&
              !memcmp(rec + h.gate_bytes + h.up_bytes, (const char *)l1->ffn_down_t.data + 77 * h.down_bytes,
                      h.down_bytes),
          "record (1, 77) = gate | up | down_t rows");
    free(rec);
    close(fd);
    /* another model of the same shapes: refused by its fingerprint */
    int rc = bundle_open(bp, m2, false, &fd, &direct, &h);
    CHECK(rc == -PI_E_FORMAT && strstr(pi_errmsg(), "another model"), "other model: %d %s", rc, pi_errmsg());
    /* damaged header, truncated file */
    char cp[600];
    snprintf(cp, sizeof cp, "%s.bad", bp);
    CHECK_OK(bundle_write(m, cp, 512, NULL));
    int wfd = open(cp, O_WRONLY);
    const uint32_t junk = 12345;
    CHECK(pwrite(wfd, &junk, sizeof junk, 8) == sizeof junk, "damage");
    close(wfd);
    rc = bundle_open(cp, m, false, &fd, &direct, &h);
    CHECK(rc == -PI_E_FORMAT && strstr(pi_errmsg(), "checksum"), "damaged: %d %s", rc, pi_errmsg());
    CHECK_OK(bundle_write(m, cp, 512, NULL));
    CHECK(truncate(cp, (off_t)(bytes - 512)) == 0, "truncate");
    rc = bundle_open(cp, m, false, &fd, &direct, &h);
    CHECK(rc == -PI_E_TRUNCATED && strstr(pi_errmsg(), cp), "truncated: %d %s", rc, pi_errmsg());
    /* a record changed: --verify names it */
    CHECK_OK(bundle_write(m, cp, 512, NULL));
    wfd = open(cp, O_WRONLY);
    CHECK(pwrite(wfd, &junk, sizeof junk, (off_t)bundle_offset(&h, 2, 5) + 3) == sizeof junk, "damage a record");
    close(wfd);
    CHECK_OK(bundle_open(cp, m, false, &fd, &direct, &h));
    rc = bundle_verify(fd, &h, m);
    CHECK(rc == -PI_E_FORMAT && strstr(pi_errmsg(), "layer 2 neuron 5"), "verify: %d %s", rc, pi_errmsg());
    close(fd);
    unlink(cp);
    /* a dense file cannot be bundled */
    struct bundle_hdr hp;
    m->hp.powerinfer = false;
    CHECK(bundle_plan(m, 4096, &hp) == -PI_E_UNSUPPORTED, "a non-PWRI model is refused");
    m->hp.powerinfer = true;
    model_free(m);
    model_free(m2);
    unlink(other);
    printf("bundle: written, verified, other model / damage / truncation refused\n");
}

static void test_tiers(const char *dir)
{
    char mp[512];
    snprintf(mp, sizeof mp, "%s/t.gguf", dir);
    struct pi_model *m = make(mp, PI_TYPE_F16, 9);
    const int64_t L = m->hp.n_layer, F = m->hp.n_ff;
    uint8_t *tier = malloc((size_t)(L * F)), *gpu = calloc((size_t)(L * F), 1);
    const uint64_t rec = 4096, dense = tier_dense_bytes(m);
    const int64_t cache = tier_default_cache_slots(m);
    /* dense bytes = the file's tensors but those named ffn_gate / ffn_up / ffn_down* */
    uint64_t want = 0;
    for (size_t i = 0; i < gguf_n_tensors(m->gguf); i++) {
        const struct gguf_tensor *t = gguf_tensor(m->gguf, i);
        if (!strstr(t->name, "ffn_gate") && !strstr(t->name, "ffn_up") && !strstr(t->name, "ffn_down"))
            want += t->nbytes;
    }
    CHECK(dense == want && dense > 0, "dense %llu, tensors %llu", (unsigned long long)dense, (unsigned long long)want);
    struct tier_report r;
    const int64_t k = 100;
    CHECK_OK(tier_place(m, dense + (uint64_t)cache * rec + (uint64_t)k * rec + rec - 1, rec, cache, NULL, tier, &r));
    CHECK(r.ram_neurons == k && r.disk_neurons == L * F - k && r.gpu_neurons == 0, "ram %lld disk %lld",
          (long long)r.ram_neurons, (long long)r.disk_neurons);
    CHECK(r.ram_bytes == (uint64_t)k * rec && r.cache_bytes == (uint64_t)cache * rec && r.dense_bytes == dense,
          "bytes");
    /* the k hottest: every RAM neuron at least as frequent as every disk neuron */
    float min_ram = 2, max_disk = -1;
    for (int64_t l = 0; l < L; l++)
        for (int64_t i = 0; i < F; i++) {
            const float f = m->layers[l].act_freq[i];
            if (tier[l * F + i] == PI_TIER_RAM)
                min_ram = f < min_ram ? f : min_ram;
            else
                max_disk = f > max_disk ? f : max_disk;
        }
    CHECK(min_ram >= max_disk, "RAM tier = the hottest (min RAM %g < max disk %g)", (double)min_ram, (double)max_disk);
    CHECK(r.ram_share > (double)k / (double)(L * F) && r.ram_share + r.disk_share > 0.999, "shares %g %g",
          r.ram_share, r.disk_share);
    /* GPU neurons are resident first and leave less for RAM */
    for (int64_t i = 0; i < 40; i++)
        gpu[i] = 1;
    CHECK_OK(tier_place(m, dense + (uint64_t)cache * rec + (uint64_t)k * rec, rec, cache, gpu, tier, &r));
    CHECK(r.gpu_neurons == 40 && r.ram_neurons == k - 40 && tier[0] == PI_TIER_GPU, "gpu %lld ram %lld",
          (long long)r.gpu_neurons, (long long)r.ram_neurons);
    /* below the dense part and the cache: refused, naming the bytes */
    int rc = tier_place(m, dense + (uint64_t)cache * rec - 1, rec, cache, NULL, tier, &r);
    CHECK(rc == -PI_E_RANGE && strstr(pi_errmsg(), "dense weights"), "too small: %d %s", rc, pi_errmsg());
    /* everything fits: no disk tier */
    CHECK_OK(tier_place(m, UINT64_MAX / 2, rec, cache, NULL, tier, &r));
    CHECK(r.disk_neurons == 0 && r.ram_neurons == L * F, "all in RAM");
    free(tier);
    free(gpu);
    model_free(m);
    printf("tiers: exact accounting, hottest first, GPU first, too small refused\n");
}

/* logits of a prompt and N_GEN greedy tokens, every step's last row */
static int run(const struct pi_model *m, struct ncache *nc, float *logits, int32_t *toks)
{
    struct pi_ctx *c = NULL;
    const struct pi_ctx_params cp = { .n_ctx = 64, .n_batch = 4, .n_threads = 2, .sparse = true, .cache_type = 0 };
    int rc = ctx_new(&c, m, &cp);
    if (!rc && nc)
        rc = ctx_set_ncache(c, nc);
    const int32_t V = m->hp.n_vocab;
    int32_t prompt[N_PROMPT] = { 1, 17, 33, 5, 60, 2 };
    for (int i = 0; !rc && i < N_GEN; i++) {
        if (i == 0)
            rc = ctx_eval(c, prompt, N_PROMPT, 0, logits, false);
        else
            rc = ctx_eval(c, &toks[i - 1], 1, N_PROMPT + i - 1, logits + (size_t)i * V, false);
        int32_t best = 0;
        for (int32_t v = 1; v < V; v++)
            if (logits[(size_t)i * V + v] > logits[(size_t)i * V + best])
                best = v;
        toks[i] = best;
    }
    ctx_free(c);
    return rc;
}

static void test_stream(const char *dir, uint32_t type, const struct ncache_io *io)
{
    char mp[512], bp[600];
    snprintf(mp, sizeof mp, "%s/s.gguf", dir);
    snprintf(bp, sizeof bp, "%s.ffnbundle", mp);
    struct pi_model *m = make(mp, type, 11);
    CHECK_OK(bundle_write(m, bp, 4096, NULL));
    const int64_t L = m->hp.n_layer, F = m->hp.n_ff, V = m->hp.n_vocab;
    float *ref = malloc((size_t)(N_GEN * V) * sizeof *ref), *got = malloc((size_t)(N_GEN * V) * sizeof *got);
    int32_t tref[N_GEN], tgot[N_GEN];
    CHECK_OK(run(m, NULL, ref, tref));
    uint8_t *tier = malloc((size_t)(L * F));
    struct bundle_hdr h;
    int fd;
    bool direct;
    CHECK_OK(bundle_open(bp, m, false, &fd, &direct, &h));
    close(fd);
    struct tier_report r;
    /* 10 % of the neurons in RAM, the rest on disk; a window of 2 layers' slots */
    CHECK_OK(tier_place(m, tier_dense_bytes(m) + (uint64_t)(2 * F + L * F / 10) * h.stride, h.stride, 2 * F, NULL,
                        tier, &r));
    CHECK(r.disk_neurons > L * F * 8 / 10, "most neurons on disk (%lld)", (long long)r.disk_neurons);
    for (int window = 1; window <= 4; window += 3) {
        /* window 1: a prompt chunk's layer with half its neurons missing is read densely (the
         * default); window 4: never (the per-neuron reads only) — bitwise the same either way */
        setenv(NCACHE_ENV_DENSE, window == 1 ? "0.5" : "2", 1);
        struct ncache *nc = NULL;
        const struct ncache_params np = { .path = bp, .tier = tier, .window_slots = 2 * F, .window = window,
                                          .direct = true, .io = io };
        CHECK_OK(ncache_new(&nc, m, &np));
        REQUIRE(nc, "ncache");
        CHECK_OK(run(m, nc, got, tgot));
        CHECK(!memcmp(ref, got, (size_t)(N_GEN * V) * sizeof *ref) && !memcmp(tref, tgot, sizeof tref),
              "%s window %d: streamed logits differ from the all-in-RAM run", quant_traits(type)->name, window);
        struct ncache_stats st;
        ncache_get_stats(nc, &st);
        CHECK(st.needed == st.hits + st.prefetched + st.misses && st.misses > 0 && st.hits > 0 && st.evictions > 0,
              "needed %llu = hits %llu + prefetched %llu + misses %llu; evictions %llu", (unsigned long long)st.needed,
              (unsigned long long)st.hits, (unsigned long long)st.prefetched, (unsigned long long)st.misses,
              (unsigned long long)st.evictions);
        CHECK(st.bytes_read >= (st.reads + st.pinned) * h.stride - 1 && st.in_flight == 0 &&
                  st.tokens == N_PROMPT + N_GEN - 1 && st.pinned == (uint64_t)r.ram_neurons,
              "bytes %llu reads %llu in flight %llu tokens %llu", (unsigned long long)st.bytes_read,
              (unsigned long long)st.reads, (unsigned long long)st.in_flight, (unsigned long long)st.tokens);
        if (io)
            CHECK(st.prefetched > 0, "with asynchronous reads some neurons arrive from a prefetch");
        /* consecutive neurons are read together: fewer reads than records (the prompt's chunks of 4
         * tokens have dense mask unions); without prefetch every record read is a miss */
        const uint64_t recs = (st.bytes_read - st.pinned_bytes) / h.stride;
        CHECK(st.reads < recs && (st.bytes_read - st.pinned_bytes) % h.stride == 0 &&
                  (io || recs == st.misses + st.dense_extra),
              "%llu reads for %llu records (%llu misses, %llu read densely unneeded)", (unsigned long long)st.reads,
              (unsigned long long)recs, (unsigned long long)st.misses, (unsigned long long)st.dense_extra);
        CHECK(window == 1 ? st.dense_layers > 0 : st.dense_layers == 0 && st.dense_extra == 0,
              "window %d: %llu layers read densely", window, (unsigned long long)st.dense_layers);
        printf("stream %s%s window %d: bitwise = in RAM; %llu needed, %llu hits, %llu prefetched, %llu misses, "
               "%.1f KiB read/token in %llu reads, %llu layers dense (%llu gap records)\n",
               quant_traits(type)->name, io ? " (io)" : "", window, (unsigned long long)st.needed,
               (unsigned long long)st.hits, (unsigned long long)st.prefetched, (unsigned long long)st.misses,
               (double)(st.bytes_read - st.pinned_bytes) / 1024.0 / (double)st.tokens, (unsigned long long)st.reads,
               (unsigned long long)st.dense_layers, (unsigned long long)st.dense_extra);
        ncache_free(nc);
    }
    unsetenv(NCACHE_ENV_DENSE);
    /* an I/O error: the step fails, naming the file and the offset */
    setenv(NCACHE_ENV_FAIL_READ, "5", 1);
    struct ncache *nc = NULL;
    const struct ncache_params np = { .path = bp, .tier = tier, .window_slots = 2 * F, .window = 1, .io = io };
    CHECK_OK(ncache_new(&nc, m, &np));
    unsetenv(NCACHE_ENV_FAIL_READ);
    int rc = run(m, nc, got, tgot);
    CHECK(rc == -EIO && strstr(pi_errmsg(), "offset") && strstr(pi_errmsg(), bp), "read error: %d %s", rc, pi_errmsg());
    ncache_free(nc);
    /* the bundle replaced on disk under a running cache */
    nc = NULL;
    CHECK_OK(ncache_new(&nc, m, &np));
    struct pi_ctx *c = NULL;
    const struct pi_ctx_params cp = { .n_ctx = 64, .n_batch = 4, .n_threads = 2, .sparse = true, .cache_type = 0 };
    CHECK_OK(ctx_new(&c, m, &cp));
    CHECK_OK(ctx_set_ncache(c, nc));
    const int32_t t0 = 3;
    CHECK_OK(ctx_eval(c, &t0, 1, 0, got, false));
    CHECK_OK(bundle_write(m, bp, 4096, NULL)); /* rename over it: a new inode */
    rc = ctx_eval(c, &t0, 1, 1, got, false);
    CHECK(rc == -PI_E_IO && strstr(pi_errmsg(), "changed on disk"), "changed: %d %s", rc, pi_errmsg());
    ctx_free(c);
    ncache_free(nc);
    free(ref), free(got), free(tier);
    model_free(m);
    unlink(bp);
    unlink(mp);
}

/* an asynchronous reader for the test: reads are queued and done (pread) only at reap, in reverse
 * order, so completions arrive late and out of order as from a device */
struct lazy_io {
    struct { int fd; void *dst; uint64_t off; uint32_t len; uint64_t tag; } q[8192];
    int n;
};

static int lazy_submit(void *ctx, int fd, void *dst, uint64_t off, uint32_t len, uint64_t tag)
{
    struct lazy_io *z = ctx;
    if (z->n == (int)(sizeof z->q / sizeof z->q[0]))
        return -EAGAIN;
    z->q[z->n].fd = fd, z->q[z->n].dst = dst, z->q[z->n].off = off, z->q[z->n].len = len, z->q[z->n].tag = tag;
    z->n++;
    return 0;
}

static int lazy_reap(void *ctx, unsigned min, void (*done)(void *, uint64_t, int), void *arg)
{
    struct lazy_io *z = ctx;
    (void)min;
    while (z->n > 0) {
        z->n--;
        ssize_t r = pread(z->q[z->n].fd, z->q[z->n].dst, z->q[z->n].len, (off_t)z->q[z->n].off);
        done(arg, z->q[z->n].tag, r < 0 ? -errno : (int)r);
    }
    return 0;
}

int main(void)
{
    char dir[] = "/tmp/pinfer-diskXXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    test_bundle(dir);
    test_tiers(dir);
    test_stream(dir, PI_TYPE_F32, NULL);
    test_stream(dir, PI_TYPE_Q4_0, NULL);
    static struct lazy_io z;
    const struct ncache_io io = { .ctx = &z, .submit = lazy_submit, .reap = lazy_reap, .name = "test" };
    test_stream(dir, PI_TYPE_Q8_0, &io);
    struct stream_io sio;
    if (stream_io_init(&sio, 16) == 0) { /* a small queue: submissions wait for room */
        test_stream(dir, PI_TYPE_Q4_0, &sio.io);
        printf("io_uring reader: %s\n", sio.name);
        stream_io_fini(&sio);
    } else {
        printf("io_uring unavailable here (%s): its reader not tested\n", pi_errmsg());
    }
    char p[600];
    snprintf(p, sizeof p, "%s/b.gguf", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/b.gguf.ffnbundle", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/t.gguf", dir);
    unlink(p);
    rmdir(dir);
    return tu_finish("disk_tier");
}
