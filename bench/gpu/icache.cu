/* icache.cu — does a stream of weights through L2 make the next kernel's first run slower (its code
 * fetched again)? Built by hand (nvcc -arch=sm_90 -O3 -o icache bench/gpu/icache.cu) and run on the
 * GPU machine (2026-12-04, bench/gpu/NOTES.md f7): "big" is 2 800 straight-line FMAs in 8 chains (45 KB
 * of code), "small" a few; each runs on 132 one-warp blocks, timed by events (launch included),
 * right after itself, after a plain 1 GiB read, and after the same read with ld.global.cs
 * (evict-first). Output: one line per (kernel, case), µs min / median / max of 9.
 */
#include <cstdio>
#include <cuda_runtime.h>
#include <algorithm>
#include <vector>
__global__ void big(float *o, float x)
{
    float a[8];
    for (int i = 0; i < 8; i++) a[i] = x + i;
#pragma unroll
    for (int i = 0; i < 2800; i++)
        a[i % 8] = fmaf(a[i % 8], x, 1.0f + (float)i * 1e-6f);
    float s = 0;
    for (int i = 0; i < 8; i++) s += a[i];
    if (threadIdx.x == 0)
        o[blockIdx.x] = s;
}
__global__ void small(float *o, float x)
{
    float a = x;
    for (int i = 0; i < 4; i++)
        a = fmaf(a, x, 1.0f);
    if (threadIdx.x == 0)
        o[blockIdx.x] = a;
}
template <bool CS> __global__ void stream(const uint4 *p, size_t n, unsigned long long *sink)
{
    unsigned long long acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = CS ? __ldcs(p + i) : p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345) *sink = acc;
}
int main()
{
    size_t bytes = 1ull << 30, n = bytes / 16;
    uint4 *buf;
    float *o;
    unsigned long long *sink;
    cudaMalloc(&buf, bytes); cudaMemset(buf, 1, bytes);
    cudaMalloc(&o, 1024 * 4);
    cudaMalloc(&sink, 8);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    const char *names[] = {"warm (after itself)", "after a plain 1 GiB read", "after a ld.global.cs 1 GiB read"};
    for (int kind = 0; kind < 2; kind++)
        for (int mode = 0; mode < 3; mode++) {
            std::vector<float> us;
            for (int rep = 0; rep < 9; rep++) {
                if (kind == 0) big<<<132, 32>>>(o, 1.0001f); else small<<<132, 32>>>(o, 1.0001f);
                if (mode == 1) stream<false><<<132 * 4, 512>>>(buf, n, sink);
                if (mode == 2) stream<true><<<132 * 4, 512>>>(buf, n, sink);
                cudaEventRecord(e0);
                if (kind == 0) big<<<132, 32>>>(o, 1.0001f); else small<<<132, 32>>>(o, 1.0001f);
                cudaEventRecord(e1);
                cudaEventSynchronize(e1);
                float ms; cudaEventElapsedTime(&ms, e0, e1);
                us.push_back(ms * 1000);
            }
            std::sort(us.begin(), us.end());
            printf("%s %-34s: µs min %.2f median %.2f max %.2f\n", kind ? "small (~0.5 KB code)" : "big (45 KB code)    ", names[mode], us[0], us[4], us[8]);
        }
    printf("%s\n", cudaGetErrorString(cudaDeviceSynchronize()));
}
