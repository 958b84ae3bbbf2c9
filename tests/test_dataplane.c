/* test_dataplane — the data-plane stages (gpud, cpud, predictord as real processes) against the
 * in-process engine, with a minimal supervisor in this test (spawn, reap, restart): greedy tokens
 * identical and logits within 1e-5 relative; then each stage is killed with SIGKILL in the middle
 * of a 200-token generation (and gpud and cpud once during prefill): the request completes and its
 * tokens equal the undisturbed run.
 *
 * usage: test_dataplane MODEL.gguf GPUD CPUD PREDICTORD */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "act.h"
#include "futex.h"
#include "generate.h"
#include "load.h"
#include "model.h"
#include "pi_err.h"
#include "pipeline_layout.h"
#include "shm.h"
#include "tokenizer.h"
#include "testutil.h"

#define N_CTX 512
#define N_GEN 200
#define N_BATCH 8 /* small, so that a prefill runs as several pipeline chunks */
#define KILL_AT 60
#define WAIT_S 120

static char instance[PI_INSTANCE_MAX];
static const char *bins[PI_STAGE_COUNT]; /* the data stages 1..PI_STAGE_GPUD (not apid) */
static struct pi_ctl *ctl;
static struct shm_seg ctl_seg = { .fd = -1 }, w_seg = { .fd = -1 }, act_seg = { .fd = -1 };

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void spawn(enum pi_stage s)
{
    atomic_store(&ctl->stages[s].state, PI_STAGE_STARTING);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        execl(bins[s], bins[s], "--instance", instance, (char *)NULL);
        _exit(127);
    }
    atomic_store(&ctl->stages[s].pid, pid);
}

/* The supervisor's job, reduced: reap dead stages, mark them down, start them again. */
static int reap(void)
{
    int n = 0, status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int s = 1; s <= PI_STAGE_GPUD; s++)
            if (atomic_load(&ctl->stages[s].pid) == pid) {
                atomic_store(&ctl->stages[s].state, PI_STAGE_DOWN);
                atomic_store(&ctl->stages[s].pid, 0);
                atomic_fetch_add(&ctl->stages[s].restarts, 1);
                if (atomic_load(&ctl->state) != PI_INST_STOPPING)
                    spawn((enum pi_stage)s);
                n++;
            }
    }
    return n;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { 0, ms * 1000000L };
    nanosleep(&ts, NULL);
}

static bool wait_ready(void)
{
    const uint64_t end = now_ms() + WAIT_S * 1000;
    while (now_ms() < end) {
        reap();
        bool all = true;
        for (int s = 1; s <= PI_STAGE_GPUD; s++)
            all &= atomic_load(&ctl->stages[s].state) == PI_STAGE_READY;
        if (all)
            return true;
        sleep_ms(5);
    }
    return false;
}

static void setup(const char *model)
{
    snprintf(instance, sizeof instance, "dp%d", (int)getpid());
    const size_t ctl_off = 4096;
    CHECK_OK(shm_create(&ctl_seg, instance, "ctl", PI_SEG_KIND_CTL, ctl_off + sizeof(struct pi_ctl)));
    ctl_seg.hdr->n_offsets = 1;
    ctl_seg.hdr->offsets[0] = ctl_off;
    ctl = shm_at(&ctl_seg, ctl_off, sizeof *ctl);
    snprintf(ctl->instance, sizeof ctl->instance, "%s", instance);
    snprintf(ctl->model_path, sizeof ctl->model_path, "%s", model);
    ctl->n_threads = 1;
    ctl->n_ctx = N_CTX;
    shm_publish(&ctl_seg);

    uint64_t fsize, ntens;
    CHECK_OK(loader_probe_file(model, &fsize, &ntens));
    CHECK_OK(shm_create(&w_seg, instance, "weights", PI_SEG_KIND_WEIGHTS, loader_weights_seg_bytes(fsize, ntens)));
    CHECK_OK(loader_weights_seg_init(&w_seg, fsize, ntens));
    shm_publish(&w_seg);
    struct loader_weights w;
    CHECK_OK(loader_weights_view(&w_seg, &w));
    enum loader_outcome oc;
    struct loader_progress prog = { 0 };
    CHECK_OK(loader_load(&w, model, &prog, &oc));
}

static void setup_act(const struct pi_model *m, float share)
{
    struct act_params p = { m->hp.n_layer, m->hp.n_embd, m->hp.n_ff, N_BATCH, share };
    CHECK_OK(shm_create(&act_seg, instance, "act", PI_SEG_KIND_ACT, act_seg_bytes(&p)));
    CHECK_OK(act_seg_init(&act_seg, &p));
    shm_publish(&act_seg);
}

static void teardown(void)
{
    atomic_store(&ctl->state, PI_INST_STOPPING);
    for (int s = 1; s <= PI_STAGE_GPUD; s++) {
        pid_t pid = atomic_load(&ctl->stages[s].pid);
        if (pid > 0)
            kill(pid, SIGTERM);
    }
    const uint64_t end = now_ms() + 5000;
    int alive = 3;
    while (alive > 0 && now_ms() < end) {
        alive = 0;
        reap();
        for (int s = 1; s <= PI_STAGE_GPUD; s++)
            alive += atomic_load(&ctl->stages[s].pid) > 0;
        sleep_ms(5);
    }
    CHECK(alive == 0, "%d stages did not stop on SIGTERM", alive);
    shm_detach(&act_seg);
    shm_detach(&w_seg);
    shm_detach(&ctl_seg);
    shm_remove_instance(instance);
}

/* Run one request through the pipeline; kill_stage >= 0 is SIGKILLed once n_gen reaches kill_at
 * (kill_at 0: as soon as gpud has taken the request, i.e. during prefill). */
static int run_request(const int32_t *prompt, int32_t n_prompt, int32_t n_gen, int kill_stage, int32_t kill_at,
                       const char *logits_path, int32_t *out)
{
    struct pi_request *r = &ctl->reqs[0];
    memset(r, 0, offsetof(struct pi_request, tokens));
    r->id = now_ms();
    r->temp = 0.0f;
    r->top_p = 1.0f;
    r->repeat_penalty = 1.0f;
    r->n_predict = n_gen;
    r->flags = PI_REQ_IGNORE_EOS;
    r->n_prompt = n_prompt;
    if (logits_path)
        snprintf(r->logits_path, sizeof r->logits_path, "%s", logits_path);
    memcpy(r->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    atomic_store_explicit(&r->state, PI_REQ_QUEUED, memory_order_release);
    atomic_fetch_add_explicit(&ctl->req_seq, 1, memory_order_release);
    pi_futex_wake_all(&ctl->req_seq);
    bool killed = kill_stage < 0;
    const uint64_t end = now_ms() + WAIT_S * 1000;
    uint32_t st;
    while ((st = atomic_load_explicit(&r->state, memory_order_acquire)) != PI_REQ_DONE && st != PI_REQ_FAILED &&
           now_ms() < end) {
        reap();
        if (!killed && st == PI_REQ_RUNNING && (int32_t)atomic_load(&r->n_gen) >= kill_at) {
            pid_t pid = atomic_load(&ctl->stages[kill_stage].pid);
            if (pid > 0) {
                kill(pid, SIGKILL);
                killed = true;
            }
        }
        sleep_ms(1);
    }
    if (kill_stage < 0)
        printf("pipeline: prefill %.1f ms, decode %d tokens in %.1f ms (%.1f tok/s)\n", r->prefill_ns / 1e6,
               (int)atomic_load(&r->n_gen), r->decode_ns / 1e6, atomic_load(&r->n_gen) * 1e9 / (double)r->decode_ns);
    CHECK(killed, "the stage was never killed (state %u, n_gen %u)", st, atomic_load(&r->n_gen));
    CHECK(st == PI_REQ_DONE, "request ended in state %u: %s", st, r->errmsg);
    const int32_t n = (int32_t)atomic_load(&r->n_gen);
    memcpy(out, r->tokens + n_prompt, (size_t)n * sizeof *out);
    atomic_store(&r->state, PI_REQ_FREE);
    return n;
}

struct capture {
    int32_t n;
    int32_t *ids;
    float *logits;
};

static int on_token(void *user, int32_t id, const float *logits, int32_t V)
{
    struct capture *c = user;
    c->ids[c->n] = id;
    memcpy(c->logits + (size_t)c->n * V, logits, (size_t)V * sizeof *logits);
    c->n++;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 5)
        SKIP("usage: test_dataplane MODEL GPUD CPUD PREDICTORD");
    const char *model = argv[1];
    bins[PI_STAGE_GPUD] = argv[2];
    bins[PI_STAGE_CPUD] = argv[3];
    bins[PI_STAGE_PREDICTORD] = argv[4];
    signal(SIGPIPE, SIG_IGN);

    struct pi_model *m = NULL;
    REQUIRE(model_load(&m, model) == 0, "load %s: %s", model, pi_errmsg());
    const int32_t V = m->hp.n_vocab;
    const char *text = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n";
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    CHECK_OK(tok_encode(m->tok, text, strlen(text), true, true, &prompt, &n_prompt));

    /* the in-process reference */
    struct pi_ctx *c = NULL;
    struct pi_ctx_params cp = { .n_ctx = N_CTX, .n_batch = N_BATCH, .n_threads = 1 };
    CHECK_OK(ctx_new(&c, m, &cp));
    struct capture ref = { 0 };
    ref.ids = malloc(N_GEN * sizeof(int32_t));
    ref.logits = malloc((size_t)N_GEN * V * sizeof(float));
    struct gen_params gp = { .n_predict = N_GEN, .ignore_eos = true };
    samp_defaults(&gp.samp);
    gp.samp.temp = 0.0f;
    struct gen_stats st;
    CHECK_OK(gen_run(c, m, &gp, prompt, (int32_t)n_prompt, on_token, &ref, &st));
    REQUIRE(ref.n == N_GEN, "reference generated %d tokens", ref.n);
    printf("in-process (1 thread): prefill %.1f ms, decode %d tokens in %.1f ms (%.1f tok/s)\n", st.prefill_ms, st.n_gen,
           st.decode_ms, st.n_gen * 1e3 / st.decode_ms);
    ctx_free(c);

    setup(model);
    setup_act(m, 0.5f);
    for (int s = 1; s <= PI_STAGE_GPUD; s++)
        spawn((enum pi_stage)s);
    REQUIRE(wait_ready(), "stages did not become ready");

    int32_t *out = malloc(PI_REQ_MAX_TOKENS * sizeof *out);
    char lpath[] = "/tmp/pinfer-dp-logitsXXXXXX";
    int lfd = mkstemp(lpath);
    REQUIRE(lfd >= 0, "mkstemp");
    close(lfd);

    /* undisturbed: same tokens, logits within 1e-5 */
    int32_t n = run_request(prompt, (int32_t)n_prompt, N_GEN, -1, 0, lpath, out);
    CHECK(n == N_GEN && !memcmp(out, ref.ids, (size_t)N_GEN * sizeof *out), "pipeline tokens differ from in-process");
    FILE *lf = fopen(lpath, "rb");
    float *row = malloc((size_t)V * sizeof *row);
    double worst = 0.0;
    for (int i = 0; lf && i < N_GEN; i++) {
        if (fread(row, sizeof(float), (size_t)V, lf) != (size_t)V) {
            CHECK(0, "logits file has only %d rows", i);
            break;
        }
        double md = 0, mr = 0;
        for (int32_t k = 0; k < V; k++) {
            md = fmax(md, fabs((double)row[k] - ref.logits[(size_t)i * V + k]));
            mr = fmax(mr, fabs((double)ref.logits[(size_t)i * V + k]));
        }
        worst = fmax(worst, md / mr);
    }
    if (lf)
        fclose(lf);
    CHECK(worst < 1e-5, "pipeline logits differ from in-process by %.3g (relative)", worst);
    printf("undisturbed: %d tokens identical, logits max rel diff %.3g\n", n, worst);
    unlink(lpath);

    struct {
        enum pi_stage s;
        int32_t at;
        const char *what;
    } kills[] = {
        { PI_STAGE_CPUD, KILL_AT, "cpud mid-decode" },
        { PI_STAGE_PREDICTORD, KILL_AT, "predictord mid-decode" },
        { PI_STAGE_GPUD, KILL_AT, "gpud mid-decode" },
        { PI_STAGE_GPUD, 0, "gpud during prefill" },
        { PI_STAGE_CPUD, 0, "cpud during prefill" },
    };
    for (size_t k = 0; k < sizeof kills / sizeof kills[0]; k++) {
        const uint32_t before = atomic_load(&ctl->stages[kills[k].s].restarts);
        n = run_request(prompt, (int32_t)n_prompt, N_GEN, kills[k].s, kills[k].at, NULL, out);
        bool same = n == N_GEN && !memcmp(out, ref.ids, (size_t)N_GEN * sizeof *out);
        CHECK(same, "%s: tokens differ from the undisturbed run (%d generated)", kills[k].what, n);
        CHECK(atomic_load(&ctl->stages[kills[k].s].restarts) == before + 1, "%s: the stage was not restarted",
              kills[k].what);
        printf("%s: %s\n", kills[k].what, same ? "identical" : "DIFFERENT");
        REQUIRE(wait_ready(), "stages did not come back after killing %s", kills[k].what);
    }
    printf("gpud fallbacks %llu, stale results dropped: gpud %llu cpud %llu predictord %llu\n",
           (unsigned long long)atomic_load(&ctl->stages[PI_STAGE_GPUD].fallbacks),
           (unsigned long long)atomic_load(&ctl->stages[PI_STAGE_GPUD].stale_dropped),
           (unsigned long long)atomic_load(&ctl->stages[PI_STAGE_CPUD].stale_dropped),
           (unsigned long long)atomic_load(&ctl->stages[PI_STAGE_PREDICTORD].stale_dropped));

    teardown();
    free(row);
    free(out);
    free(prompt);
    free(ref.ids);
    free(ref.logits);
    model_free(m);
    return tu_finish("dataplane");
}
