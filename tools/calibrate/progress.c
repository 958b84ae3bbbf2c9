/* progress.c — the calibrator's progress bar on stderr. */
#include "cal_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "generate.h" /* pi_now_ms */

#define PROG_BAR_WIDTH 30
#define PROG_PERMILLE 1000
/* Redraw at most this often (ms): a terminal needs no more, and stderr writes are not free. */
#define PROG_REDRAW_MS 100.0

void prog_init(struct cal_progress *p, bool quiet)
{
    memset(p, 0, sizeof *p);
    p->quiet = quiet;
    p->tty = isatty(STDERR_FILENO) == 1;
}

void prog_begin(struct cal_progress *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->label, sizeof p->label, fmt, ap);
    va_end(ap);
    p->last_permille = -1;
    p->t0_ms = pi_now_ms();
    p->open = true;
    if (p->quiet)
        return;
    if (!p->tty)
        fprintf(stderr, "calibrate: %s ...\n", p->label);
    else
        prog_update(p, 0, 1);
}

void prog_update(struct cal_progress *p, uint64_t done, uint64_t total)
{
    if (p->quiet || !p->tty || !p->open || total == 0)
        return;
    int pm = (int)(done >= total ? PROG_PERMILLE : done * PROG_PERMILLE / total);
    const double now = pi_now_ms();
    if (pm == p->last_permille || (pm < PROG_PERMILLE && p->last_permille >= 0 && now - p->last_draw_ms < PROG_REDRAW_MS))
        return;
    p->last_permille = pm;
    p->last_draw_ms = now;
    char bar[PROG_BAR_WIDTH + 1];
    int fill = pm * PROG_BAR_WIDTH / PROG_PERMILLE;
    for (int i = 0; i < PROG_BAR_WIDTH; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[PROG_BAR_WIDTH] = '\0';
    fprintf(stderr, "\r\033[K%s [%s] %5.1f%% %6.1fs", p->label, bar, pm / 10.0, (now - p->t0_ms) / 1e3);
    fflush(stderr);
}

void prog_end(struct cal_progress *p, const char *fmt, ...)
{
    char msg[256] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    bool was_open = p->open;
    p->open = false;
    if (p->quiet)
        return;
    if (p->tty && was_open)
        fprintf(stderr, "\r\033[K");
    if (msg[0])
        fprintf(stderr, "calibrate: %s (%.1fs)\n", msg, (pi_now_ms() - p->t0_ms) / 1e3);
}
