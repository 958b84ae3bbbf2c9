/* bench_ring — latency of one ring hop between two processes.
 *
 *   bench_ring [-n ROUND_TRIPS] [-s MSG_BYTES]
 *
 * Ping-pong: the parent pushes a message on ring "ping", a forked child pops it and pushes it back
 * on ring "pong", the parent pops it. Both rings live in one shm segment the child attaches by
 * name, as two stages would. One hop = round trip / 2. Two cases: "spin" (default spin limit: the
 * waiter usually catches the message while polling) and "futex" (spin limit 0: every empty ring
 * puts the waiter to sleep, so each hop pays a FUTEX_WAKE and a wake-up). One JSON line per case. */
#include "pi_err.h"
#include "ring.h"
#include "shm.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_ROUND_TRIPS 100000
#define DEFAULT_MSG_BYTES 64     /* about one per-layer control message */
#define RING_SLOTS 16
#define MSG_MAX 4096            /* largest -s */
#define WARMUP 1000
#define HOP_TIMEOUT_MS 5000      /* a lost message ends the benchmark instead of hanging it */
#define P50 0.50
#define P90 0.90
#define P99 0.99

struct bench_cfg {
    long n;
    uint32_t msg_bytes;
    char instance[SHM_PART_MAX + 1];
    size_t ring_size;
    size_t off_ping, off_pong;
};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* t sorted; the q-quantile by nearest rank */
static double quantile(const double *t, long n, double q)
{
    long i = (long)ceil(q * (double)n) - 1;
    return t[i < 0 ? 0 : i];
}

/* Child: echo every ping back as a pong. */
static int run_echo(const struct bench_cfg *cfg, uint32_t spin)
{
    struct shm_seg seg;
    struct ring ping, pong;
    unsigned char buf[MSG_MAX];
    int rc = shm_attach(&seg, cfg->instance, "bench", PI_SEG_KIND_TEST, 0);
    if (rc)
        return rc;
    rc = ring_attach(&ping, shm_at(&seg, cfg->off_ping, cfg->ring_size), cfg->ring_size);
    if (!rc)
        rc = ring_attach(&pong, shm_at(&seg, cfg->off_pong, cfg->ring_size), cfg->ring_size);
    ring_set_spin(&ping, spin);
    ring_set_spin(&pong, spin);
    for (long i = 0; !rc && i < cfg->n + WARMUP; i++) {
        int len = ring_pop(&ping, buf, sizeof buf, HOP_TIMEOUT_MS);
        rc = len < 0 ? len : ring_push(&pong, buf, (size_t)len, HOP_TIMEOUT_MS);
    }
    shm_detach(&seg);
    return rc;
}

static int run_case(const struct bench_cfg *cfg, const char *path, uint32_t spin)
{
    struct shm_seg seg;
    size_t size = cfg->off_pong + cfg->ring_size;
    double *t = malloc((size_t)cfg->n * sizeof *t);
    if (!t)
        return -PI_E_NOMEM;
    int rc = shm_create(&seg, cfg->instance, "bench", PI_SEG_KIND_TEST, size);
    if (rc)
        goto fail_mem;
    seg.hdr->n_offsets = 2;
    seg.hdr->offsets[0] = cfg->off_ping;
    seg.hdr->offsets[1] = cfg->off_pong;
    void *mping = shm_at(&seg, cfg->off_ping, cfg->ring_size), *mpong = shm_at(&seg, cfg->off_pong, cfg->ring_size);
    if ((rc = ring_init(mping, cfg->ring_size, RING_SLOTS, cfg->msg_bytes)) ||
        (rc = ring_init(mpong, cfg->ring_size, RING_SLOTS, cfg->msg_bytes)))
        goto fail_seg;
    shm_publish(&seg);

    pid_t pid = fork();
    if (pid < 0) {
        rc = pi_fail(errno, "fork: %s", strerror(errno));
        goto fail_seg;
    }
    if (pid == 0) {
        int crc = run_echo(cfg, spin);
        if (crc)
            fprintf(stderr, "bench_ring: echo: %s %s\n", pi_strerror(crc), pi_errmsg());
        _exit(crc ? 1 : 0);
    }
    struct ring ping, pong;
    ring_attach(&ping, mping, cfg->ring_size);
    ring_attach(&pong, mpong, cfg->ring_size);
    ring_set_spin(&ping, spin);
    ring_set_spin(&pong, spin);
    unsigned char buf[MSG_MAX] = {0};
    for (long i = 0; !rc && i < cfg->n + WARMUP; i++) {
        memcpy(buf, &i, sizeof i);
        double t0 = now_ns();
        rc = ring_push(&ping, buf, cfg->msg_bytes, HOP_TIMEOUT_MS);
        if (!rc) {
            int len = ring_pop(&pong, buf, sizeof buf, HOP_TIMEOUT_MS);
            long echo;
            memcpy(&echo, buf, sizeof echo);
            if (len < 0)
                rc = len;
            else if ((uint32_t)len != cfg->msg_bytes || echo != i)
                rc = pi_fail(PI_E_FORMAT, "round trip %ld came back as %ld (%d bytes)", i, echo, len);
        }
        if (i >= WARMUP)
            t[i - WARMUP] = (now_ns() - t0) / 2; /* one hop */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!rc && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        rc = pi_fail(PI_E_IO, "echo process failed (status 0x%x)", status);
    if (!rc) {
        struct ring_stats a, b;
        ring_get_stats(&ping, &a);
        ring_get_stats(&pong, &b);
        qsort(t, (size_t)cfg->n, sizeof *t, cmp_double);
        printf("{\"bench\":\"ring_hop\",\"path\":\"%s\",\"n\":%ld,\"msg_bytes\":%u,\"p50_us\":%.3f,\"p90_us\":%.3f,"
               "\"p99_us\":%.3f,\"futex_waits\":%llu,\"unit\":\"us\"}\n",
               path, cfg->n, cfg->msg_bytes, quantile(t, cfg->n, P50) / 1e3, quantile(t, cfg->n, P90) / 1e3,
               quantile(t, cfg->n, P99) / 1e3,
               (unsigned long long)(a.cons_waits + a.prod_waits + b.cons_waits + b.prod_waits));
        fflush(stdout);
    }
fail_seg:
    shm_detach(&seg);
    shm_remove(seg.name);
fail_mem:
    free(t);
    return rc;
}

int main(int argc, char **argv)
{
    struct bench_cfg cfg = {.n = DEFAULT_ROUND_TRIPS, .msg_bytes = DEFAULT_MSG_BYTES};
    int opt;
    while ((opt = getopt(argc, argv, "n:s:")) != -1) {
        if (opt == 'n')
            cfg.n = atol(optarg);
        else if (opt == 's')
            cfg.msg_bytes = (uint32_t)atol(optarg);
        else {
            fprintf(stderr, "usage: bench_ring [-n ROUND_TRIPS] [-s MSG_BYTES]\n");
            return 2;
        }
    }
    if (cfg.n < 1 || cfg.msg_bytes < sizeof(long) || cfg.msg_bytes > MSG_MAX) {
        fprintf(stderr, "bench_ring: need -n >= 1 and %zu <= -s <= %d\n", sizeof(long), MSG_MAX);
        return 2;
    }
    snprintf(cfg.instance, sizeof cfg.instance, "bring%ld", (long)getpid());
    cfg.ring_size = ring_bytes(RING_SLOTS, cfg.msg_bytes);
    cfg.off_ping = 2 * PI_CACHE_LINE; /* after the 128-byte segment header */
    cfg.off_pong = cfg.off_ping + cfg.ring_size; /* ring sizes are multiples of a cache line */

    struct { const char *path; uint32_t spin; } cases[] = {{"spin", RING_SPIN_DEFAULT}, {"futex", 0}};
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof cases / sizeof *cases; i++)
        rc = run_case(&cfg, cases[i].path, cases[i].spin);
    shm_remove_instance(cfg.instance);
    if (rc) {
        fprintf(stderr, "bench_ring: %s: %s\n", pi_strerror(rc), pi_errmsg());
        return 1;
    }
    return 0;
}
