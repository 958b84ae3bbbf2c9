/* ipc_exit.cu — what happens to a process that imported device memory by CUDA IPC when the exporting
 * process dies (issue 10: should predictord own the predictor weights and share them with gpud?).
 *
 * The parent forks before any CUDA call: an exporter (cudaMalloc of BYTES, a known pattern written,
 * the IPC handle sent through a pipe; then it waits to be killed) and an importer (opens the handle
 * and, in rounds, runs a read kernel over the buffer: its checksum, its time, and the error codes).
 * After IMPORT_ROUNDS rounds the parent kills the exporter with SIGKILL and the importer goes on:
 * does it still read the same bytes, at the same speed, without an error; is the memory returned to
 * the device before the importer closes the handle (cudaMemGetInfo in the importer); can it open the
 * handle again (a restarted gpud re-attaching to a dead exporter's handle), and does its context still
 * work (a fresh allocation and kernel). Output: one line per fact, "ipc_exit: KEY VALUE".
 *
 *   nvcc -O2 -arch=sm_90 -o ipc_exit bench/gpu/ipc_exit.cu && ./ipc_exit [MiB]   (default 512) */
#include <cuda_runtime.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS_BEFORE 5
#define ROUNDS_AFTER 10
#define PATTERN 0x5a17u

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__global__ void fill(uint32_t *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint32_t)i * 2654435761u ^ PATTERN;
}

__global__ void sum(const uint32_t *p, size_t n, unsigned long long *out)
{
    unsigned long long s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += p[i];
    atomicAdd(out, s);
}

static unsigned long long expect_sum(size_t n)
{
    unsigned long long s = 0;
    for (size_t i = 0; i < n; i++)
        s += (uint32_t)((uint32_t)i * 2654435761u ^ PATTERN);
    return s;
}

static void exporter(size_t bytes, int wfd)
{
    uint32_t *p;
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess) {
        fill<<<264, 256>>>(p, bytes / 4);
        e = cudaDeviceSynchronize();
    }
    if (e == cudaSuccess)
        e = cudaIpcGetMemHandle(&h, p);
    if (e != cudaSuccess) {
        fprintf(stderr, "ipc_exit: exporter error %s\n", cudaGetErrorString(e));
        memset(&h, 0, sizeof h);
    }
    if (write(wfd, &h, sizeof h) != (ssize_t)sizeof h)
        _exit(1);
    for (;;)
        pause(); /* until SIGKILL */
}

/* One round: the read kernel over the imported buffer, its time, its checksum against the pattern. */
static int round_(const char *when, int k, const uint32_t *p, size_t n, unsigned long long *d_out,
                  unsigned long long want)
{
    unsigned long long got = 0;
    double t0 = now_ms();
    cudaError_t e = cudaMemset(d_out, 0, sizeof *d_out);
    if (e == cudaSuccess) {
        sum<<<264, 256>>>(p, n, d_out);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpy(&got, d_out, sizeof got, cudaMemcpyDeviceToHost);
    double ms = now_ms() - t0;
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    printf("ipc_exit: round %s %d: %s, checksum %s, %.3f ms (%.0f GB/s), device free %.1f MiB\n", when, k,
           cudaGetErrorString(e), e == cudaSuccess ? (got == want ? "ok" : "WRONG") : "-", ms,
           n * 4 / ms / 1e6, fr / 1048576.0);
    return e == cudaSuccess && got == want ? 0 : 1;
}

static int importer(size_t bytes, int rfd, int go_fd, int done_fd)
{
    cudaIpcMemHandle_t h;
    if (read(rfd, &h, sizeof h) != (ssize_t)sizeof h)
        return 2;
    const size_t n = bytes / 4;
    const unsigned long long want = expect_sum(n);
    double t0 = now_ms();
    cudaError_t e = cudaFree(0);
    printf("ipc_exit: importer context %s in %.1f ms\n", cudaGetErrorString(e), now_ms() - t0);
    uint32_t *p = NULL;
    t0 = now_ms();
    e = cudaIpcOpenMemHandle((void **)&p, h, cudaIpcMemLazyEnablePeerAccess);
    printf("ipc_exit: open handle %s in %.3f ms\n", cudaGetErrorString(e), now_ms() - t0);
    if (e != cudaSuccess)
        return 3;
    unsigned long long *d_out;
    if (cudaMalloc(&d_out, sizeof *d_out) != cudaSuccess)
        return 4;
    int bad_before = 0, bad_after = 0;
    for (int k = 0; k < ROUNDS_BEFORE; k++)
        bad_before += round_("before", k, p, n, d_out, want);
    /* the parent kills the exporter now */
    char c = 1;
    if (write(go_fd, &c, 1) != 1 || read(done_fd, &c, 1) != 1)
        return 5;
    usleep(200000); /* let the driver tear the dead process's context down */
    for (int k = 0; k < ROUNDS_AFTER; k++)
        bad_after += round_("after", k, p, n, d_out, want);
    /* a restarted importer re-attaching to the dead exporter's handle */
    uint32_t *p2 = NULL;
    e = cudaIpcOpenMemHandle((void **)&p2, h, cudaIpcMemLazyEnablePeerAccess);
    printf("ipc_exit: open the handle again after the exporter died: %s%s\n", cudaGetErrorString(e),
           e == cudaSuccess && p2 == p ? " (same mapping)" : "");
    cudaGetLastError(); /* the reopen's error is not sticky; clear it */
    /* is the context still healthy: a fresh allocation and kernel */
    uint32_t *q = NULL;
    e = cudaMalloc(&q, 1 << 20);
    if (e == cudaSuccess) {
        fill<<<8, 256>>>(q, (1 << 20) / 4);
        e = cudaDeviceSynchronize();
    }
    printf("ipc_exit: context after the exporter died: new allocation + kernel %s\n", cudaGetErrorString(e));
    size_t fr0 = 0, fr1 = 0, tot = 0;
    cudaMemGetInfo(&fr0, &tot);
    e = cudaIpcCloseMemHandle(p);
    usleep(100000);
    cudaMemGetInfo(&fr1, &tot);
    printf("ipc_exit: close handle %s; device free %.1f -> %.1f MiB (the buffer is returned only now: %s)\n",
           cudaGetErrorString(e), fr0 / 1048576.0, fr1 / 1048576.0,
           fr1 > fr0 + bytes / 2 ? "yes" : "no");
    printf("ipc_exit: summary: rounds before %d bad of %d, after the exporter's SIGKILL %d bad of %d\n", bad_before,
           ROUNDS_BEFORE, bad_after, ROUNDS_AFTER);
    return bad_before || bad_after ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* the children end with _exit: no buffered line may be lost */
    const size_t bytes = (size_t)(argc > 1 ? atoi(argv[1]) : 512) << 20;
    int hp[2], gp[2], dp[2];
    if (pipe(hp) || pipe(gp) || pipe(dp))
        return 2;
    fflush(stdout);
    pid_t ex = fork();
    if (ex == 0) {
        exporter(bytes, hp[1]);
        _exit(0);
    }
    pid_t im = fork();
    if (im == 0)
        _exit(importer(bytes, hp[0], gp[1], dp[0]));
    char c;
    if (read(gp[0], &c, 1) != 1) {
        kill(ex, SIGKILL);
        waitpid(ex, NULL, 0);
        int st;
        waitpid(im, &st, 0);
        printf("ipc_exit: importer ended early (status %d)\n", st);
        return 1;
    }
    double t0 = now_ms();
    kill(ex, SIGKILL);
    int st;
    waitpid(ex, &st, 0);
    printf("ipc_exit: exporter killed (SIGKILL), reaped in %.1f ms\n", now_ms() - t0);
    fflush(stdout);
    if (write(dp[1], &c, 1) != 1)
        return 2;
    waitpid(im, &st, 0);
    printf("ipc_exit: importer exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
