/* uring.h — read a whole file into memory with io_uring (O_DIRECT or buffered), and the plain
 * pread fallback for hosts where io_uring is refused.
 *
 * The reader keeps URING_QD reads of up to URING_CHUNK bytes in flight. Reads start at offsets that
 * are multiples of URING_CHUNK (hence of URING_ALIGN); with O_DIRECT every length is rounded up to
 * URING_ALIGN, so the destination must be URING_ALIGN-aligned and hold uring_dst_bytes(size) bytes
 * (the tail block is read past the end of the file into that slack). Short reads are resubmitted for
 * the remainder; a read that returns 0 before the end is a truncated file.
 *
 * Errors (0 or a negative code, pi_errmsg() names the offset):
 *   uring_init: any failure means io_uring is unavailable here (ENOSYS, EPERM under seccomp,
 *               ENOMEM under a small RLIMIT_MEMLOCK): the caller falls back to uring_pread_file.
 *   uring_read: -EINVAL before any byte arrived in direct mode means O_DIRECT is refused for this
 *               file (tmpfs, overlayfs, misaligned buffer): the caller reopens without O_DIRECT and
 *               reads buffered. -PI_E_TRUNCATED: the file ended early. -ECANCELED: cancel said so.
 *               Anything else is a read error. */
#ifndef PI_LOADERD_URING_H
#define PI_LOADERD_URING_H

#include <liburing.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define URING_ALIGN 4096u                  /* O_DIRECT offset/length/address alignment (covers 512 and 4K sectors) */
#define URING_QD 32u                       /* reads in flight: the virtio disk saturates at QD >= 16 */
#define URING_CHUNK (4u << 20)             /* bytes per read: 1-4 MiB reaches the device's bandwidth */
#define URING_PREAD_CHUNK (4u << 20)       /* bytes per pread in the fallback */

/* Called as bytes arrive (from the reading thread): delta is the number of new file bytes in dst. */
typedef void (*uring_progress_fn)(uint64_t delta, void *arg);
/* Polled between completions: returning true aborts the read with -ECANCELED. */
typedef bool (*uring_cancel_fn)(void *arg);

struct uring_read_opts {
    bool direct;               /* the fd was opened with O_DIRECT: align every read */
    uring_progress_fn progress; /* may be NULL */
    void *progress_arg;
    uring_cancel_fn cancel;    /* may be NULL */
    void *cancel_arg;
    uint64_t fail_at_read;     /* test hook: the Nth completion (1-based) fails; 0 = never */
    int fail_errno;            /* ... with this errno (0: EIO) */
    /* file ranges [skip[k][0], skip[k][1]) not to read (their bytes of dst are left untouched, and
     * count as done for progress): sorted, disjoint, URING_ALIGN-aligned; NULL / 0: none */
    const uint64_t (*skip)[2];
    size_t n_skip;
};

struct uring_stats {
    uint64_t reads;            /* reads submitted, resubmissions included */
    uint64_t short_reads;      /* completions with fewer bytes than asked (EOF tail excluded) */
};

struct uring_reader {
    struct io_uring ring;
    bool ready;
    unsigned qd;
    uint32_t chunk;          /* bytes per read: URING_CHUNK after init; a multiple of URING_ALIGN */
    struct uring_stats stats;
};

/* Bytes the destination must hold to read `size` file bytes (size rounded up to URING_ALIGN). */
uint64_t uring_dst_bytes(uint64_t size);

int uring_init(struct uring_reader *r, unsigned qd);
void uring_fini(struct uring_reader *r);     /* safe after a failed init and twice */

/* Read file bytes [0, size) of fd into dst. */
int uring_read(struct uring_reader *r, int fd, void *dst, uint64_t size, const struct uring_read_opts *o);

/* init + read + fini in one call (the standalone entry point the tests and benchmarks use).
 * An init failure is returned as is (see above). */
int uring_read_file(int fd, void *dst, uint64_t size, const struct uring_read_opts *o);

/* The fallback: pread in URING_PREAD_CHUNK pieces (o->direct must match the fd, as above). */
int uring_pread_file(int fd, void *dst, uint64_t size, const struct uring_read_opts *o);

#endif
