/* uring.c — whole-file reader over io_uring, and the pread fallback (see uring.h). */
#include "uring.h"

#include "pi_err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One read in flight: file bytes [done, end) are still wanted; the request covers
 * [req_off, req_off + req_len) (rounded out to URING_ALIGN in direct mode). */
struct uring_slot {
    uint64_t done, end;
    uint64_t req_off;
    uint32_t req_len;
    bool busy;
};

static uint64_t align_down(uint64_t x) { return x & ~(uint64_t)(URING_ALIGN - 1); }
static uint64_t align_up(uint64_t x) { return align_down(x + URING_ALIGN - 1); }

uint64_t uring_dst_bytes(uint64_t size) { return align_up(size); }

/* The first byte at or after `at` that is not in a skip range (skipped bytes reported as done), and
 * in *stop the start of the next skip range after it (or `size`). */
static uint64_t skip_past(const struct uring_read_opts *o, uint64_t at, uint64_t size, uint64_t *stop)
{
    *stop = size;
    for (size_t k = 0; k < o->n_skip; k++) {
        const uint64_t a = o->skip[k][0], b = o->skip[k][1] < size ? o->skip[k][1] : size;
        if (b <= at)
            continue;
        if (a <= at) {
            if (o->progress)
                o->progress(b - at, o->progress_arg);
            at = b;
            continue;
        }
        *stop = a;
        break;
    }
    return at;
}

int uring_init(struct uring_reader *r, unsigned qd)
{
    memset(r, 0, sizeof *r);
    r->qd = qd ? qd : URING_QD;
    r->chunk = URING_CHUNK;
    int rc = io_uring_queue_init(r->qd, &r->ring, 0);
    if (rc < 0)
        return pi_fail(-rc, "io_uring: setup refused: %s", strerror(-rc));
    r->ready = true;
    return 0;
}

void uring_fini(struct uring_reader *r)
{
    if (r->ready)
        io_uring_queue_exit(&r->ring);
    r->ready = false;
}

/* Set the request range of a slot for its remaining bytes. With O_DIRECT the offset is rounded down
 * (re-reading the part of a block we already have is harmless: the bytes are the same) and the end
 * rounded up into the destination's slack. */
static void slot_range(struct uring_slot *s, bool direct)
{
    if (direct) {
        s->req_off = align_down(s->done);
        s->req_len = (uint32_t)(align_up(s->end) - s->req_off);
    } else {
        s->req_off = s->done;
        s->req_len = (uint32_t)(s->end - s->done);
    }
}

/* Queue the slot's read (submitted by the next io_uring_submit). The ring has as many entries as
 * there are slots, so an SQE is always free. */
static void slot_queue(struct uring_reader *r, int fd, char *dst, struct uring_slot *s, bool direct)
{
    slot_range(s, direct);
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    io_uring_prep_read(sqe, fd, dst + s->req_off, s->req_len, s->req_off);
    io_uring_sqe_set_data(sqe, s);
    r->stats.reads++;
}

/* The reading state shared by the completion handler. */
struct uring_job {
    struct uring_reader *r;
    const struct uring_read_opts *o;
    int fd;
    char *dst;
    uint64_t size;
    uint64_t completions;
    bool any_bytes;   /* a read returned data: a later EINVAL is an error, not "O_DIRECT refused" */
    int err;          /* first error; once set, in-flight reads are drained and nothing is queued */
};

/* Handle one completion; returns true if the slot was queued again. */
static bool job_complete(struct uring_job *j, struct uring_slot *s, int res)
{
    const struct uring_read_opts *o = j->o;
    j->completions++;
    if (o->fail_at_read && j->completions == o->fail_at_read)
        res = -(o->fail_errno ? o->fail_errno : EIO); /* injected fault (tests) */
    if (j->err) {
        s->busy = false;
        return false;
    }
    if (res == -EAGAIN || res == -EINTR) {
        slot_queue(j->r, j->fd, j->dst, s, o->direct);
        return true;
    }
    if (res < 0) {
        if (res == -EINVAL && o->direct && !j->any_bytes)
            j->err = pi_fail(EINVAL, "io_uring: O_DIRECT read of %u bytes at offset %llu refused: %s", s->req_len,
                             (unsigned long long)s->req_off, strerror(EINVAL));
        else
            j->err = pi_fail(-res, "io_uring: read of %u bytes at offset %llu failed: %s", s->req_len,
                             (unsigned long long)s->req_off, strerror(-res));
        s->busy = false;
        return false;
    }
    uint64_t got_end = s->req_off + (uint64_t)res;
    if (res > 0)
        j->any_bytes = true;
    if (got_end > s->done) {
        uint64_t new_done = got_end < s->end ? got_end : s->end;
        if (o->progress)
            o->progress(new_done - s->done, o->progress_arg);
        s->done = new_done;
    }
    if (s->done >= s->end) {
        s->busy = false;
        return false;
    }
    if (res == 0) {
        j->err = pi_fail(PI_E_TRUNCATED, "io_uring: file truncated: end of file at offset %llu, expected %llu bytes",
                         (unsigned long long)s->done, (unsigned long long)j->size);
        s->busy = false;
        return false;
    }
    j->r->stats.short_reads++;
    slot_queue(j->r, j->fd, j->dst, s, o->direct);
    return true;
}

int uring_read(struct uring_reader *r, int fd, void *dst, uint64_t size, const struct uring_read_opts *o)
{
    static const struct uring_read_opts no_opts;
    if (!o)
        o = &no_opts;
    if (!r->ready)
        return pi_fail(PI_E_INVAL, "io_uring: reader not initialised");
    if (r->chunk == 0 || r->chunk % URING_ALIGN)
        return pi_fail(PI_E_INVAL, "io_uring: read size %u is not a multiple of %u", r->chunk, URING_ALIGN);
    if (o->direct && ((uintptr_t)dst % URING_ALIGN) != 0)
        return pi_fail(EINVAL, "io_uring: O_DIRECT destination %p is not %u-byte aligned", dst, URING_ALIGN);

    struct uring_slot *slots = calloc(r->qd, sizeof *slots);
    if (!slots)
        return pi_fail(PI_E_NOMEM, "io_uring: cannot allocate %u read slots", r->qd);
    struct uring_job j = {.r = r, .o = o, .fd = fd, .dst = dst, .size = size};
    uint64_t next = 0;      /* first file byte not yet assigned to a slot */
    unsigned inflight = 0;  /* queued or submitted reads not yet completed */

    for (;;) {
        for (unsigned i = 0; !j.err && i < r->qd && next < size; i++) {
            struct uring_slot *s = &slots[i];
            if (s->busy)
                continue;
            uint64_t stop;
            next = skip_past(o, next, size, &stop);
            if (next >= size)
                break;
            s->busy = true;
            s->done = next;
            s->end = stop - next > r->chunk ? next + r->chunk : stop;
            next = s->end;
            slot_queue(r, fd, dst, s, o->direct);
            inflight++;
        }
        if (inflight == 0)
            break;
        int rc = io_uring_submit_and_wait(&r->ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            /* The ring itself failed: queued reads may never complete. io_uring_queue_exit (in
             * uring_fini) waits for whatever the kernel still has in flight. */
            if (!j.err)
                j.err = pi_fail(-rc, "io_uring: submit failed: %s", strerror(-rc));
            break;
        }
        unsigned head, seen = 0;
        struct io_uring_cqe *cqe;
        io_uring_for_each_cqe(&r->ring, head, cqe) {
            seen++;
            if (!job_complete(&j, io_uring_cqe_get_data(cqe), cqe->res))
                inflight--;
        }
        io_uring_cq_advance(&r->ring, seen);
        if (!j.err && o->cancel && o->cancel(o->cancel_arg))
            j.err = pi_fail(ECANCELED, "io_uring: read cancelled (stop requested)");
    }
    free(slots);
    return j.err;
}

int uring_read_file(int fd, void *dst, uint64_t size, const struct uring_read_opts *o)
{
    struct uring_reader r;
    int rc = uring_init(&r, URING_QD);
    if (rc)
        return rc;
    rc = uring_read(&r, fd, dst, size, o);
    uring_fini(&r);
    return rc;
}

int uring_pread_file(int fd, void *dst, uint64_t size, const struct uring_read_opts *o)
{
    static const struct uring_read_opts no_opts;
    if (!o)
        o = &no_opts;
    char *d = dst;
    uint64_t done = 0, n = 0;
    while (done < size) {
        uint64_t stop;
        done = skip_past(o, done, size, &stop);
        if (done >= size)
            break;
        uint64_t off = o->direct ? align_down(done) : done;
        uint64_t want = stop - done > URING_PREAD_CHUNK ? URING_PREAD_CHUNK : stop - done;
        uint64_t len = o->direct ? align_up(done + want) - off : want;
        ssize_t got = pread(fd, d + off, len, (off_t)off);
        if (o->fail_at_read && ++n == o->fail_at_read) {
            got = -1;
            errno = o->fail_errno ? o->fail_errno : EIO; /* injected fault (tests) */
        }
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return pi_fail(errno, "pread: read of %llu bytes at offset %llu failed: %s", (unsigned long long)len,
                           (unsigned long long)off, strerror(errno));
        if (off + (uint64_t)got <= done) /* nothing new: end of file */
            return pi_fail(PI_E_TRUNCATED, "pread: file truncated: end of file at offset %llu, expected %llu bytes",
                           (unsigned long long)done, (unsigned long long)size);
        uint64_t new_done = off + (uint64_t)got < stop ? off + (uint64_t)got : stop;
        if (o->progress)
            o->progress(new_done - done, o->progress_arg);
        done = new_done;
        if (o->cancel && o->cancel(o->cancel_arg))
            return pi_fail(ECANCELED, "pread: read cancelled (stop requested)");
    }
    return 0;
}
