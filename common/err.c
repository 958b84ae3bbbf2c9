/* err.c — pi_strerror and the per-thread detail message. */
#include "pi_err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Large enough for a tensor name plus offsets; longer messages are truncated, never overflow. */
#define PI_ERRMSG_CAP 512

static _Thread_local char errmsg[PI_ERRMSG_CAP];

const char *pi_strerror(int code)
{
    int c = code < 0 ? -code : code;
    switch (c) {
    case 0: return "success";
    case PI_E_FORMAT: return "malformed input";
    case PI_E_UNSUPPORTED: return "unsupported";
    case PI_E_NOTFOUND: return "not found";
    case PI_E_TYPE: return "wrong type or shape";
    case PI_E_RANGE: return "out of range";
    case PI_E_TRUNCATED: return "truncated";
    case PI_E_INVAL: return "invalid argument";
    case PI_E_NOMEM: return "out of memory";
    case PI_E_IO: return "I/O error";
    case PI_E_DEVICE: return "device error";
    case PI_E_START: return "the instance did not start";
    default: return strerror(c);
    }
}

/* Keeps errno: pi_fail(errno, ...) evaluates its code after this call. Formatted into a buffer of
 * its own first: a message may wrap the previous one (pi_fail(code, "...: %s", pi_errmsg())), and
 * vsnprintf's source and destination must not overlap (glibc wrote an empty string there). */
void pi_set_errmsg(const char *fmt, ...)
{
    const int saved = errno;
    char buf[PI_ERRMSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(errmsg, buf, sizeof errmsg);
    errno = saved;
}

const char *pi_errmsg(void) { return errmsg; }
void pi_errmsg_clear(void) { errmsg[0] = '\0'; }
