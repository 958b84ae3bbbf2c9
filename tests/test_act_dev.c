/* test_act_dev.c — the device's step key in the act segment (act_hdr.dev_seq, ACT_ITEM_DEV_KEY):
 * gpud hands a step to cpud before its device has written the step's h and masks, and cpud waits for
 * the device's key (act_wait_dev). Checked here with threads standing in for the device and cpud:
 *   - the wait returns true exactly when the key is the item's, false at once for a step the device
 *     already passed, for another gpud session's item, and when gone() says so (polled every
 *     check_every polls), never true for a key an older session left (steps number from epoch << 40);
 *   - a ping-pong of many steps: the "device" writes h (a pattern of the step), stores the key with
 *     release, then waits for cpud's share (ycold_seq == seq) or for the host's release word (rel >= seq,
 *     the share of a cpud that is "down"), as cuk_hand.cu's kernels do; "cpud" takes items that
 *     arrive before the key, and stale ones handed after a later key (a restarted cpud finds old
 *     steps in its ring), reads h only after the key, and answers. Every share the device takes is
 *     the one of its step, h is always the item's step, and no stale item is ever computed.
 *
 * Usage: test_act_dev [--quick]   (--quick: fewer steps, for the ThreadSanitizer build) */
#include "act.h"
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define H_WORDS 64
#define EPOCH 7u

static long n_steps = 200000;

struct sim {
    struct act_hdr *hdr;
    uint64_t h[H_WORDS];     /* what the device writes before its key */
    uint64_t ycold[H_WORDS]; /* cpud's share (its writer stores ycold_seq after it) */
    uint64_t rel_y[H_WORDS]; /* the host's share (released by rel) */
    _Atomic uint64_t rel;
    /* the items "gpud" hands over (a one-slot mailbox per step is enough here: the ring itself is
     * test_ring's) */
    _Atomic uint64_t item_seq;   /* the latest item handed to cpud */
    _Atomic uint64_t stale_seq;  /* an older step's item handed over as well, before the current one */
    _Atomic long wrong;          /* shares or inputs of another step seen */
    _Atomic long computed_stale; /* stale items computed */
    _Atomic long by_host;        /* steps the host's share settled */
    _Atomic int stop;
};

static uint64_t step_of(long i) { return ((uint64_t)EPOCH << 40) + 1 + (uint64_t)i; }

static bool never_gone(void *arg)
{
    (void)arg;
    return false;
}

static int gone_calls;
static bool gone_after_3(void *arg)
{
    (void)arg;
    return ++gone_calls >= 3;
}

static struct act_hdr *new_hdr(void)
{
    struct act_hdr *h = NULL;
    REQUIRE(posix_memalign((void **)&h, 64, sizeof *h) == 0, "allocate the header");
    memset(h, 0, sizeof *h);
    return h;
}

/* ---- the wait's outcomes ---- */
static void test_outcomes(void)
{
    struct act_hdr *h = new_hdr();
    atomic_store(&h->cur_epoch, EPOCH);
    struct act_item it = { .epoch = EPOCH, .seq = step_of(10), .flags = ACT_ITEM_DEV_KEY };
    atomic_store(&h->dev_seq, step_of(10));
    CHECK(act_wait_dev(h, &it, never_gone, NULL, 16), "the key of the item's step: ready");
    atomic_store(&h->dev_seq, step_of(11));
    CHECK(!act_wait_dev(h, &it, never_gone, NULL, 16), "a later step announced: this one is gone");
    /* an older session left its last key: below every step of this session, so the wait goes on
     * until gone() (the test's stand-in for "gpud died") says so */
    atomic_store(&h->dev_seq, ((uint64_t)(EPOCH - 1) << 40) + 999999);
    gone_calls = 0;
    CHECK(!act_wait_dev(h, &it, gone_after_3, NULL, 8), "an older session's key is never this step's");
    CHECK(gone_calls == 3, "gone() polled every check_every polls until it said so (%d calls)", gone_calls);
    /* an item of an older session, its step never announced, after a new session began */
    struct act_item old = { .epoch = EPOCH - 1, .seq = ((uint64_t)(EPOCH - 1) << 40) + 1000000,
                            .flags = ACT_ITEM_DEV_KEY };
    CHECK(!act_wait_dev(h, &old, never_gone, NULL, 16), "another session's item: gone");
    free(h);
}

/* ---- h's own key (the device hands h out before the predictor's masks) ---- */
static void test_h_key(void)
{
    struct act_hdr *h = new_hdr();
    atomic_store(&h->cur_epoch, EPOCH);
    struct act_item it = { .epoch = EPOCH, .seq = step_of(20), .flags = ACT_ITEM_DEV_KEY };
    atomic_store(&h->dev_seq, step_of(19));
    atomic_store(&h->dev_h_seq, step_of(20));
    CHECK(act_wait_dev_h(h, &it, never_gone, NULL, 16), "h's key of the item's step: h is there");
    gone_calls = 0;
    CHECK(!act_wait_dev(h, &it, gone_after_3, NULL, 8), "h's key alone does not announce the masks");
    atomic_store(&h->dev_seq, step_of(20));
    CHECK(act_wait_dev(h, &it, never_gone, NULL, 16), "then the masks' key");
    /* a device that writes h with the masks stores only dev_seq: it covers h */
    atomic_store(&h->dev_h_seq, step_of(12));
    CHECK(act_wait_dev_h(h, &it, never_gone, NULL, 16), "dev_seq covers h too");
    /* gpud settled this step without us and its device handed the next one's h out */
    atomic_store(&h->dev_seq, step_of(20) - 1);
    atomic_store(&h->dev_h_seq, step_of(21));
    CHECK(!act_wait_dev_h(h, &it, never_gone, NULL, 16), "a later step's h: this one is gone");
    atomic_store(&h->dev_h_seq, step_of(19));
    gone_calls = 0;
    CHECK(!act_wait_dev_h(h, &it, gone_after_3, NULL, 8), "neither key yet: waits until gone()");
    free(h);
}

/* ---- the ping-pong ---- */
static void fill(uint64_t *p, uint64_t seq, uint64_t salt)
{
    for (int i = 0; i < H_WORDS; i++)
        p[i] = seq * 131u + (uint64_t)i + salt;
}

static bool holds(const uint64_t *p, uint64_t seq, uint64_t salt)
{
    for (int i = 0; i < H_WORDS; i++)
        if (p[i] != seq * 131u + (uint64_t)i + salt)
            return false;
    return true;
}

/* The device and gpud's host in one thread: hand over the item (before the key, and now and then an
 * older step's item first), write h, store the key, then wait for the share as cuk_hand_add does;
 * every 7th step cpud is "down" and the host releases the wait with its own share. */
static void *device_main(void *arg)
{
    struct sim *s = arg;
    for (long i = 0; i < n_steps; i++) {
        const uint64_t seq = step_of(i);
        const bool cpud_down = i % 7 == 3;
        if (!cpud_down)
            atomic_store_explicit(&s->item_seq, seq, memory_order_release);
        fill(s->h, seq, 0);
        atomic_store_explicit(&s->hdr->dev_seq, seq, memory_order_release); /* the kernel's release */
        if (i > 0 && i % 5 == 0) /* an older step's item, as a restarted cpud finds it in its ring */
            atomic_store_explicit(&s->stale_seq, step_of(i - 1), memory_order_release);
        if (cpud_down) { /* the host: reads what the device wrote, computes, releases */
            if (!holds(s->h, seq, 0))
                atomic_fetch_add(&s->wrong, 1);
            fill(s->rel_y, seq, 1);
            atomic_store_explicit(&s->rel, seq, memory_order_release);
        }
        const uint64_t *src = NULL;
        while (!src) {
            if (atomic_load_explicit(&s->hdr->ycold_seq, memory_order_acquire) == seq)
                src = s->ycold;
            else if (atomic_load_explicit(&s->rel, memory_order_acquire) >= seq)
                src = s->rel_y;
        }
        if (!holds(src, seq, 1))
            atomic_fetch_add(&s->wrong, 1);
        if (src == s->rel_y)
            atomic_fetch_add(&s->by_host, 1);
    }
    atomic_store(&s->stop, 1);
    return NULL;
}

static void *cpud_main(void *arg)
{
    struct sim *s = arg;
    uint64_t done = 0;
    while (!atomic_load(&s->stop)) {
        struct act_item it = { .epoch = EPOCH, .flags = ACT_ITEM_DEV_KEY };
        const uint64_t stale = atomic_exchange(&s->stale_seq, 0);
        it.seq = stale ? stale : atomic_load_explicit(&s->item_seq, memory_order_acquire);
        if (!it.seq || it.seq == done)
            continue;
        if (!act_wait_dev(s->hdr, &it, never_gone, NULL, 1024)) {
            if (!stale && !atomic_load(&s->stop))
                atomic_fetch_add(&s->wrong, 1); /* the current step must come */
            continue;
        }
        if (stale)
            atomic_fetch_add(&s->computed_stale, 1);
        if (!holds(s->h, it.seq, 0))
            atomic_fetch_add(&s->wrong, 1);
        fill(s->ycold, it.seq, 1);
        atomic_store_explicit(&s->hdr->ycold_seq, it.seq, memory_order_release);
        done = it.seq;
    }
    return NULL;
}

static void test_ping_pong(void)
{
    struct sim *s = calloc(1, sizeof *s);
    REQUIRE(s, "allocate");
    s->hdr = new_hdr();
    atomic_store(&s->hdr->cur_epoch, EPOCH);
    atomic_store(&s->hdr->dev_seq, ((uint64_t)(EPOCH - 1) << 40) + 5); /* an older session's keys */
    atomic_store(&s->hdr->ycold_seq, ((uint64_t)(EPOCH - 1) << 40) + 5);
    pthread_t dev, cpu;
    REQUIRE(pthread_create(&cpu, NULL, cpud_main, s) == 0, "start cpud");
    REQUIRE(pthread_create(&dev, NULL, device_main, s) == 0, "start the device");
    pthread_join(dev, NULL);
    pthread_join(cpu, NULL);
    CHECK(atomic_load(&s->wrong) == 0, "%ld shares or inputs of another step were read", atomic_load(&s->wrong));
    CHECK(atomic_load(&s->computed_stale) == 0, "%ld stale items computed", atomic_load(&s->computed_stale));
    CHECK(atomic_load(&s->by_host) >= n_steps / 7, "the host's share settled %ld steps", atomic_load(&s->by_host));
    free(s->hdr);
    free(s);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--quick"))
        n_steps /= 20;
    test_outcomes();
    test_h_key();
    test_ping_pong();
    return tu_finish("test_act_dev");
}
