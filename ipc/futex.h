/* futex.h — process-shared futex wait/wake on a 32-bit word in shared memory (not the _PRIVATE
 * variants: waiters and wakers are different processes). */
#ifndef PI_IPC_FUTEX_H
#define PI_IPC_FUTEX_H

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleep while *word == expected, at most timeout_ms (< 0: no limit). Returns 0 when woken or the
 * value differed, -ETIMEDOUT, or -EINTR. */
static inline int pi_futex_wait(_Atomic uint32_t *word, uint32_t expected, int timeout_ms)
{
    struct timespec ts, *tp = NULL;
    if (timeout_ms >= 0) {
        ts.tv_sec = timeout_ms / 1000;
        ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000L;
        tp = &ts;
    }
    if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, tp, NULL, 0) == 0)
        return 0;
    return errno == EAGAIN ? 0 : -errno;
}

static inline void pi_futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

#endif
