/* ref_f64.h — the f64 reference pieces the model tests compare the engine with: a matrix-vector
 * product, RMSNorm and RoPE, written the plain way (no kernels of the engine). */
#ifndef PI_TESTS_REF_F64_H
#define PI_TESTS_REF_F64_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

/* y (n_out) = W (n_out, n_in) x (n_in) */
static inline void ref_mv(const float *W, const double *x, double *y, int n_in, int n_out)
{
    for (int o = 0; o < n_out; o++) {
        double s = 0.0;
        for (int i = 0; i < n_in; i++)
            s += (double)W[(size_t)o * n_in + i] * x[i];
        y[o] = s;
    }
}

static inline void ref_norm(const double *x, const float *w, double *y, int n, double eps)
{
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    const double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * s * w[i];
}

static inline void ref_rope(double *v, int n_heads, int d, int pos, double theta, bool neox)
{
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < d / 2; i++) {
            const double ang = pos * pow(theta, -2.0 * i / d);
            const int a = neox ? i : 2 * i, b = neox ? i + d / 2 : 2 * i + 1;
            double *x = v + (size_t)h * d;
            const double x0 = x[a], x1 = x[b];
            x[a] = x0 * cos(ang) - x1 * sin(ang);
            x[b] = x0 * sin(ang) + x1 * cos(ang);
        }
}

#endif
