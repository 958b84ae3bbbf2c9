/* cudev_trace.c — the kernels' timeline ring of a device context (cudev_trace.h). */
#include "cudev_trace.h"

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef CUK_TRACE
#include "cuk_trace.h"
#endif

#ifdef CUK_TRACE
static const void *tr_owner; /* the context whose ring the kernels write */
static struct cuk_trace_rec *tr_buf; /* its ring, the records' counter, the ring's slots, the file */
static unsigned long long *tr_n, tr_cap;
static char tr_path[4096];
static int tr_files;                 /* traces written by this process */

static int trace_set_all(void *buf, void *n, unsigned long long cap)
{
    int rc = 0, r;
#define TRACE_SET_(fn)                                                                                                 \
    if ((r = fn(buf, n, cap)) && !rc)                                                                                 \
        rc = r;
    CUK_TRACE_SETTERS(TRACE_SET_)
#undef TRACE_SET_
    return rc;
}

/* pat with "%p" replaced by the pid, and ".k" after it for the process's k-th trace (k > 0) */
static void trace_path(char *out, size_t cap, const char *pat, int k)
{
    size_t o = 0;
    for (const char *c = pat; *c && o + 1 < cap; c++) {
        if (c[0] == '%' && c[1] == 'p') {
            o += (size_t)snprintf(out + o, cap - o, "%ld", (long)getpid());
            c++;
        } else
            out[o++] = *c;
        if (o >= cap)
            o = cap - 1;
    }
    out[o] = 0;
    if (k > 0 && o < cap)
        snprintf(out + o, cap - o, ".%d", k);
}

void cudev_trace_open(const void *d)
{
    const char *pat = getenv("PINFER_CUDA_TRACE");
    if (!pat || !*pat)
        return;
    if (tr_owner) {
        fprintf(stderr, "cuda: trace: another context is being traced; this one is not\n");
        return;
    }
    unsigned long long cap = 1ull << 20;
    const char *ce = getenv("PINFER_CUDA_TRACE_CAP");
    if (ce && *ce) {
        char *end = NULL;
        const unsigned long long v = strtoull(ce, &end, 0);
        if (*end || v == 0 || v > (1ull << 32))
            fprintf(stderr, "cuda: trace: PINFER_CUDA_TRACE_CAP=%s is not a count of records; %llu\n", ce, cap);
        else
            cap = v;
    }
    void *buf = NULL, *n = NULL;
    const size_t bytes = (size_t)cap * sizeof(struct cuk_trace_rec);
    cudaError_t e = cudaMalloc(&buf, bytes);
    if (e == cudaSuccess)
        e = cudaMalloc(&n, sizeof(unsigned long long));
    if (e == cudaSuccess)
        e = cudaMemset(buf, 0, bytes); /* fid 0: a slot never written */
    if (e == cudaSuccess)
        e = cudaMemset(n, 0, sizeof(unsigned long long));
    int rc = e == cudaSuccess ? trace_set_all(buf, n, cap) : -(int)e;
    if (!rc && (e = cudaDeviceSynchronize()) != cudaSuccess) /* the memsets (legacy stream) before any kernel */
        rc = -(int)e;
    if (rc) {
        fprintf(stderr, "cuda: trace: off: %s\n", cudaGetErrorString((cudaError_t)-rc));
        trace_set_all(NULL, NULL, 1);
        cudaFree(buf);
        cudaFree(n);
        cudaGetLastError();
        return;
    }
    tr_buf = buf, tr_n = n, tr_cap = cap;
    trace_path(tr_path, sizeof tr_path, pat, tr_files);
    tr_owner = d;
    fprintf(stderr, "cuda: trace: a ring of %llu records (%.1f MiB) for %s\n", cap, (double)bytes / (1 << 20),
            tr_path);
}

/* the ring to the file (its records in slot order), then the kernels stop writing and it is freed */
void cudev_trace_close(const void *d)
{
    if (tr_owner != d || !tr_buf)
        return;
    unsigned long long n = 0;
    struct cuk_trace_rec *h = NULL;
    size_t m = 0;
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaMemcpy(&n, tr_n, sizeof n, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) {
        m = (size_t)(n < tr_cap ? n : tr_cap);
        h = malloc(m ? m * sizeof *h : 1);
        e = h ? cudaMemcpy(h, tr_buf, m * sizeof *h, cudaMemcpyDeviceToHost) : cudaErrorMemoryAllocation;
    }
    if (e != cudaSuccess)
        fprintf(stderr, "cuda: trace: cannot read the ring back: %s\n", cudaGetErrorString(e));
    else {
        struct cuk_trace_file_head hd = { .version = CUK_TRACE_VERSION, .rec_size = sizeof(struct cuk_trace_rec),
                                          .cap = tr_cap, .n = n, .n_fid = CUK_F_COUNT };
        memcpy(hd.magic, CUK_TRACE_MAGIC, sizeof hd.magic);
        int khz = 0;
        if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) == cudaSuccess && khz > 0)
            hd.clock_khz = (uint32_t)khz;
        char names[CUK_F_COUNT][CUK_TRACE_NAME_BYTES];
        memset(names, 0, sizeof names);
        for (int f = 0; f < CUK_F_COUNT; f++)
            snprintf(names[f], CUK_TRACE_NAME_BYTES, "%s", cuk_trace_name(f));
        FILE *fp = fopen(tr_path, "wb");
        const bool ok = fp && fwrite(&hd, sizeof hd, 1, fp) == 1 && fwrite(names, sizeof names, 1, fp) == 1 &&
                        (m == 0 || fwrite(h, sizeof *h, m, fp) == m);
        if (fp && fclose(fp) != 0)
            fp = NULL;
        if (ok && fp)
            fprintf(stderr, "cuda: trace: %zu records of %llu written to %s\n", m, n, tr_path);
        else
            fprintf(stderr, "cuda: trace: cannot write %s\n", tr_path);
    }
    free(h);
    trace_set_all(NULL, NULL, 1);
    cudaFree(tr_buf);
    cudaFree(tr_n);
    cudaGetLastError();
    tr_buf = NULL, tr_n = NULL;
    tr_owner = NULL;
    tr_files++;
}
#else
void cudev_trace_open(const void *d)
{
    (void)d;
    if (getenv("PINFER_CUDA_TRACE"))
        fprintf(stderr, "cuda: PINFER_CUDA_TRACE ignored: this build has no trace (meson -Dcuk_trace=true)\n");
}
void cudev_trace_close(const void *d) { (void)d; }
#endif
