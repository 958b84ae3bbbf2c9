/* gemm.c — the matrix products of predictor training behind one function pointer: OpenBLAS on the
 * CPU, a scalar reference for tests; a GPU backend supplies its own cal_gemm the same way.
 *
 * OpenBLAS is loaded with dlopen when calibration starts, not linked into pictl: the pthread build
 * starts its worker threads when the library loads, and they spin-yield for a while, which slowed
 * every `pictl run` on a 2-core machine. Without the library the reference GEMM is used. */
#include "cal_internal.h"

#include <cblas.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

#define OPENBLAS_SONAME "libopenblas.so.0"

typedef void (*cblas_sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE,
                               const blasint, const blasint, const blasint, const float, const float *, const blasint,
                               const float *, const blasint, const float, float *, const blasint);
typedef void (*set_threads_fn)(int);

static cblas_sgemm_fn blas_gemm;

/* C = alpha · op(A) · op(B) + beta · C through cblas_sgemm (row-major). */
static void blas_sgemm(void *self, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc)
{
    (void)self;
    blas_gemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
              B, ldb, beta, C, ldc);
}

void cal_gemm_blas(struct cal_gemm *g, int n_threads)
{
    void *lib = dlopen(OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    cblas_sgemm_fn gemm = lib ? (cblas_sgemm_fn)dlsym(lib, "cblas_sgemm") : NULL;
    set_threads_fn set_threads = lib ? (set_threads_fn)dlsym(lib, "openblas_set_num_threads") : NULL;
    if (!gemm) {
        fprintf(stderr, "calibrate: %s not usable (%s): using the reference GEMM (slow)\n", OPENBLAS_SONAME,
                lib ? "no cblas_sgemm" : dlerror());
        cal_gemm_ref(g);
        return;
    }
    /* OpenBLAS keeps its own threads; pin their number to -t so that the calibrator shares the
     * machine as asked (and results are reproducible for a given -t). */
    if (set_threads)
        set_threads(n_threads > 0 ? n_threads : 1);
    blas_gemm = gemm; /* the library stays loaded for the life of the process */
    g->name = "openblas";
    g->sgemm = blas_sgemm;
    g->self = NULL;
}

/* C[m][n] = alpha · Σ_k A'[m][k] B'[k][n] + beta · C[m][n], accumulated in double. */
static void ref_sgemm(void *self, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc)
{
    (void)self;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) {
                const float a = ta ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k];
                const float b = tb ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n];
                s += (double)a * b;
            }
            float *c = &C[(size_t)m * ldc + n];
            *c = (float)(alpha * s) + (beta != 0.0f ? beta * *c : 0.0f);
        }
}

void cal_gemm_ref(struct cal_gemm *g)
{
    g->name = "reference";
    g->sgemm = ref_sgemm;
    g->self = NULL;
}
