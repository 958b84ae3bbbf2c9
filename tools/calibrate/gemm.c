/* gemm.c — the matrix products of predictor training behind one function pointer: OpenBLAS on the
 * CPU, a scalar reference for tests; a GPU backend supplies its own cal_gemm the same way. */
#include "cal_internal.h"

#include <cblas.h>
#include <stddef.h>

/* C = alpha · op(A) · op(B) + beta · C through cblas_sgemm (row-major). */
static void blas_sgemm(void *self, bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc)
{
    (void)self;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
                lda, B, ldb, beta, C, ldc);
}

void cal_gemm_blas(struct cal_gemm *g, int n_threads)
{
    /* OpenBLAS keeps its own threads; pin their number to -t so that the calibrator shares the
     * machine as asked (and results are reproducible for a given -t). */
    openblas_set_num_threads(n_threads > 0 ? n_threads : 1);
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
