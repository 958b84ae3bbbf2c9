/* handoff.cu — what a kernel boundary of the PDL decode chain costs, and whether a flag can hand over
 * sooner than griddepcontrol.wait.
 *
 * Why: the chain's trace (bench/gpu/NOTES.md, 2026-12-04) shows 1.1–2.4 µs from a kernel's last block
 * exit to the next kernel's first return from griddepcontrol.wait — ~8 µs of d16's 118 µs layer (5
 * boundaries), more on the sparse files (9–11). The wait returns once the previous grid has completed
 * and its memory is flushed; a counter that each block of the previous kernel bumps with a release
 * atomic as it leaves, polled with an acquire load, could hand over when the last block's writes are
 * visible, without the grid's completion.
 *
 * A chain of N kernels (132 blocks × 256 threads; each block reads KB of a weight-like buffer before
 * its wait, then reads the previous kernel's value and writes value + 1), captured in a CUDA graph,
 * timed by events over replays, in three modes:
 *   plain  <<<>>> stream order
 *   pdl    programmatic serialization; griddepcontrol.wait, then launch_dependents
 *   flag   programmatic serialization for the launch; the wait is thread 0 polling the previous
 *          kernel's counter (ld.acquire.gpu) until all its blocks arrived, then the block's barrier;
 *          every block leaves with a barrier and one red.release.gpu on its own counter. The counters
 *          are zeroed by a memset node at the graph's start. Safe from deadlock: a kernel launches only
 *          once every block of the one before it has called launch_dependents (so all of them hold
 *          their slots already), and each kernel triggers only after its own wait.
 * Output: µs per kernel for each mode, and whether the chain's value came out right (N).
 * Build by hand: nvcc -arch=sm_90 -O3 -o handoff bench/gpu/handoff.cu (not built by meson).
 */
#include <algorithm>
#include <cstdio>
#include <cuda_runtime.h>
#include <vector>

enum { PLAIN, PDL, FLAG };

__device__ static inline unsigned ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ static inline void red_release(unsigned *p)
{
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(p) : "memory");
}

template <int MODE>
__global__ void __launch_bounds__(256) link(const uint4 *w, size_t w_per_block, const int *in, int *out,
                                            unsigned *ctr, int k, unsigned prev_blocks, unsigned long long *sink)
{
    /* the prologue: this block's share of a weight-like buffer (no dependence on the chain) */
    unsigned long long acc = 0;
    const uint4 *wb = w + (size_t)blockIdx.x * w_per_block;
    for (size_t i = threadIdx.x; i < w_per_block; i += blockDim.x) {
        const uint4 v = __ldcs(wb + i);
        acc ^= v.x ^ v.w;
    }
    if (MODE == PDL)
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
    if (MODE == FLAG) {
        if (k > 0 && threadIdx.x == 0)
            while (ld_acquire(ctr + k - 1) < prev_blocks)
                ;
        __syncthreads();
    }
    if (MODE != PLAIN)
        asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    const int v = __ldcg(in) + 1; /* the previous kernel's output */
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *out = v;
    if (acc == 0x123456789ull)
        *sink = acc;
    if (MODE == FLAG) {
        __syncthreads();
        if (threadIdx.x == 0)
            red_release(ctr + k);
    }
}

template <int MODE>
static void launch(int k, const uint4 *w, size_t wpb, int *vals, unsigned *ctr, unsigned long long *sink, cudaStream_t st)
{
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(132), cfg.blockDim = dim3(256), cfg.stream = st;
    cfg.attrs = at, cfg.numAttrs = MODE == PLAIN ? 0 : 1;
    cudaLaunchKernelEx(&cfg, link<MODE>, w, wpb, (const int *)(vals + k), vals + k + 1, ctr, k, 132u, sink);
}

int main()
{
    const int N = 160;                          /* kernels in the chain (a sparse step's 32 layers × 5) */
    const size_t wpb = 2048;                    /* uint4 a block: 32 KiB, ~4 MiB a kernel */
    const size_t wn = (size_t)N * 132 * wpb;    /* a different slice for each kernel: ~680 MiB */
    uint4 *w;
    int *vals;
    unsigned *ctr;
    unsigned long long *sink;
    if (cudaMalloc(&w, wn * 16) || cudaMalloc(&vals, (N + 1) * sizeof(int)) || cudaMalloc(&ctr, N * sizeof(unsigned)) ||
        cudaMalloc(&sink, 8)) {
        printf("handoff: cudaMalloc failed\n");
        return 1;
    }
    cudaMemset(w, 1, wn * 16);
    cudaStream_t st;
    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    const char *names[] = { "plain", "pdl", "flag" };
    for (int mode = 0; mode < 3; mode++) {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
        cudaMemsetAsync(vals, 0, (N + 1) * sizeof(int), st);
        cudaMemsetAsync(ctr, 0, N * sizeof(unsigned), st);
        for (int k = 0; k < N; k++) {
            const uint4 *wk = w + (size_t)k * 132 * wpb;
            if (mode == PLAIN)
                launch<PLAIN>(k, wk, wpb, vals, ctr, sink, st);
            else if (mode == PDL)
                launch<PDL>(k, wk, wpb, vals, ctr, sink, st);
            else
                launch<FLAG>(k, wk, wpb, vals, ctr, sink, st);
        }
        cudaStreamEndCapture(st, &g);
        if (cudaGraphInstantiate(&ge, g, 0)) {
            printf("handoff: %s: graph instantiation failed: %s\n", names[mode], cudaGetErrorString(cudaGetLastError()));
            continue;
        }
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        std::vector<float> us;
        for (int r = 0; r < 12; r++) {
            cudaEventRecord(e0, st);
            cudaGraphLaunch(ge, st);
            cudaEventRecord(e1, st);
            cudaEventSynchronize(e1);
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            if (r >= 2)
                us.push_back(ms * 1000.0f / N);
        }
        int last = -1;
        cudaMemcpy(&last, vals + N, sizeof(int), cudaMemcpyDeviceToHost);
        std::sort(us.begin(), us.end());
        printf("handoff %-5s: µs a kernel min %.3f median %.3f max %.3f; chain value %d (want %d) %s\n", names[mode],
               us.front(), us[us.size() / 2], us.back(), last, N, cudaGetErrorString(cudaGetLastError()));
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
    }
    return 0;
}
