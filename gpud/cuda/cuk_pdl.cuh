/* cuk_pdl.cuh — Hopper's programmatic dependent launch (PDL) for the decode chain.
 *
 * A kernel launched by pdl_launch may start while the kernel before it in the stream still runs
 * (captured into a graph, the edge becomes a programmatic one). The contract every such kernel
 * keeps, so that the chain stays ordered:
 *   - before pdl_wait() it reads only what no kernel of the step writes (weights, launch arguments)
 *     and writes nothing — the kernel before it may still read what this one would overwrite. The
 *     weights are written only while the device context opens, which ends with a stream
 *     synchronize (cudev.c's upload), so no kernel that may still be running has written them;
 *   - pdl_wait() returns once the previous kernel has completed and its writes are visible; since
 *     that kernel passed its own pdl_wait() before completing, every earlier kernel has too;
 *   - pdl_trigger() comes after pdl_wait(), so the next kernel starts at most one kernel ahead.
 *     Hence a kernel may also read, before its wait, what kernels at least two back wrote: by the
 *     time it starts, the kernel just before it has passed its wait, so they have completed (such
 *     reads go around L1, __ldcg: no line of them is cached from before). Where a kernel does so,
 *     its caller's chain must keep a kernel between (k_chunk_sum, the listing gate/up: cuk_mmv.h).
 * A kernel launched with <<<>>> waits for the full completion of the one before it, as always; a
 * pdl_wait() in a kernel not launched by pdl_launch returns at once. The bits never depend on it: the
 * same loads and the same math, only earlier. On by default (PINFER_CUDA_PDL=0 turns it off): in
 * interleaved rounds on the H200 (bench/gpu/NOTES.md, 2026-12-02) it gains on every file together
 * with the streamed kernel for every one-token product (cuk_mmv.h's default level 2): d16 +1.5 %,
 * s4 +6 %, d4 +5.6 %, s16 +6 %, the Q4_0 hybrid +12 % (alone, without level 2, it loses 3.5 % on
 * d16). Read once: a decode graph must not change its launches between captures. A launch on the legacy NULL stream is
 * always in plain order (the kernel tests' direct calls are the reference the PDL chain is checked
 * against, test_cuda_ops' test_pdl). */
#ifndef CUK_PDL_CUH
#define CUK_PDL_CUH

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <utility>

#include "cuk_trace.cuh" /* CUK_TRACE_BLOCK for the kernels; a CUK_TRACE build notes pdl_wait()'s return */

/* wait for the previous kernel in the stream (completion and memory); PTX griddepcontrol.wait */
__device__ static inline void pdl_wait(void)
{
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#ifdef CUK_TRACE
    cuk_trace_waited(); /* thread (0,0,0), the first time: the block's t_waited (cuk_trace.cuh) */
#endif
}
/* let the next kernel launch (its blocks take SMs as they free up); griddepcontrol.launch_dependents */
__device__ static inline void pdl_trigger(void) { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
/* a kernel with no prologue of its own: wait, then let the next one start its prologue */
__device__ static inline void pdl_enter(void)
{
    pdl_wait();
    pdl_trigger();
}
/* the L2 line of p fetched ahead (no register, no fault on a valid address) */
__device__ static inline void pdl_prefetch(const void *p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

/* a switch of the decode chain that is on unless the environment sets it to "0"; each caller keeps
 * its answer in a function-local static (read once: a decode graph must not change its launches or
 * kernels between captures) */
static inline bool env_on_unless_0(const char *name)
{
    const char *e = getenv(name);
    return !(e && strcmp(e, "0") == 0);
}

static bool pdl_on(void)
{
    static const bool on = env_on_unless_0("PINFER_CUDA_PDL");
    return on;
}

/* kernel<<<grid, block, smem, st>>>(args...) with the programmatic-serialization attribute (when
 * on), in clusters of cz blocks along z when cz > 0. A failed launch is reported as a <<<>>> launch's
 * is: through cudaGetLastError (launched()). */
template <typename... KArgs, typename... Args>
static void pdl_launch_clusters(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                                unsigned cz, Args &&...args)
{
    cudaLaunchAttribute at[2];
    unsigned n = 0;
    if (pdl_on() && st) { /* the legacy stream (tests' NULL) in plain order */
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cz > 0) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = 1, at[n].val.clusterDim.y = 1, at[n++].val.clusterDim.z = cz;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = st;
    cfg.attrs = at, cfg.numAttrs = n;
    cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <typename... KArgs, typename... Args>
static void pdl_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st, Args &&...args)
{
    pdl_launch_clusters(kernel, grid, block, smem, st, 0u, std::forward<Args>(args)...);
}

#endif
