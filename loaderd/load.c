/* load.c — the weights segment layout, and loading + validating the model image (see load.h). */
#include "load.h"

#include "gguf.h"
#include "pi_err.h"
#include "uring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOADER_GGUF_HEADER 24      /* magic u32, version u32, n_tensors u64, n_kv u64 */
#define LOADER_N_OFFSETS 3         /* info, image, directory */
#define NS_PER_S 1000000000ull

static_assert(PI_WEIGHTS_ALIGN % URING_ALIGN == 0, "image alignment must satisfy O_DIRECT");
static_assert(LOADER_NAME_MAX + 1 == sizeof(((struct pi_tensor_dirent *)0)->name), "dirent name size");
static_assert(LOADER_METHOD_CAP == sizeof(((struct pi_ctl *)0)->load_method), "method buffer size");

/* ---- segment layout ---- */

struct weights_offsets {
    uint64_t info, image, dir, total;
};

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* false if the sizes overflow what a mapping can hold */
static bool weights_layout(uint64_t file_size, uint64_t n_tensors, struct weights_offsets *o)
{
    const uint64_t limit = (uint64_t)SIZE_MAX / 4; /* far above any RAM; keeps the sums below from wrapping */
    if (file_size > limit || n_tensors > limit / sizeof(struct pi_tensor_dirent))
        return false;
    o->info = sizeof(struct pi_seg_header);
    o->image = align_up(o->info + sizeof(struct pi_weights_info), PI_WEIGHTS_ALIGN);
    o->dir = o->image + align_up(file_size, PI_WEIGHTS_ALIGN);
    o->total = o->dir + n_tensors * sizeof(struct pi_tensor_dirent);
    return o->total <= limit;
}

size_t loader_weights_seg_bytes(uint64_t file_size, uint64_t n_tensors)
{
    struct weights_offsets o;
    return weights_layout(file_size, n_tensors, &o) ? (size_t)o.total : 0;
}

uint64_t loader_weights_image_offset(uint64_t file_size, uint64_t n_tensors)
{
    struct weights_offsets o;
    return weights_layout(file_size, n_tensors, &o) ? o.image : 0;
}

int loader_weights_seg_init(struct shm_seg *seg, uint64_t file_size, uint64_t n_tensors)
{
    struct weights_offsets o;
    if (!weights_layout(file_size, n_tensors, &o))
        return pi_fail(PI_E_RANGE, "loaderd: a model of %llu bytes with %llu tensors does not fit in memory",
                       (unsigned long long)file_size, (unsigned long long)n_tensors);
    if (seg->size < o.total)
        return pi_fail(PI_E_INVAL, "loaderd: segment %s has %zu bytes, the model needs %llu (loader_weights_seg_bytes)",
                       seg->name, seg->size, (unsigned long long)o.total);
    if (seg->hdr->kind != PI_SEG_KIND_WEIGHTS)
        return pi_fail(PI_E_INVAL, "loaderd: segment %s has kind %u, not weights (%u)", seg->name, seg->hdr->kind,
                       PI_SEG_KIND_WEIGHTS);
    seg->hdr->offsets[0] = o.info;
    seg->hdr->offsets[1] = o.image;
    seg->hdr->offsets[2] = o.dir;
    seg->hdr->n_offsets = LOADER_N_OFFSETS;
    struct pi_weights_info *wi = (struct pi_weights_info *)((char *)seg->base + o.info);
    memset((char *)wi + sizeof wi->state, 0, sizeof *wi - sizeof wi->state);
    wi->file_size = file_size;
    /* Relaxed: nobody can see the segment before shm_publish, whose release orders this store. */
    atomic_store_explicit(&wi->state, PI_WEIGHTS_EMPTY, memory_order_relaxed);
    return 0;
}

int loader_weights_view(const struct shm_seg *seg, struct loader_weights *w)
{
    memset(w, 0, sizeof *w);
    const struct pi_seg_header *h = seg->hdr;
    if (h->kind != PI_SEG_KIND_WEIGHTS || h->n_offsets < LOADER_N_OFFSETS)
        return pi_fail(PI_E_FORMAT, "loaderd: segment %s: kind %u with %u offsets is not a weights segment",
                       seg->name, h->kind, h->n_offsets);
    uint64_t info = h->offsets[0], image = h->offsets[1], dir = h->offsets[2];
    if (info % _Alignof(struct pi_weights_info) || info > seg->size ||
        seg->size - info < sizeof(struct pi_weights_info) || image < info + sizeof(struct pi_weights_info) ||
        image % PI_WEIGHTS_ALIGN || dir < image || dir > seg->size || dir % _Alignof(struct pi_tensor_dirent))
        return pi_fail(PI_E_FORMAT,
                       "loaderd: segment %s: offsets info %llu, image %llu, directory %llu are not a valid weights "
                       "layout for %zu bytes",
                       seg->name, (unsigned long long)info, (unsigned long long)image, (unsigned long long)dir,
                       seg->size);
    w->info = (struct pi_weights_info *)((char *)seg->base + info);
    w->image = (char *)seg->base + image;
    w->image_cap = dir - image;
    w->dir = (struct pi_tensor_dirent *)((char *)seg->base + dir);
    w->dir_cap = (seg->size - dir) / sizeof(struct pi_tensor_dirent);
    return 0;
}

int loader_probe_file(const char *path, uint64_t *file_size, uint64_t *n_tensors)
{
    unsigned char hdr[LOADER_GGUF_HEADER];
    struct stat st;
    int rc;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pi_fail(errno, "loaderd: cannot open model '%s': %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = pi_fail(errno, "loaderd: cannot stat model '%s': %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = pi_fail(PI_E_INVAL, "loaderd: model '%s' is not a regular file", path);
        goto out;
    }
    ssize_t got = pread(fd, hdr, sizeof hdr, 0);
    if (got < 0) {
        rc = pi_fail(errno, "loaderd: cannot read model '%s': %s", path, strerror(errno));
        goto out;
    }
    if (got < (ssize_t)sizeof hdr) {
        rc = pi_fail(PI_E_TRUNCATED, "loaderd: model '%s' is truncated: %zd bytes, less than the %d-byte GGUF header",
                     path, got, LOADER_GGUF_HEADER);
        goto out;
    }
    uint32_t magic;
    uint64_t n;
    memcpy(&magic, hdr, sizeof magic);  /* GGUF is little-endian, as are our hosts */
    memcpy(&n, hdr + 8, sizeof n);
    if (magic != GGUF_MAGIC_GGUF && magic != GGUF_MAGIC_PWRI) {
        rc = pi_fail(PI_E_FORMAT, "loaderd: model '%s': bad magic 0x%08x (expected \"GGUF\" or \"PWRI\")", path, magic);
        goto out;
    }
    if (n > (uint64_t)st.st_size) { /* each tensor takes at least one byte of header */
        rc = pi_fail(PI_E_FORMAT, "loaderd: model '%s': n_tensors %llu cannot fit in %lld bytes", path,
                     (unsigned long long)n, (long long)st.st_size);
        goto out;
    }
    *file_size = (uint64_t)st.st_size;
    *n_tensors = n;
    rc = 0;
out:
    close(fd);
    return rc;
}

/* ---- loading ---- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static uint64_t mtime_ns(const struct stat *st)
{
    return (uint64_t)st->st_mtim.tv_sec * NS_PER_S + (uint64_t)st->st_mtim.tv_nsec;
}

static bool same_identity(const struct pi_weights_info *wi, const struct stat *st)
{
    return wi->file_ino == (uint64_t)st->st_ino && wi->file_dev == (uint64_t)st->st_dev &&
           wi->file_mtime_ns == mtime_ns(st) && wi->file_size == (uint64_t)st->st_size;
}

static void progress_add(uint64_t delta, void *arg)
{
    /* Relaxed: a display counter; nothing is ordered by it (READY's release publishes the image). */
    atomic_fetch_add_explicit((_Atomic uint64_t *)arg, delta, memory_order_relaxed);
}

static void set_u64(_Atomic uint64_t *p, uint64_t v)
{
    if (p)
        atomic_store_explicit(p, v, memory_order_relaxed); /* display only */
}

static void set_method(const struct loader_progress *prog, char *buf, size_t cap, const char *fmt, const char *why)
{
    snprintf(buf, cap, fmt, why);
    if (prog && prog->method && prog->method_cap)
        snprintf(prog->method, prog->method_cap, "%s", buf);
}

enum loader_force { FORCE_NONE, FORCE_BUFFERED, FORCE_PREAD, FORCE_DIRECT_EINVAL };

static int read_hooks(enum loader_force *force, uint64_t *fail_at)
{
    const char *f = getenv(LOADER_ENV_FORCE);
    *force = FORCE_NONE;
    if (f && *f) {
        if (!strcmp(f, "buffered"))
            *force = FORCE_BUFFERED;
        else if (!strcmp(f, "pread"))
            *force = FORCE_PREAD;
        else if (!strcmp(f, "direct_einval"))
            *force = FORCE_DIRECT_EINVAL;
        else
            return pi_fail(PI_E_INVAL, "%s='%s': expected 'buffered', 'pread' or 'direct_einval'", LOADER_ENV_FORCE,
                           f);
    }
    const char *n = getenv(LOADER_ENV_FAIL_READ);
    *fail_at = n && *n ? strtoull(n, NULL, 10) : 0;
    return 0;
}

/* Is dfd (opened with O_DIRECT) the same file as fd? A rename between the two opens would mix files. */
static int check_same_file(int dfd, int fd)
{
    struct stat a, b;
    if (fstat(dfd, &a) != 0 || fstat(fd, &b) != 0)
        return pi_fail(errno, "cannot stat: %s", strerror(errno));
    if (a.st_ino != b.st_ino || a.st_dev != b.st_dev)
        return pi_fail(PI_E_IO, "the file was replaced while it was being opened");
    return 0;
}

/* Read the file into the image, choosing io_uring O_DIRECT, io_uring buffered or pread (see load.h)
 * and writing the choice and its reason to method. fd is the file opened without O_DIRECT. */
static int read_image(const struct loader_weights *w, const char *path, int fd, uint64_t size,
                      const struct loader_progress *prog, const uint64_t (*skip)[2], size_t n_skip, char *method,
                      size_t method_cap)
{
    enum loader_force force;
    struct uring_reader r = {0}; /* uring_fini is a no-op unless uring_init succeeded */
    _Atomic uint64_t local_done = 0;
    _Atomic uint64_t *done = prog && prog->done_bytes ? prog->done_bytes : &local_done;
    struct uring_read_opts o = {
        .progress = progress_add,
        .progress_arg = (void *)done,
        .cancel = prog ? prog->cancel : NULL,
        .cancel_arg = prog ? prog->cancel_arg : NULL,
        .skip = skip,
        .n_skip = n_skip,
    };
    int dfd = -1;
    int rc = read_hooks(&force, &o.fail_at_read);
    if (rc)
        return rc;

    if (force == FORCE_PREAD)
        set_method(prog, method, method_cap, "pread (%s)", "forced by " LOADER_ENV_FORCE);
    else if ((rc = uring_init(&r, URING_QD)) != 0)
        set_method(prog, method, method_cap, "pread (io_uring refused: %s)", strerror(-rc));
    if (!r.ready) {
        fprintf(stderr, "loaderd: reading '%s' with %s\n", path, method);
        return uring_pread_file(fd, w->image, size, &o);
    }

    if (force == FORCE_BUFFERED) {
        set_method(prog, method, method_cap, "io_uring buffered (%s)", "forced by " LOADER_ENV_FORCE);
    } else {
        dfd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (dfd < 0 && errno != EINVAL) {
            rc = pi_fail(errno, "cannot open with O_DIRECT: %s", strerror(errno));
            goto out;
        }
        if (dfd >= 0) {
            if ((rc = check_same_file(dfd, fd)) != 0)
                goto out;
            set_method(prog, method, method_cap, "io_uring O_DIRECT%s", "");
            fprintf(stderr, "loaderd: reading '%s' with %s\n", path, method);
            o.direct = true;
            struct uring_read_opts od = o;
            if (force == FORCE_DIRECT_EINVAL) {
                od.fail_at_read = 1;
                od.fail_errno = EINVAL;
            }
            rc = uring_read(&r, dfd, w->image, size, &od);
            if (rc != -EINVAL)
                goto out;
            /* refused before any byte arrived (uring.h): read the whole file buffered instead */
            fprintf(stderr, "loaderd: %s\n", pi_errmsg());
            o.direct = false;
            atomic_store_explicit(done, 0, memory_order_relaxed);
        }
        set_method(prog, method, method_cap, "io_uring buffered (O_DIRECT refused: %s)", strerror(EINVAL));
    }
    fprintf(stderr, "loaderd: reading '%s' with %s\n", path, method);
    rc = uring_read(&r, fd, w->image, size, &o);
out:
    if (dfd >= 0)
        close(dfd);
    uring_fini(&r);
    return rc;
}

/* Validate the image with the same reader every stage uses and fill the tensor directory. */
static int fill_directory(const struct loader_weights *w, uint64_t size)
{
    struct gguf_file *gf = NULL;
    int rc = gguf_open_mem(&gf, w->image, size);
    if (rc) {
        char why[PI_MSG_MAX];
        snprintf(why, sizeof why, "%s", pi_errmsg());
        return pi_fail(rc, "invalid model (%s): %s", pi_strerror(rc), why);
    }
    size_t n = gguf_n_tensors(gf);
    if (n > w->dir_cap || n > UINT32_MAX) {
        rc = pi_fail(PI_E_RANGE, "the model has %zu tensors but the weights segment's directory holds %llu "
                     "(the file changed since the instance sized it)", n, (unsigned long long)w->dir_cap);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor(gf, i);
        struct pi_tensor_dirent *d = &w->dir[i];
        size_t len = strlen(t->name);
        if (len > LOADER_NAME_MAX) {
            rc = pi_fail(PI_E_UNSUPPORTED, "tensor %zu name '%.*s...' is %zu bytes; at most %d are supported", i,
                         LOADER_NAME_MAX, t->name, len, LOADER_NAME_MAX);
            goto out;
        }
        memset(d, 0, sizeof *d);
        memcpy(d->name, t->name, len + 1);
        d->type = t->type;
        d->n_dims = t->n_dims;
        for (int k = 0; k < GGUF_MAX_DIMS; k++)
            d->ne[k] = t->ne[k];
        d->offset = (uint64_t)((const char *)t->data - (const char *)w->image);
        d->nbytes = t->nbytes;
    }
    w->info->n_tensors = (uint32_t)n;
out:
    gguf_close(gf);
    return rc;
}

static int cmp_range(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

int loader_skip_ranges(const char *path, bool (*skip_tensor)(const char *name), uint64_t (**out)[2], size_t *n_out)
{
    struct gguf_file *gf = NULL;
    *out = NULL;
    *n_out = 0;
    int rc = gguf_open(&gf, path);
    if (rc)
        return rc;
    const size_t nt = gguf_n_tensors(gf);
    uint64_t(*r)[2] = malloc((nt ? nt : 1) * sizeof *r);
    if (!r) {
        gguf_close(gf);
        return pi_fail(PI_E_NOMEM, "out of memory for %zu tensor ranges", nt);
    }
    size_t n = 0;
    const uint64_t base = gguf_data_offset(gf);
    for (size_t i = 0; i < nt; i++) {
        const struct gguf_tensor *t = gguf_tensor(gf, i);
        if (!skip_tensor(t->name))
            continue;
        /* whole pages inside the tensor only: a neighbour's bytes are read */
        const uint64_t a = (base + t->offset + URING_ALIGN - 1) / URING_ALIGN * URING_ALIGN;
        const uint64_t b = (base + t->offset + t->nbytes) / URING_ALIGN * URING_ALIGN;
        if (b > a)
            r[n][0] = a, r[n][1] = b, n++;
    }
    gguf_close(gf);
    qsort(r, n, sizeof *r, cmp_range);
    *out = r;
    *n_out = n;
    return 0;
}

int loader_load(const struct loader_weights *w, const char *path, const struct loader_progress *prog,
                enum loader_outcome *outcome)
{
    return loader_load_except(w, path, prog, NULL, outcome);
}

int loader_load_except(const struct loader_weights *w, const char *path, const struct loader_progress *prog,
                       bool (*skip_tensor)(const char *name), enum loader_outcome *outcome)
{
    uint64_t(*skip)[2] = NULL;
    size_t n_skip = 0;
    struct pi_weights_info *wi = w->info;
    char method[LOADER_METHOD_CAP] = "";
    struct stat st, st2;
    uint64_t t0 = now_ns();
    int rc;
    *outcome = LOADER_LOADED;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = pi_fail(errno, "cannot open: %s", strerror(errno));
        goto fail;
    }
    if (fstat(fd, &st) != 0) {
        rc = pi_fail(errno, "cannot stat: %s", strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = pi_fail(PI_E_INVAL, "not a regular file");
        goto fail;
    }
    /* Acquire: pairs with the release store of READY by the loaderd that filled the segment, so its
     * identity fields are visible. */
    if (atomic_load_explicit(&wi->state, memory_order_acquire) == PI_WEIGHTS_READY && same_identity(wi, &st)) {
        fprintf(stderr, "loaderd: '%s' is already loaded in the weights segment: re-attached, nothing read\n", path);
        close(fd);
        *outcome = LOADER_REATTACHED;
        return 0;
    }
    if (atomic_load_explicit(&wi->state, memory_order_relaxed) == PI_WEIGHTS_READY)
        fprintf(stderr, "loaderd: warning: '%s' changed since it was loaded (inode, device, mtime or size); "
                "reloading over the image running stages use\n", path);
    uint64_t size = (uint64_t)st.st_size;
    /* Relaxed: stages only act on READY/FAILED; LOADING is informational. */
    atomic_store_explicit(&wi->state, PI_WEIGHTS_LOADING, memory_order_relaxed);
    wi->file_ino = wi->file_dev = wi->file_mtime_ns = 0;
    wi->n_tensors = 0;
    wi->error[0] = '\0';
    if (size != wi->file_size || uring_dst_bytes(size) > w->image_cap) {
        rc = pi_fail(PI_E_RANGE, "%s: the file has %llu bytes but the weights segment was sized for %llu "
                     "(the file changed since the instance started; restart it)",
                     size < wi->file_size ? "truncated" : "grown", (unsigned long long)size,
                     (unsigned long long)wi->file_size);
        goto fail;
    }
    set_u64(prog ? prog->total_bytes : NULL, size);
    set_u64(prog ? prog->done_bytes : NULL, 0);
    if (skip_tensor && (rc = loader_skip_ranges(path, skip_tensor, &skip, &n_skip)) != 0)
        goto fail;
    rc = read_image(w, path, fd, size, prog, skip, n_skip, method, sizeof method);
    if (rc)
        goto fail;
    /* The O_DIRECT tail read may have left disk bytes past the end of the file in the slack. */
    memset((char *)w->image + size, 0, (size_t)(uring_dst_bytes(size) - size));
    if (fstat(fd, &st2) != 0 || mtime_ns(&st2) != mtime_ns(&st) || st2.st_size != st.st_size) {
        rc = pi_fail(PI_E_IO, "the file was modified while it was being loaded");
        goto fail;
    }
    if ((rc = fill_directory(w, size)) != 0)
        goto fail;
    wi->file_ino = (uint64_t)st.st_ino;
    wi->file_dev = (uint64_t)st.st_dev;
    wi->file_mtime_ns = mtime_ns(&st);
    uint64_t dt = now_ns() - t0;
    set_u64(prog ? prog->load_ns : NULL, dt);
    /* Release: the image, directory and identity written above become visible to any stage that
     * loads READY with acquire (stage_attach_weights). */
    atomic_store_explicit(&wi->state, PI_WEIGHTS_READY, memory_order_release);
    close(fd);
    if (n_skip) {
        uint64_t skipped = 0;
        for (size_t k = 0; k < n_skip; k++)
            skipped += skip[k][1] - skip[k][0];
        fprintf(stderr, "loaderd: %.3f GiB of %zu tensors not read (their pages stay unallocated)\n",
                (double)skipped / (1 << 30), n_skip);
    }
    free(skip);
    fprintf(stderr, "loaderd: loaded '%s': %llu bytes, %u tensors in %.3f s (%.2f GB/s, %s)\n", path,
            (unsigned long long)size, wi->n_tensors, (double)dt / NS_PER_S,
            dt ? (double)size / (double)dt : 0.0, method);
    return 0;

fail: {
        char why[PI_MSG_MAX];
        snprintf(why, sizeof why, "%s", pi_errmsg());
        rc = pi_fail(rc, "loaderd: model '%s': %s", path, why);
        snprintf(wi->error, sizeof wi->error, "%s", pi_errmsg());
        /* Release: the message above is complete before a stage sees FAILED (acquire). */
        atomic_store_explicit(&wi->state, PI_WEIGHTS_FAILED, memory_order_release);
        fprintf(stderr, "%s\n", pi_errmsg());
        if (fd >= 0)
            close(fd);
        free(skip);
        return rc;
    }
}
