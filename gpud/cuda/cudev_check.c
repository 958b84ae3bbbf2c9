/* cudev_check.c — every CUDA and cuBLAS call of the device context checked (cudev_impl.h's CU, CK,
 * CB): a failure is -PI_E_DEVICE naming the call, its file and line; and the fault injection that
 * tests those paths. */
#include "cudev_impl.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pi_err.h"

/* __FILE__ as the build gives it (a relative path): the file's own name */
static const char *base_name(const char *file)
{
    const char *s = strrchr(file, '/');
    return s ? s + 1 : file;
}

/* Fault injection (tests): PINFER_CUDA_FAIL_CALL=N fails the Nth checked call of the process as if
 * the device had failed; with PINFER_CUDA_FAIL_ONCE=PATH only the first process to reach it fails
 * (it creates PATH; a restarted stage that finds PATH runs clean). PINFER_CUDA_COUNT_CALLS=1 prints
 * the number of checked calls at close (and at the end of open), to aim N at a phase. */

static atomic_long cu_calls;
static long cu_fail_at = -2; /* -2: not read yet, -1: off */

static bool cu_inject(void)
{
    if (cu_fail_at == -2) {
        const char *e = getenv("PINFER_CUDA_FAIL_CALL");
        cu_fail_at = e && *e ? atol(e) : -1;
    }
    /* every checked call counts (one relaxed add), so that PINFER_CUDA_COUNT_CALLS sees them */
    const long k = atomic_fetch_add_explicit(&cu_calls, 1, memory_order_relaxed) + 1;
    if (cu_fail_at <= 0 || k != cu_fail_at)
        return false;
    const char *once = getenv("PINFER_CUDA_FAIL_ONCE");
    if (once && *once) {
        const int fd = open(once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
            return false; /* an earlier process failed already */
        close(fd);
    }
    return true;
}

static long cu_count(void)
{
    return atomic_load_explicit(&cu_calls, memory_order_relaxed);
}

void cudev_report_calls(const char *when)
{
    const char *e = getenv("PINFER_CUDA_COUNT_CALLS");
    if (e && *e && *e != '0')
        fprintf(stderr, "cuda: %ld checked CUDA calls %s\n", cu_count(), when);
}

int cudev_cu_check(int err, const char *what, const char *file, int line)
{
    file = base_name(file);
    if (cu_inject())
        return pi_fail(PI_E_DEVICE, "cuda: %s failed: injected fault (PINFER_CUDA_FAIL_CALL=%ld, %s:%d)", what,
                       cu_fail_at, file, line);
    if (err == 0)
        return 0;
    return pi_fail(PI_E_DEVICE, "cuda: %s failed: %s (%s:%d)", what, cudaGetErrorString((cudaError_t)err), file,
                   line);
}

int cudev_cb_check(cublasStatus_t s, const char *what, const char *file, int line)
{
    file = base_name(file);
    if (cu_inject())
        return pi_fail(PI_E_DEVICE, "cublas: %s failed: injected fault (PINFER_CUDA_FAIL_CALL=%ld, %s:%d)", what,
                       cu_fail_at, file, line);
    if (s == CUBLAS_STATUS_SUCCESS)
        return 0;
    return pi_fail(PI_E_DEVICE, "cublas: %s failed: status %d (%s:%d)", what, (int)s, file, line);
}
