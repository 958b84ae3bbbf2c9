/* test_loader — loaderd's load logic: the weights segment layout, byte-exact loading by each read
 * method (io_uring O_DIRECT, buffered, pread, O_DIRECT refused), the tensor directory against
 * gguf_open, re-attach without reading, and every failure (missing, truncated, corrupt, read
 * error, long names, cancel) ending FAILED with a message naming the file.
 * argv[1]: a real model GGUF (the tiny reference model converted to f16); argv[2] (optional): the
 * loaderd executable, run as a daemon against a ctl segment made here (start, restart = re-attach,
 * failure). */
#include "gguf.h"
#include "load.h"
#include "pi_err.h"
#include "quant.h"
#include "shm.h"
#include "stage.h"
#include "testutil.h"
#include "uring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TMP_TEMPLATE "/tmp/pinfer-test-loader-XXXXXX"
#define ODD_TENSOR_ELEMS 1000   /* a small file whose size is not a multiple of 4096 */
#define LONG_NAME_LEN 70        /* longer than LOADER_NAME_MAX */
#define DAEMON_WAIT_MS 10000    /* a daemon start or exit should take far less */
#define POLL_MS 5

static char inst[SHM_PART_MAX + 1];
static char tmpdir[sizeof TMP_TEMPLATE];

/* A weights segment sized for a file, as the supervisor makes it. */
struct wseg {
    struct shm_seg seg;
    struct loader_weights w;
    _Atomic uint64_t done, total, ns;
    char method[LOADER_METHOD_CAP];
    struct loader_progress prog;
};

static int wseg_create_sized(struct wseg *s, uint64_t size, uint64_t n_tensors)
{
    memset(s, 0, sizeof *s);
    size_t bytes = loader_weights_seg_bytes(size, n_tensors);
    int rc = shm_create(&s->seg, inst, LOADER_SEG_WEIGHTS, PI_SEG_KIND_WEIGHTS, bytes);
    if (rc)
        return rc;
    if ((rc = loader_weights_seg_init(&s->seg, size, n_tensors)) != 0)
        return rc;
    shm_publish(&s->seg);
    if ((rc = loader_weights_view(&s->seg, &s->w)) != 0)
        return rc;
    s->prog = (struct loader_progress){.done_bytes = &s->done, .total_bytes = &s->total, .load_ns = &s->ns,
                                       .method = s->method, .method_cap = sizeof s->method};
    return 0;
}

static int wseg_create(struct wseg *s, const char *path)
{
    uint64_t size, n;
    int rc = loader_probe_file(path, &size, &n);
    return rc ? rc : wseg_create_sized(s, size, n);
}

static void wseg_destroy(struct wseg *s)
{
    char name[SHM_NAME_CAP];
    memcpy(name, s->seg.name, sizeof name);
    shm_detach(&s->seg);
    if (name[0])
        shm_remove(name);
}

static void *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static int spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -errno;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -EIO;
}

static void tmp_path(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", tmpdir, name); }

/* Load path into a fresh segment and check image, directory and state against gguf_open. */
static void check_load_exact(const char *path, const char *want_method)
{
    struct wseg s;
    size_t fsize;
    enum loader_outcome out;
    void *want = slurp(path, &fsize);
    REQUIRE(want, "cannot read %s", path);
    REQUIRE(wseg_create(&s, path) == 0, "segment for %s: %s", path, pi_errmsg());
    int rc = loader_load(&s.w, path, &s.prog, &out);
    CHECK(rc == 0, "load %s: %s", path, pi_errmsg());
    CHECK(out == LOADER_LOADED, "outcome %d", out);
    CHECK(atomic_load(&s.w.info->state) == PI_WEIGHTS_READY, "state %u", atomic_load(&s.w.info->state));
    CHECK(s.w.info->file_size == fsize, "file_size %llu vs %zu", (unsigned long long)s.w.info->file_size, fsize);
    CHECK(memcmp(s.w.image, want, fsize) == 0, "%s: image differs from the file (method %s)", path, s.method);
    const char *slack = (const char *)s.w.image + fsize;
    bool zero = true;
    for (uint64_t i = fsize; i < uring_dst_bytes(fsize); i++)
        zero &= slack[i - fsize] == 0;
    CHECK(zero, "slack after the image is not zeroed");
    CHECK(atomic_load(&s.done) == fsize && atomic_load(&s.total) == fsize, "progress %llu/%llu of %zu",
          (unsigned long long)atomic_load(&s.done), (unsigned long long)atomic_load(&s.total), fsize);
    CHECK(atomic_load(&s.ns) > 0, "load_ns not set");
    CHECK(strstr(s.method, want_method) != NULL, "method '%s', expected '%s'", s.method, want_method);
    fprintf(stderr, "  %s: %zu bytes, method '%s'\n", path, fsize, s.method);

    struct stat st;
    REQUIRE(stat(path, &st) == 0, "stat %s", path);
    CHECK(s.w.info->file_ino == (uint64_t)st.st_ino && s.w.info->file_dev == (uint64_t)st.st_dev, "identity");

    struct gguf_file *g = NULL;
    CHECK_OK(gguf_open(&g, path));
    if (g) {
        size_t n = gguf_n_tensors(g);
        CHECK(s.w.info->n_tensors == n, "n_tensors %u vs %zu", s.w.info->n_tensors, n);
        for (size_t i = 0; i < n && i < s.w.info->n_tensors; i++) {
            const struct gguf_tensor *t = gguf_tensor(g, i);
            const struct pi_tensor_dirent *d = &s.w.dir[i];
            CHECK(!strcmp(d->name, t->name), "tensor %zu name '%s' vs '%s'", i, d->name, t->name);
            CHECK(d->type == t->type && d->n_dims == t->n_dims, "tensor %s type/dims", t->name);
            CHECK(!memcmp(d->ne, t->ne, sizeof d->ne), "tensor %s shape", t->name);
            CHECK(d->offset == (uint64_t)((const char *)t->data - (const char *)gguf_base(g)), "tensor %s offset",
                  t->name);
            CHECK(d->nbytes == t->nbytes, "tensor %s nbytes", t->name);
        }
        gguf_close(g);
    }
    /* what a stage does with the image: validate it in place */
    struct gguf_file *gm = NULL;
    CHECK_OK(gguf_open_mem(&gm, s.w.image, s.w.info->file_size));
    gguf_close(gm);
    wseg_destroy(&s);
    free(want);
}

/* Load must fail, leave state FAILED, and both messages must contain `needle` and the path. */
static void check_load_fails(struct wseg *s, const char *path, const char *needle)
{
    enum loader_outcome out;
    int rc = loader_load(&s->w, path, &s->prog, &out);
    CHECK(rc < 0, "load of %s should fail", path);
    CHECK(atomic_load(&s->w.info->state) == PI_WEIGHTS_FAILED, "state %u", atomic_load(&s->w.info->state));
    CHECK(strstr(s->w.info->error, needle) && strstr(s->w.info->error, path), "error '%s' lacks '%s' or the path",
          s->w.info->error, needle);
    CHECK(strstr(pi_errmsg(), needle) != NULL, "pi_errmsg '%s' lacks '%s'", pi_errmsg(), needle);
    fprintf(stderr, "  expected failure: %s\n", s->w.info->error);
}

static void test_layout(void)
{
    size_t b = loader_weights_seg_bytes(5000, 3);
    CHECK(b == PI_WEIGHTS_ALIGN + 2 * PI_WEIGHTS_ALIGN + 3 * sizeof(struct pi_tensor_dirent), "seg bytes %zu", b);
    CHECK(loader_weights_seg_bytes(UINT64_MAX, 1) == 0, "overflow must give 0");
    CHECK(loader_weights_seg_bytes(1, UINT64_MAX / 2) == 0, "overflow must give 0");

    struct wseg s;
    REQUIRE(wseg_create_sized(&s, 5000, 3) == 0, "segment: %s", pi_errmsg());
    CHECK(s.seg.hdr->n_offsets == 3, "n_offsets");
    CHECK((uintptr_t)s.w.image % PI_WEIGHTS_ALIGN == 0, "image alignment");
    CHECK(s.w.image_cap == 2 * PI_WEIGHTS_ALIGN && s.w.dir_cap == 3, "caps %llu %llu",
          (unsigned long long)s.w.image_cap, (unsigned long long)s.w.dir_cap);
    CHECK(atomic_load(&s.w.info->state) == PI_WEIGHTS_EMPTY && s.w.info->file_size == 5000, "info");
    /* a segment too small for the file is refused */
    CHECK(loader_weights_seg_init(&s.seg, 1u << 20, 3) == -PI_E_INVAL, "small segment accepted");
    /* a stage attaching the published segment sees the same layout */
    struct shm_seg other;
    struct loader_weights w2;
    CHECK_OK(shm_attach(&other, inst, LOADER_SEG_WEIGHTS, PI_SEG_KIND_WEIGHTS, SHM_ATTACH_RDONLY));
    CHECK_OK(loader_weights_view(&other, &w2));
    CHECK(w2.image_cap == s.w.image_cap && w2.dir_cap == s.w.dir_cap, "attached view");
    shm_detach(&other);
    wseg_destroy(&s);
}

static void test_reattach(const char *model)
{
    char path[256];
    size_t n;
    void *bytes = slurp(model, &n);
    REQUIRE(bytes, "read %s", model);
    tmp_path(path, sizeof path, "copy.gguf");
    REQUIRE(spit(path, bytes, n) == 0, "write %s", path);

    struct wseg s;
    enum loader_outcome out;
    REQUIRE(wseg_create(&s, path) == 0, "segment: %s", pi_errmsg());
    CHECK_OK(loader_load(&s.w, path, &s.prog, &out));
    CHECK(out == LOADER_LOADED, "first load outcome %d", out);
    /* a restarted loaderd: same file, READY segment -> nothing read */
    atomic_store(&s.done, 12345);
    strcpy(s.method, "unchanged");
    CHECK_OK(loader_load(&s.w, path, &s.prog, &out));
    CHECK(out == LOADER_REATTACHED, "second load outcome %d", out);
    CHECK(atomic_load(&s.done) == 12345, "re-attach read bytes (done %llu)", (unsigned long long)atomic_load(&s.done));
    CHECK(!strcmp(s.method, "unchanged"), "re-attach changed the method to '%s'", s.method);
    CHECK(atomic_load(&s.w.info->state) == PI_WEIGHTS_READY, "state after re-attach");

    /* the file changed (new mtime): read again */
    struct timespec ts[2] = {{.tv_sec = 1000000000, .tv_nsec = 0}, {.tv_sec = 1000000000, .tv_nsec = 0}};
    REQUIRE(utimensat(AT_FDCWD, path, ts, 0) == 0, "utimensat");
    CHECK_OK(loader_load(&s.w, path, &s.prog, &out));
    CHECK(out == LOADER_LOADED && atomic_load(&s.done) == n, "changed file must reload (outcome %d)", out);
    CHECK(memcmp(s.w.image, bytes, n) == 0, "reloaded image");

    /* the file shrank since the segment was sized: FAILED, "truncated" */
    REQUIRE(truncate(path, (off_t)(n / 2)) == 0, "truncate");
    check_load_fails(&s, path, "truncated");
    /* and a FAILED segment loads again once the file is whole */
    REQUIRE(spit(path, bytes, n) == 0, "rewrite %s", path);
    CHECK_OK(loader_load(&s.w, path, &s.prog, &out));
    CHECK(atomic_load(&s.w.info->state) == PI_WEIGHTS_READY && s.w.info->error[0] == 0, "reload after failure");
    wseg_destroy(&s);
    unlink(path);
    free(bytes);
}

static void test_methods(const char *model)
{
    check_load_exact(model, "io_uring");
    setenv(LOADER_ENV_FORCE, "buffered", 1);
    check_load_exact(model, "io_uring buffered (forced");
    setenv(LOADER_ENV_FORCE, "pread", 1);
    check_load_exact(model, "pread (forced");
    setenv(LOADER_ENV_FORCE, "direct_einval", 1);
    /* where O_DIRECT opens at all, the injected EINVAL of its first read must fall back */
    check_load_exact(model, "io_uring buffered (O_DIRECT refused: Invalid argument)");
    setenv(LOADER_ENV_FORCE, "bogus", 1);
    struct wseg s;
    REQUIRE(wseg_create(&s, model) == 0, "segment: %s", pi_errmsg());
    check_load_fails(&s, model, LOADER_ENV_FORCE);
    wseg_destroy(&s);
    unsetenv(LOADER_ENV_FORCE);
}

static bool is_ffn(const char *name) { return strstr(name, ".ffn_") != NULL; }

/* loader_load_except: the FFN tensors' whole pages are neither read nor even touched (mincore: not
 * resident in the segment), every other byte equals the file, progress still ends at the file size,
 * and the directory lists every tensor; with each reading method. */
static void test_skip(const char *model)
{
    size_t fsize;
    char *want = slurp(model, &fsize);
    REQUIRE(want, "cannot read %s", model);
    struct gguf_file *gf = NULL;
    REQUIRE(gguf_open(&gf, model) == 0, "gguf_open %s: %s", model, pi_errmsg());
    const uint64_t base = gguf_data_offset(gf);
    uint8_t *skipped = calloc(fsize, 1);
    uint64_t n_skipped = 0;
    for (size_t i = 0; i < gguf_n_tensors(gf); i++) {
        const struct gguf_tensor *t = gguf_tensor(gf, i);
        if (!is_ffn(t->name))
            continue;
        const uint64_t a = (base + t->offset + 4095) / 4096 * 4096, b = (base + t->offset + t->nbytes) / 4096 * 4096;
        for (uint64_t o = a; o < b; o++)
            skipped[o] = 1;
        n_skipped += b > a ? b - a : 0;
    }
    const size_t n_tensors = gguf_n_tensors(gf);
    gguf_close(gf);
    REQUIRE(n_skipped > fsize / 4, "the tiny model's FFN is most of it (%llu of %zu bytes)", (unsigned long long)n_skipped,
            fsize);
    static const char *const forces[] = { NULL, "buffered", "pread" };
    for (size_t f = 0; f < sizeof forces / sizeof *forces; f++) {
        if (forces[f])
            setenv(LOADER_ENV_FORCE, forces[f], 1);
        else
            unsetenv(LOADER_ENV_FORCE);
        struct wseg s;
        enum loader_outcome out;
        REQUIRE(wseg_create(&s, model) == 0, "segment: %s", pi_errmsg());
        CHECK_OK(loader_load_except(&s.w, model, &s.prog, is_ffn, &out));
        /* the skipped pages were never touched: not resident in the segment (before any read of them) */
        const long pg = sysconf(_SC_PAGESIZE);
        uint64_t first = 0;
        while (first < fsize && !skipped[first])
            first++;
        CHECK(first < fsize, "a skipped page exists");
        unsigned char vec[4] = { 1, 1, 1, 1 };
        const uintptr_t at = ((uintptr_t)s.w.image + first) / (uintptr_t)pg * (uintptr_t)pg;
        CHECK(mincore((void *)at, (size_t)pg * 4, vec) == 0 && !(vec[0] & 1) && !(vec[3] & 1),
              "%s: a skipped page is resident (mincore %d %d)", s.method, vec[0] & 1, vec[3] & 1);
        const char *img = s.w.image;
        bool same = true, zero = true;
        for (size_t o = 0; o < fsize; o++) {
            if (skipped[o])
                zero &= img[o] == 0;
            else
                same &= img[o] == want[o];
        }
        CHECK(same, "%s: the bytes outside the skipped pages differ from the file", s.method);
        CHECK(zero, "%s: skipped pages hold data", s.method);
        CHECK(atomic_load(&s.done) == fsize, "%s: progress %llu of %zu", s.method,
              (unsigned long long)atomic_load(&s.done), fsize);
        CHECK(s.w.info->n_tensors == n_tensors, "%s: directory of %u tensors, want %zu", s.method,
              s.w.info->n_tensors, n_tensors);
        wseg_destroy(&s);
    }
    unsetenv(LOADER_ENV_FORCE);
    free(skipped);
    free(want);
}

/* Write a small GGUF with one tensor named `name` of n f32 elements. */
static int write_small(const char *path, const char *name, int64_t n)
{
    struct gguf_writer *w = NULL;
    float *data = calloc((size_t)n, sizeof *data);
    for (int64_t i = 0; i < n; i++)
        data[i] = (float)i * 0.5f;
    int rc = gguf_writer_new(&w, GGUF_MAGIC_GGUF);
    if (!rc)
        rc = gguf_writer_set_str(w, "general.architecture", "test");
    if (!rc)
        rc = gguf_writer_add_tensor(w, name, PI_TYPE_F32, 1, &n, data);
    if (!rc)
        rc = gguf_writer_write_file(w, path);
    gguf_writer_free(w);
    free(data);
    return rc;
}

static void test_odd_size(void)
{
    char path[256];
    struct stat st;
    tmp_path(path, sizeof path, "odd.gguf");
    REQUIRE(write_small(path, "odd.weight", ODD_TENSOR_ELEMS) == 0, "write: %s", pi_errmsg());
    REQUIRE(stat(path, &st) == 0 && st.st_size % 4096 != 0, "size %lld should not be a multiple of 4096",
            (long long)st.st_size);
    check_load_exact(path, "io_uring");
    setenv(LOADER_ENV_FORCE, "pread", 1);
    check_load_exact(path, "pread");
    unsetenv(LOADER_ENV_FORCE);
    unlink(path);
}

static void test_failures(const char *model)
{
    char path[256];
    size_t n;
    struct wseg s;
    uint64_t probe_size, probe_n;
    void *bytes = slurp(model, &n);
    REQUIRE(bytes, "read %s", model);

    /* missing file */
    tmp_path(path, sizeof path, "missing.gguf");
    CHECK(loader_probe_file(path, &probe_size, &probe_n) == -ENOENT && strstr(pi_errmsg(), path),
          "probe of a missing file: %s", pi_errmsg());
    REQUIRE(wseg_create_sized(&s, n, 1) == 0, "segment: %s", pi_errmsg());
    check_load_fails(&s, path, "No such file");
    wseg_destroy(&s);

    /* a truncated GGUF (the segment sized for what is there): the reader says truncated */
    tmp_path(path, sizeof path, "trunc.gguf");
    REQUIRE(spit(path, bytes, n / 2) == 0, "write %s", path);
    REQUIRE(wseg_create(&s, path) == 0, "segment: %s", pi_errmsg());
    check_load_fails(&s, path, "truncated");
    wseg_destroy(&s);
    unlink(path);

    /* corrupt magic: probe refuses, and load (segment sized anyway) ends FAILED */
    tmp_path(path, sizeof path, "magic.gguf");
    memcpy(bytes, "XXXX", 4);
    REQUIRE(spit(path, bytes, n) == 0, "write %s", path);
    CHECK(loader_probe_file(path, &probe_size, &probe_n) == -PI_E_FORMAT && strstr(pi_errmsg(), "magic"),
          "probe of bad magic: %s", pi_errmsg());
    REQUIRE(wseg_create_sized(&s, n, 1) == 0, "segment: %s", pi_errmsg());
    check_load_fails(&s, path, "magic");
    wseg_destroy(&s);
    unlink(path);
    free(bytes);

    /* read errors, each method: FAILED naming the file and the offset */
    static const char *const forces[] = {"", "buffered", "pread"};
    setenv(LOADER_ENV_FAIL_READ, "3", 1);
    for (size_t i = 0; i < sizeof forces / sizeof forces[0]; i++) {
        setenv(LOADER_ENV_FORCE, forces[i], 1);
        REQUIRE(wseg_create(&s, model) == 0, "segment: %s", pi_errmsg());
        check_load_fails(&s, model, "offset");
        CHECK(strstr(s.w.info->error, "Input/output error") != NULL, "error '%s'", s.w.info->error);
        wseg_destroy(&s);
    }
    unsetenv(LOADER_ENV_FAIL_READ);
    unsetenv(LOADER_ENV_FORCE);

    /* a tensor name longer than the directory holds */
    char name[LONG_NAME_LEN + 1];
    memset(name, 'n', LONG_NAME_LEN);
    name[LONG_NAME_LEN] = '\0';
    tmp_path(path, sizeof path, "longname.gguf");
    REQUIRE(write_small(path, name, 16) == 0, "write: %s", pi_errmsg());
    REQUIRE(wseg_create(&s, path) == 0, "segment: %s", pi_errmsg());
    check_load_fails(&s, path, "at most 63");
    wseg_destroy(&s);
    unlink(path);
}

static bool cancel_now(void *arg)
{
    (void)arg;
    return true;
}

static void test_cancel(const char *model)
{
    struct wseg s;
    REQUIRE(wseg_create(&s, model) == 0, "segment: %s", pi_errmsg());
    s.prog.cancel = cancel_now;
    check_load_fails(&s, model, "cancelled");
    wseg_destroy(&s);
}

/* The reader on its own: buffered and O_DIRECT into an aligned buffer. */
static void test_uring_standalone(const char *model)
{
    size_t n;
    void *want = slurp(model, &n);
    REQUIRE(want, "read %s", model);
    void *buf = NULL;
    REQUIRE(posix_memalign(&buf, URING_ALIGN, uring_dst_bytes(n)) == 0, "alloc");
    int fd = open(model, O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0, "open %s", model);
    struct uring_read_opts o = {0};
    memset(buf, 0xa5, n);
    int rc = uring_read_file(fd, buf, n, &o);
    if (rc == -ENOSYS || rc == -EPERM) {
        fprintf(stderr, "  io_uring unavailable here (%s): standalone reader not tested\n", pi_errmsg());
    } else {
        CHECK(rc == 0 && memcmp(buf, want, n) == 0, "buffered uring_read_file: %s", pi_errmsg());
        int dfd = open(model, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (dfd >= 0) {
            o.direct = true;
            memset(buf, 0xa5, n);
            CHECK_OK(uring_read_file(dfd, buf, n, &o));
            CHECK(memcmp(buf, want, n) == 0, "O_DIRECT uring_read_file");
            /* a misaligned destination is refused as EINVAL (the caller's cue to read buffered) */
            CHECK(uring_read_file(dfd, (char *)buf + 8, n - 8, &o) == -EINVAL, "misaligned O_DIRECT accepted");
            close(dfd);
        } else {
            fprintf(stderr, "  O_DIRECT refused here (%s): direct reader not tested\n", strerror(errno));
        }
    }
    /* the file ends before the size asked for: truncated */
    o.direct = false;
    CHECK(uring_pread_file(fd, buf, n + 100, &o) == -PI_E_TRUNCATED, "pread past the end");
    if (rc == 0)
        CHECK(uring_read_file(fd, buf, n + 100, &o) == -PI_E_TRUNCATED, "uring read past the end");
    close(fd);
    free(buf);
    free(want);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static pid_t spawn_loaderd(const char *exe)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl(exe, exe, "--instance", inst, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Wait until the stage is READY (true) or the process exited (false, *status set). */
static bool wait_ready(struct pi_ctl *ctl, pid_t pid, int *status)
{
    for (int waited = 0; waited < DAEMON_WAIT_MS; waited += POLL_MS) {
        if (atomic_load_explicit(&ctl->stages[PI_STAGE_LOADERD].state, memory_order_acquire) == PI_STAGE_READY)
            return true;
        if (waitpid(pid, status, WNOHANG) == pid)
            return false;
        sleep_ms(POLL_MS);
    }
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    return false;
}

static int stop_loaderd(pid_t pid)
{
    int status = -1;
    kill(pid, SIGTERM);
    for (int waited = 0; waited < DAEMON_WAIT_MS; waited += POLL_MS) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return status;
        sleep_ms(POLL_MS);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* The daemon as the supervisor runs it: ctl + weights segments, start, READY, stop; restart
 * re-attaches without reading; a missing model exits non-zero with the reason recorded. */
static void test_daemon(const char *exe, const char *model)
{
    struct shm_seg ctl_seg;
    const uint64_t ctl_off = PI_CACHE_LINE * 2; /* right after the 128-byte header */
    REQUIRE(shm_create(&ctl_seg, inst, "ctl", PI_SEG_KIND_CTL, ctl_off + sizeof(struct pi_ctl)) == 0, "ctl: %s",
            pi_errmsg());
    ctl_seg.hdr->offsets[0] = ctl_off;
    ctl_seg.hdr->n_offsets = 1;
    struct pi_ctl *ctl = (struct pi_ctl *)((char *)ctl_seg.base + ctl_off);
    snprintf(ctl->model_path, sizeof ctl->model_path, "%s", model);
    shm_publish(&ctl_seg);
    struct wseg s;
    REQUIRE(wseg_create(&s, model) == 0, "segment: %s", pi_errmsg());
    size_t n;
    void *want = slurp(model, &n);
    REQUIRE(want, "read %s", model);

    int status = 0;
    pid_t pid = spawn_loaderd(exe);
    REQUIRE(pid > 0, "fork");
    CHECK(wait_ready(ctl, pid, &status), "loaderd did not become ready (status 0x%x)", status);
    CHECK(atomic_load_explicit(&s.w.info->state, memory_order_acquire) == PI_WEIGHTS_READY, "weights state %u",
          atomic_load(&s.w.info->state));
    CHECK(memcmp(s.w.image, want, n) == 0, "daemon image differs from the file");
    CHECK(atomic_load(&ctl->load_done_bytes) == n && atomic_load(&ctl->load_total_bytes) == n, "ctl progress");
    CHECK(ctl->load_method[0] != '\0', "ctl load_method empty");
    uint64_t hb = atomic_load(&ctl->stages[PI_STAGE_LOADERD].heartbeat_ns);
    sleep_ms(STAGE_HEARTBEAT_MS * 3);
    CHECK(atomic_load(&ctl->stages[PI_STAGE_LOADERD].heartbeat_ns) > hb, "heartbeat not advancing while idle");
    status = stop_loaderd(pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "loaderd stop status 0x%x", status);
    fprintf(stderr, "  daemon loaded with '%s'\n", ctl->load_method);

    /* restart: the segment holds this file already, nothing is read */
    atomic_store(&ctl->stages[PI_STAGE_LOADERD].state, PI_STAGE_STARTING);
    atomic_store(&ctl->load_done_bytes, 777);
    pid = spawn_loaderd(exe);
    REQUIRE(pid > 0, "fork");
    CHECK(wait_ready(ctl, pid, &status), "restarted loaderd did not become ready (status 0x%x)", status);
    CHECK(atomic_load(&ctl->load_done_bytes) == 777, "restarted loaderd read the file again");
    status = stop_loaderd(pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "loaderd stop status 0x%x", status);

    /* a model that is gone: exits 1, weights FAILED, last_error says why */
    char missing[256];
    tmp_path(missing, sizeof missing, "gone.gguf");
    snprintf(ctl->model_path, sizeof ctl->model_path, "%s", missing);
    atomic_store(&s.w.info->state, PI_WEIGHTS_EMPTY);
    atomic_store(&ctl->stages[PI_STAGE_LOADERD].state, PI_STAGE_STARTING);
    pid = spawn_loaderd(exe);
    REQUIRE(pid > 0, "fork");
    CHECK(!wait_ready(ctl, pid, &status), "loaderd ready on a missing model");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "failed loaderd status 0x%x", status);
    CHECK(atomic_load(&s.w.info->state) == PI_WEIGHTS_FAILED, "weights state %u", atomic_load(&s.w.info->state));
    CHECK(strstr(ctl->stages[PI_STAGE_LOADERD].last_error, "gone.gguf") != NULL, "last_error '%s'",
          ctl->stages[PI_STAGE_LOADERD].last_error);

    free(want);
    wseg_destroy(&s);
    shm_detach(&ctl_seg);
    shm_remove(ctl_seg.name);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        SKIP("usage: test_loader MODEL.gguf (the tiny model was not built)");
    const char *model = argv[1];
    snprintf(inst, sizeof inst, "tloader%d", (int)getpid());
    memcpy(tmpdir, TMP_TEMPLATE, sizeof tmpdir);
    REQUIRE(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
    unsetenv(LOADER_ENV_FORCE);
    unsetenv(LOADER_ENV_FAIL_READ);

    test_layout();
    test_methods(model);
    test_skip(model);
    test_reattach(model);
    test_odd_size();
    test_failures(model);
    test_cancel(model);
    test_uring_standalone(model);
    if (argc > 2)
        test_daemon(argv[2], model);

    CHECK(shm_remove_instance(inst) == 0, "segments left behind");
    rmdir(tmpdir);
    return tu_finish("loader");
}
