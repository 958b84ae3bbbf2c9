/* testutil.h — minimal assertions for the test binaries (one binary per feature; exit 0 = pass,
 * 1 = fail, 77 = skipped, as meson and automake read them). A failing CHECK prints where and why and
 * the test goes on, so one run shows every failure. */
#ifndef PI_TESTUTIL_H
#define PI_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int tu_failures;
static int tu_checks;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        tu_checks++;                                                                               \
        if (!(cond)) {                                                                             \
            tu_failures++;                                                                         \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* A failed REQUIRE stops the test: later checks depend on it. */
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        int tu_ok_ = !!(cond); /* evaluated once: cond may have side effects */                   \
        CHECK(tu_ok_, __VA_ARGS__);                                                                \
        if (!tu_ok_) {                                                                             \
            fprintf(stderr, "stopping: required condition failed\n");                            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        int tu_rc_ = (expr);                                                                       \
        CHECK(tu_rc_ == 0, "%s returned %d (%s) %s", #expr, tu_rc_, pi_strerror(tu_rc_), pi_errmsg()); \
    } while (0)

#define SKIP(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "SKIP: ");                                                                 \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        exit(77);                                                                                  \
    } while (0)

static inline int tu_finish(const char *name)
{
    fprintf(stderr, "%s: %d checks, %d failed\n", name, tu_checks, tu_failures);
    return tu_failures ? 1 : 0;
}

#endif
