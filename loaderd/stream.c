/* stream.c — io_uring reads for the neuron cache (stream.h). */
#include "stream.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>

#include "pi_err.h"

static int st_register(void *ctx, void *base, size_t len)
{
    struct stream_io *s = ctx;
    if (s->fixed) { /* one cache at a time: the previous one's region goes */
        io_uring_unregister_buffers(&s->ring);
        s->fixed = false;
        s->base = NULL;
    }
    if (!base)
        return 0;
    struct iovec iov = { .iov_base = base, .iov_len = len };
    int rc = io_uring_register_buffers(&s->ring, &iov, 1);
    if (rc == 0) {
        s->fixed = true;
        s->base = base;
        s->len = len;
        snprintf(s->name, sizeof s->name, "io_uring qd %u%s, registered buffers", s->qd, s->async ? " async" : "");
    } else {
        snprintf(s->name, sizeof s->name, "io_uring qd %u%s (buffers not registered: %s: RLIMIT_MEMLOCK, or over 1 GiB)", s->qd,
                 s->async ? " async" : "",
                 strerror(-rc));
    }
    return 0;
}

/* take one completion into the stash (to make room in the ring) */
static int stash_one(struct stream_io *s)
{
    struct io_uring_cqe *cqe;
    int rc = io_uring_wait_cqe(&s->ring, &cqe);
    if (rc)
        return rc;
    if (s->n_stash == s->cap_stash) { /* a prefetch of many neurons: each one past qd waits for one */
        const unsigned cap = s->cap_stash * 2;
        struct stream_done *p = realloc(s->stash, cap * sizeof *p);
        if (!p)
            return -ENOMEM;
        s->stash = p;
        s->cap_stash = cap;
    }
    s->stash[s->n_stash++] = (struct stream_done){ .tag = io_uring_cqe_get_data64(cqe), .res = cqe->res };
    io_uring_cqe_seen(&s->ring, cqe);
    s->inflight--;
    return 0;
}

static int flush(struct stream_io *s)
{
    if (!s->queued)
        return 0;
    int rc = io_uring_submit(&s->ring);
    if (rc < 0)
        return rc;
    s->inflight += (unsigned)rc;
    s->queued -= (unsigned)rc;
    return 0;
}

static int st_submit(void *ctx, int fd, void *dst, uint64_t off, uint32_t len, uint64_t tag)
{
    struct stream_io *s = ctx;
    int rc;
    /* at most qd reads in flight or queued: the completion queue then never overflows */
    while (s->queued + s->inflight >= s->qd) {
        if ((rc = flush(s)) || (rc = stash_one(s)))
            return rc;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
    if (!sqe) {
        if ((rc = flush(s)))
            return rc;
        if (!(sqe = io_uring_get_sqe(&s->ring)))
            return -EBUSY;
    }
    if (s->fixed && (char *)dst >= s->base && (char *)dst + len <= s->base + s->len)
        io_uring_prep_read_fixed(sqe, fd, dst, len, off, 0);
    else
        io_uring_prep_read(sqe, fd, dst, len, off);
    io_uring_sqe_set_data64(sqe, tag);
    if (s->async)
        io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
    /* submit in small batches as they come: a prefetch's reads must be on the disk while the caller
     * computes, not held until its next reap (one io_uring_enter per STREAM_BATCH reads) */
    if (++s->queued >= STREAM_BATCH && (rc = flush(s)))
        return rc;
    return 0;
}

static int st_reap(void *ctx, unsigned min, void (*done)(void *, uint64_t, int), void *arg)
{
    struct stream_io *s = ctx;
    int rc = flush(s);
    if (rc)
        return rc;
    unsigned got = 0;
    while (s->n_stash) { /* completions taken earlier first */
        struct stream_done d = s->stash[--s->n_stash];
        done(arg, d.tag, d.res);
        got++;
    }
    while (s->inflight) {
        struct io_uring_cqe *cqe;
        rc = got >= min ? io_uring_peek_cqe(&s->ring, &cqe) : io_uring_wait_cqe(&s->ring, &cqe);
        if (rc == -EAGAIN)
            break;
        if (rc == -EINTR)
            continue;
        if (rc)
            return rc;
        const uint64_t tag = io_uring_cqe_get_data64(cqe);
        const int res = cqe->res;
        io_uring_cqe_seen(&s->ring, cqe);
        s->inflight--;
        done(arg, tag, res);
        got++;
    }
    return 0;
}

int stream_io_init(struct stream_io *s, unsigned qd)
{
    memset(s, 0, sizeof *s);
    const char *as = getenv(STREAM_ENV_ASYNC);
    s->async = as ? as[0] == '1' : sysconf(_SC_NPROCESSORS_ONLN) >= STREAM_ASYNC_MIN_CORES;
    s->qd = qd ? qd : s->async ? STREAM_QD_ASYNC : STREAM_QD;
    s->cap_stash = s->qd;
    s->stash = malloc(s->cap_stash * sizeof *s->stash);
    if (!s->stash)
        return pi_fail(PI_E_NOMEM, "stream: out of memory");
    int rc = io_uring_queue_init(s->qd, &s->ring, 0);
    if (rc) {
        free(s->stash);
        s->stash = NULL;
        return pi_fail(-rc, "stream: io_uring refused: %s", strerror(-rc));
    }
    s->ready = true;
    snprintf(s->name, sizeof s->name, "io_uring qd %u%s", s->qd, s->async ? " async" : "");
    s->io = (struct ncache_io){ .ctx = s, .submit = st_submit, .reap = st_reap, .register_mem = st_register,
                                .name = s->name };
    return 0;
}

void stream_io_fini(struct stream_io *s)
{
    if (s->ready) {
        if (s->fixed)
            io_uring_unregister_buffers(&s->ring);
        io_uring_queue_exit(&s->ring);
    }
    free(s->stash);
    memset(s, 0, sizeof *s);
}
