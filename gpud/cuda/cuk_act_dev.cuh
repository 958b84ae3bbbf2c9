/* cuk_act_dev.cuh — the FFN's activation of a (gate, up) pair (model.h's PI_ACT_*), every rounding
 * explicit: one definition for each kernel that applies it (the CUDA-core GLU and the elementwise
 * kernel, cuk_gemv.cu and cuk_elem.cu; the tensor-core products' epilogue, cuk_mma_dev.cuh). Include
 * after model.h. */
#ifndef CUK_ACT_DEV_CUH
#define CUK_ACT_DEV_CUH

#include <cuda_runtime.h>
#include <math.h>

__device__ static inline float glu(int kind, float g, float u)
{
    if (kind == PI_ACT_SWIGLU)
        return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
    if (kind == PI_ACT_REGLU)
        return g > 0.0f ? __fmul_rn(g, u) : 0.0f;
    return (g > 0.0f && u > 0.0f) ? __fmul_rn(g, u) : 0.0f;
}

#endif
