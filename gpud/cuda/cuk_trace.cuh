/* cuk_trace.cuh — the decode chain's timeline, block by block (a -Dcuk_trace=true build only).
 *
 * Why: the GPU machine has no nsys, and ncu serializes the kernels, so neither shows what the PDL
 * chain (cuk_pdl.cuh) does: how long each kernel's prologue, its wait for the previous kernel, its
 * stream and its tail take inside the chain, and what a launch boundary costs where. Here each block
 * of each marked kernel appends one record (cuk_trace.h's struct cuk_trace_rec) to a ring in device
 * memory, which cudev_trace.c writes to the file PINFER_CUDA_TRACE names when the context closes;
 * bench/gpu/trace_chain.py groups the records into launches, steps and layers.
 *
 * What is recorded, per block: the kernel's id, %smid, the linear block index and the grid's block
 * count; %globaltimer (ns) at the block's entry, when thread (0,0,0) first returned from pdl_wait(),
 * and when the block's last thread left; the same two intervals in clock64() cycles (exact within a
 * block, where %globaltimer may tick coarsely).
 *
 * How: CUK_TRACE_BLOCK(CUK_F_<kernel>) is the kernel's first statement. It is an object: its
 * constructor (every thread) lets thread (0,0,0) read the timers into a block-shared slot (a
 * function-scope __shared__ of cuk_trace_slot_get: one per block, also reachable from pdl_wait()),
 * then __syncthreads() — legal there, every thread of the block is at the first statement; its
 * destructor runs at every exit, early returns included: each thread adds itself to the slot's exit
 * count, and the one that completes it reads the timers and writes the record at
 * slot = atomicAdd(n, 1) % cap of the ring every object of the build shares (each .cu file has its
 * own static copy of the pointers, cuk_tr, set by its setter: no -rdc). Without CUK_TRACE the macro is
 * empty and nothing here is compiled: the kernels are those of a normal build, byte for byte.
 * (CUK_TRACE_BLOCK_DYN, below: the same with the slot in dynamic shared memory, for k_mma_mm, whose
 * static shared memory is exactly the 48 KiB a kernel may have.)
 *
 * Overhead a block: one __syncthreads at entry, a block fence and one shared atomic a thread at exit,
 * one global atomic and a 48-byte store by the last thread, and in pdl_wait() a test by thread
 * (0,0,0); 32 bytes more static shared memory (the slot). Where a kernel's dynamic shared memory is
 * aligned to 1 KiB (cuk_mmv.cu's ring) the static part rounds up: 66 of k_mmv's 133 instantiations
 * take 1 KiB more a block in a trace build (17 → 18 KiB, 9 → 10 KiB with the reserved KiB; checked
 * from the cubins). Every launch still fits: k_mmv's dynamic bytes are at most MMV_SMEM_MAX (208 KiB)
 * + 18 KiB static ≤ the 227 KiB opt-in, its cudaFuncSetAttribute sizes are of the dynamic bytes
 * alone. Only occupancy can differ: a pair of two-block k_mmv blocks (or a block and the next
 * kernel's under PDL) that fitted an SM's 228 KiB within that KiB runs one at a time in a trace
 * build. A 7B decode step is ~20 k records of 48 bytes. */
#ifndef CUK_TRACE_CUH
#define CUK_TRACE_CUH

#ifdef CUK_TRACE

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuk_trace.h"

/* the block's slot (static shared memory, 32 bytes) */
struct cuk_trace_slot {
    unsigned long long t_entry, t_waited; /* %globaltimer; t_waited 0 until the first pdl_wait() */
    long long c_entry;                    /* clock64() at the entry */
    unsigned int c_wait;                  /* cycles from the entry to the first pdl_wait()'s return */
    unsigned int exits;                   /* threads that have left */
};

/* where this object's kernels append (one copy per .cu object, all set to the same ring) */
struct cuk_trace_dst {
    struct cuk_trace_rec *buf; /* NULL: no trace */
    unsigned long long *n;     /* records appended in all (the one counter of every object) */
    unsigned long long cap;    /* slots of the ring */
};
static __device__ struct cuk_trace_dst cuk_tr;

__device__ static inline struct cuk_trace_slot *cuk_trace_slot_get(void)
{
    __shared__ struct cuk_trace_slot slot; /* one per block of every kernel that reaches it */
    return &slot;
}
/* CUK_TRACE_BLOCK_DYN's slot: the first bytes of the block's dynamic shared memory */
__device__ static inline struct cuk_trace_slot *cuk_trace_slot_dyn(void)
{
    extern __shared__ struct cuk_trace_slot cuk_trace_dyn[];
    return cuk_trace_dyn;
}
__device__ static inline unsigned long long cuk_trace_gtime(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ static inline unsigned int cuk_trace_smid(void)
{
    unsigned int s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
__device__ static inline bool cuk_trace_thread0(void) { return (threadIdx.x | threadIdx.y | threadIdx.z) == 0; }

/* pdl_wait() after its griddepcontrol.wait: thread (0,0,0) notes the first return */
__device__ static inline void cuk_trace_waited(void)
{
    if (!cuk_trace_thread0())
        return;
    struct cuk_trace_slot *s = cuk_trace_slot_get();
    if (s->t_waited)
        return;
    s->c_wait = (unsigned int)(clock64() - s->c_entry);
    s->t_waited = cuk_trace_gtime();
}

template <bool DYN> struct cuk_trace_block {
    unsigned int fid;
    __device__ static struct cuk_trace_slot *slot(void)
    {
        if constexpr (DYN)
            return cuk_trace_slot_dyn();
        else
            return cuk_trace_slot_get();
    }
    __device__ explicit cuk_trace_block(unsigned int f) : fid(f)
    {
        struct cuk_trace_slot *s = slot();
        if (cuk_trace_thread0()) {
            s->c_entry = clock64();
            s->t_entry = cuk_trace_gtime();
            s->t_waited = 0;
            s->c_wait = 0;
            s->exits = 0;
        }
        __syncthreads(); /* the first statement of the kernel: every thread of the block is here */
    }
    __device__ ~cuk_trace_block()
    {
        struct cuk_trace_slot *s = slot();
        const unsigned int nth = blockDim.x * blockDim.y * blockDim.z;
        __threadfence_block(); /* thread (0,0,0)'s t_waited before its count */
        if (atomicAdd(&s->exits, 1u) != nth - 1)
            return;
        __threadfence_block();
        const long long c = clock64();
        const unsigned long long t = cuk_trace_gtime();
        const struct cuk_trace_dst dst = cuk_tr;
        if (!dst.buf)
            return;
        struct cuk_trace_rec r;
        r.fid = fid;
        r.smid = cuk_trace_smid();
        r.block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        r.nblocks = gridDim.x * gridDim.y * gridDim.z;
        r.t_entry = s->t_entry;
        r.t_waited = s->t_waited;
        r.t_exit = t;
        r.cyc_wait = s->t_waited ? s->c_wait : 0u;
        r.cyc_exit = (unsigned int)(c - s->c_entry);
        dst.buf[atomicAdd(dst.n, 1ull) % dst.cap] = r;
    }
    cuk_trace_block(const cuk_trace_block &) = delete;
    cuk_trace_block &operator=(const cuk_trace_block &) = delete;
};

#define CUK_TRACE_BLOCK(fid) cuk_trace_block<false> cuk_trace_block_obj_((unsigned int)(fid))
/* A kernel whose static shared memory is at the 48 KiB limit (k_mma_mm's f16 tiling: exactly 48 KiB)
 * keeps the slot in dynamic shared memory instead: it has none of its own, and its launch asks for
 * CUK_TRACE_DYN_BYTES (and lets the kernel have them: cudaFuncAttributeMaxDynamicSharedMemorySize).
 * Such a kernel must not call pdl_wait() (which notes into the static slot): its t_waited stays 0. */
#define CUK_TRACE_BLOCK_DYN(fid) cuk_trace_block<true> cuk_trace_block_obj_((unsigned int)(fid))
#define CUK_TRACE_DYN_BYTES sizeof(struct cuk_trace_slot)

/* extern "C" int fn(void *buf, void *n, unsigned long long cap): this object's cuk_tr (cuk_trace.h) */
#define CUK_TRACE_SETTER(fn)                                                                                           \
    extern "C" int fn(void *buf, void *n, unsigned long long cap)                                                     \
    {                                                                                                                  \
        const struct cuk_trace_dst v = { (struct cuk_trace_rec *)buf, (unsigned long long *)n, cap ? cap : 1ull };    \
        const cudaError_t e = cudaMemcpyToSymbol(cuk_tr, &v, sizeof v);                                               \
        return e == cudaSuccess ? 0 : -(int)e;                                                                         \
    }

#else /* a normal build: nothing */

#define CUK_TRACE_BLOCK(fid)
#define CUK_TRACE_BLOCK_DYN(fid)
#define CUK_TRACE_DYN_BYTES 0
#define CUK_TRACE_SETTER(fn)

#endif

#endif
