/* cuk_launch.cuh — the host side that every kernel file shares: a launch's error as the return code
 * (launched), the stream handle (S) and the shared-memory carveout hint (carve). Static, so each
 * object compiles its own copy (no -rdc: nothing crosses files but the C interface). */
#ifndef CUK_LAUNCH_CUH
#define CUK_LAUNCH_CUH

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

static int launched(void)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : -(int)e;
}

static cudaStream_t S(void *st) { return (cudaStream_t)st; }

/* The F16 decode kernels (cuk_mmv.cu) take ~200 KiB of shared memory an SM; PINFER_CUDA_CARVE=1 makes
 * the small kernels between them ask for the same max-shared carveout, so that the SM need not switch
 * its L1 / shared split between launches. Off by default: with every product streamed it changed
 * nothing measurable (d16 214.7 vs 214.2 tok/s, bench/gpu/NOTES.md call 2), and beside the Q types'
 * kernels it would add switches. Called once per kernel (a static of each launcher's instantiation). */
static bool carve_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("PINFER_CUDA_CARVE");
        on = e && strcmp(e, "1") == 0;
    }
    return on;
}
static bool carve(const void *kernel)
{
    if (carve_on())
        cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, (int)cudaSharedmemCarveoutMaxShared);
    cudaGetLastError(); /* a refused hint is not an error of the next launch */
    return true;
}

#endif
