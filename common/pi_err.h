/* pi_err.h — one error enum for the whole project, and a per-thread detail message.
 *
 * Functions return 0 on success or a negative code: -errno for system errors, or -PI_E_* below.
 * A failing function may also record a human-readable detail naming the problem
 * ("gguf: tensor 'blk.0.attn_q.weight': data offset 123 + 4096 bytes beyond file size 2048")
 * with pi_fail(); callers print pi_errmsg() next to pi_strerror(code). */
#ifndef PI_ERR_H
#define PI_ERR_H

#include <stdarg.h>

/* Values reach logs and (later) the wire: explicit, and only grow at the end. Kept above the
 * errno range (Linux errno < 4096) so that -errno and -PI_E_* never collide. */
enum pi_err {
    PI_E_FORMAT = 10000,   /* malformed file or message */
    PI_E_UNSUPPORTED = 10001, /* valid but not supported: unknown architecture, tensor type... */
    PI_E_NOTFOUND = 10002, /* a required key or tensor is missing */
    PI_E_TYPE = 10003,     /* a key or tensor has the wrong type or shape */
    PI_E_RANGE = 10004,    /* a value is out of range (prompt longer than the context...) */
    PI_E_TRUNCATED = 10005,/* file shorter than its header says */
    PI_E_INVAL = 10006,    /* invalid argument from the caller or the user */
    PI_E_NOMEM = 10007,
    PI_E_IO = 10008,
    PI_E_DEVICE = 10009,   /* the accelerator failed (a CUDA error): its context is lost, restart the stage */
    PI_E_START = 10010,    /* an instance did not start: the supervisor's message says which stage and why */
};

/* Text for a negative code (-errno or -PI_E_*). Never NULL. */
const char *pi_strerror(int code);

/* Record a detail message for this thread and return -code (code is positive: PI_E_* or errno).
 * Usage: return pi_fail(PI_E_FORMAT, "gguf: bad magic %08x", magic);
 * A macro so that the compiler sees the (nonzero) code it returns: callers' `if (rc) return rc;`
 * then proves that out-parameters are set on the success path (GCC's -O3 maybe-uninitialized
 * analysis otherwise cannot see through the call). */
void pi_set_errmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int pi_err_neg(int code) { return code < 0 ? code : -code; }
#define pi_fail(code, ...) (pi_set_errmsg(__VA_ARGS__), pi_err_neg(code))

/* The last detail message recorded on this thread ("" if none). */
const char *pi_errmsg(void);
void pi_errmsg_clear(void);

#endif
