/* report_svg.c — `--report FILE.svg`: a hand-written SVG with, per layer, the neurons' activation
 * frequencies sorted (the power law, log-scale y) and a bar chart of held-out recall per layer. */
#include "cal_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pi_err.h"

#define SVG_W 980
#define SVG_H 456
/* left panel: the sorted frequencies */
#define FQ_X0 70
#define FQ_X1 560
#define FQ_Y0 66
#define FQ_Y1 386
#define FQ_LOG_MIN (-4) /* 1e-4: frequencies below are drawn at the axis */
#define FQ_POINTS 400   /* at most this many points per layer's curve */
/* right panel: recall bars */
#define RC_X0 650
#define RC_X1 950
#define RC_Y0 66
#define RC_Y1 386

static const char *const palette[] = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                       "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf" };
#define N_COLORS (sizeof palette / sizeof palette[0])

static int cmp_desc(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static double fq_y(double f)
{
    double lg = f > 0.0 ? log10(f) : FQ_LOG_MIN;
    if (lg < FQ_LOG_MIN)
        lg = FQ_LOG_MIN;
    return FQ_Y1 - (lg - FQ_LOG_MIN) / (0.0 - FQ_LOG_MIN) * (FQ_Y1 - FQ_Y0);
}

static void freq_panel(FILE *f, int32_t n_layer, int32_t n_ff, const struct cal_layer_report *L, float *sorted)
{
    fprintf(f, "<text x='%d' y='%d' class='t'>activation frequency per neuron, sorted (log scale)</text>\n", FQ_X0,
            FQ_Y0 - 10);
    for (int e = FQ_LOG_MIN; e <= 0; e++) {
        const double y = fq_y(pow(10.0, e));
        fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' class='g'/>", FQ_X0, y, FQ_X1, y);
        fprintf(f, "<text x='%d' y='%.1f' class='a' text-anchor='end'>1e%d</text>\n", FQ_X0 - 6, y + 4, e);
    }
    fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' class='frame'/>\n", FQ_X0, FQ_Y0, FQ_X1 - FQ_X0,
            FQ_Y1 - FQ_Y0);
    fprintf(f, "<text x='%d' y='%d' class='a' text-anchor='middle'>neuron rank (of %d, most active first)</text>\n",
            (FQ_X0 + FQ_X1) / 2, FQ_Y1 + 28, n_ff);
    const int32_t step = n_ff > FQ_POINTS ? (n_ff + FQ_POINTS - 1) / FQ_POINTS : 1;
    for (int32_t l = 0; l < n_layer; l++) {
        memcpy(sorted, L[l].act_freq, (size_t)n_ff * sizeof *sorted);
        qsort(sorted, (size_t)n_ff, sizeof *sorted, cmp_desc);
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.5' points='", palette[l % N_COLORS]);
        for (int32_t i = 0; i < n_ff; i += step) {
            const double x = FQ_X0 + (double)i / (n_ff > 1 ? n_ff - 1 : 1) * (FQ_X1 - FQ_X0);
            fprintf(f, "%.1f,%.1f ", x, fq_y(sorted[i]));
        }
        fprintf(f, "%.1f,%.1f'/>\n", (double)FQ_X1, fq_y(sorted[n_ff - 1]));
        /* legend */
        const int ly = FQ_Y0 + 14 + 16 * l;
        fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='%s' stroke-width='3'/>", FQ_X1 - 130, ly - 4,
                FQ_X1 - 112, ly - 4, palette[l % N_COLORS]);
        fprintf(f, "<text x='%d' y='%d' class='a'>layer %d (%.1f%% active)</text>\n", FQ_X1 - 106, ly, l,
                100.0 * L[l].true_frac);
    }
}

static void recall_panel(FILE *f, int32_t n_layer, const struct cal_layer_report *L, double target)
{
    /* The y axis spans [lo, 1] with lo a round value below every bar and the target. */
    double lo = target;
    for (int32_t l = 0; l < n_layer; l++) {
        if (L[l].recall < lo) lo = L[l].recall;
        if (L[l].eval_recall >= 0.0 && L[l].eval_recall < lo) lo = L[l].eval_recall;
    }
    lo = floor((lo - 0.005) * 100.0) / 100.0;
    if (lo < 0.0) lo = 0.0;
    const double span = 1.0 - lo;
#define RC_Y(v) (RC_Y1 - ((v) - lo) / span * (RC_Y1 - RC_Y0))
    fprintf(f, "<text x='%d' y='%d' class='t'>recall per layer (held out; hatched: --eval)</text>\n", RC_X0, RC_Y0 - 10);
    for (int i = 0; i <= 4; i++) {
        const double v = lo + span * i / 4.0, y = RC_Y(v);
        fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' class='g'/>", RC_X0, y, RC_X1, y);
        fprintf(f, "<text x='%d' y='%.1f' class='a' text-anchor='end'>%.3f</text>\n", RC_X0 - 6, y + 4, v);
    }
    const double slot = (double)(RC_X1 - RC_X0) / (n_layer > 0 ? n_layer : 1), bw = slot * 0.35;
    for (int32_t l = 0; l < n_layer; l++) {
        const double x = RC_X0 + slot * l + slot * 0.12, y = RC_Y(L[l].recall);
        fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s'><title>layer %d: recall %.4f, "
                "rank %d</title></rect>", x, y, bw, RC_Y1 - y, palette[l % N_COLORS], l, L[l].recall, L[l].rank);
        if (L[l].eval_recall >= 0.0) {
            const double ye = RC_Y(L[l].eval_recall);
            fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='url(#hatch)' stroke='%s'><title>layer "
                    "%d: eval recall %.4f</title></rect>", x + bw, ye, bw, RC_Y1 - ye, palette[l % N_COLORS], l,
                    L[l].eval_recall);
        }
        fprintf(f, "<text x='%.1f' y='%d' class='a' text-anchor='middle'>%d</text>\n", x + bw, RC_Y1 + 16, l);
    }
    const double yt = RC_Y(target);
    fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#000' stroke-dasharray='6,4'/>", RC_X0, yt, RC_X1, yt);
    fprintf(f, "<text x='%d' y='%.1f' class='a' text-anchor='end'>target %.3f</text>\n", RC_X1, yt - 4, target);
    fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' class='frame'/>\n", RC_X0, RC_Y0, RC_X1 - RC_X0,
            RC_Y1 - RC_Y0);
    fprintf(f, "<text x='%d' y='%d' class='a' text-anchor='middle'>layer</text>\n", (RC_X0 + RC_X1) / 2, RC_Y1 + 28);
#undef RC_Y
}

/* Characters that would break the markup are replaced. */
static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++)
        fputc(*s == '<' || *s == '>' || *s == '&' || *s == '\'' || *s == '"' ? '_' : *s, f);
}

int cal_report_svg(const char *path, const char *model_name, int32_t n_layer, int32_t n_ff,
                   const struct cal_layer_report *L, double recall_target)
{
    float *sorted = malloc((size_t)(n_ff > 0 ? n_ff : 1) * sizeof *sorted);
    if (!sorted)
        return pi_fail(PI_E_NOMEM, "calibrate: out of memory for the report");
    FILE *f = fopen(path, "w");
    if (!f) {
        free(sorted);
        return pi_fail(errno, "calibrate: cannot write report '%s': %s", path, strerror(errno));
    }
    fprintf(f, "<?xml version='1.0' encoding='UTF-8'?>\n"
               "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' viewBox='0 0 %d %d' "
               "font-family='sans-serif'>\n"
               "<style>.t{font-size:14px;font-weight:bold}.a{font-size:11px}.g{stroke:#ddd}"
               ".frame{fill:none;stroke:#444}</style>\n"
               "<defs><pattern id='hatch' width='6' height='6' patternUnits='userSpaceOnUse' "
               "patternTransform='rotate(45)'><line x1='0' y1='0' x2='0' y2='6' stroke='#555' stroke-width='2'/>"
               "</pattern></defs>\n<rect width='100%%' height='100%%' fill='#fff'/>\n",
            SVG_W, SVG_H, SVG_W, SVG_H);
    fprintf(f, "<text x='%d' y='18' class='t'>pictl calibrate: ", FQ_X0);
    xml_text(f, model_name);
    fprintf(f, "</text>\n");
    freq_panel(f, n_layer, n_ff, L, sorted);
    recall_panel(f, n_layer, L, recall_target);
    fprintf(f, "</svg>\n");
    free(sorted);
    if (fclose(f) != 0)
        return pi_fail(PI_E_IO, "calibrate: cannot write report '%s'", path);
    return 0;
}
