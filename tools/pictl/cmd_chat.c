/* pictl chat — an interactive chat in the terminal, on apid's chat templates (apid/chat_template.h),
 * with a running instance (--name) or an ephemeral one (-m MODEL). Each turn renders the whole
 * history with the model's template and streams the reply through supervisor/client.h; the reply
 * ends at the template's end-of-turn token. Ctrl-C during a reply stops it (the turn keeps what
 * was shown); Ctrl-C or Ctrl-D at the prompt leaves. /reset forgets the history, /exit leaves.
 * Lines read from a pipe are user turns too (scripts and tests). */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat_template.h"
#include "client.h"
#include "gguf.h"
#include "instance.h"
#include "model.h"
#include "pi_err.h"
#include "pictl.h"
#include "supervisor.h"
#include "textout.h"
#include "tokenizer.h"

#define CHAT_DEFAULT_N 256
#define CHAT_LINE_MAX 8192
#define CHAT_MAX_TURNS 256
#define CHAT_WAIT_MS 100
#define CHAT_CTX 2048

static volatile sig_atomic_t chat_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    chat_interrupted = 1;
}

struct chat {
    struct pic_conn conn;
    struct pi_model *m;
    enum chat_family fam;
    int32_t eot;
    struct chat_msg msgs[CHAT_MAX_TURNS];
    size_t n;
    json_t *fields; /* sampling fields of every generate */
    bool tty;
};

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d) {
        fputs("pictl chat: out of memory\n", stderr);
        exit(1);
    }
    return d;
}

/* One reply to the history; appended as the assistant's turn. */
static int reply(struct chat *c, int n_predict)
{
    char *prompt = NULL;
    int rc = chat_render(c->fam, c->msgs, c->n, &prompt);
    if (rc)
        return rc;
    json_t *req = json_deep_copy(c->fields);
    json_object_set_new(req, "prompt", json_string(prompt));
    json_object_set_new(req, "n_predict", json_integer(n_predict));
    json_object_set_new(req, "client_pid", json_integer(getpid()));
    free(prompt);
    struct pic_stream st;
    rc = pic_generate(&c->conn, req, &st);
    json_decref(req);
    if (rc)
        return rc;
    struct textout out;
    textout_init(&out);
    uint32_t seen = 0, n = 0;
    bool ended = false, engine_done = false;
    chat_interrupted = 0;
    while (!ended) {
        int w = pic_wait(&st, &n, CHAT_WAIT_MS);
        if (w < 0 && w != -EINTR) {
            rc = w;
            break;
        }
        engine_done = w == PIC_DONE;
        for (; seen < n && !ended; seen++) {
            const int32_t t = pic_token(&st, seen);
            if (t == c->eot || tok_is_eog(c->m->tok, t)) {
                ended = true;
                break;
            }
            char piece[256];
            int len = tok_piece(c->m->tok, t, false, piece, sizeof piece);
            if (len > 0)
                textout_push(&out, piece, (size_t)len < sizeof piece ? (size_t)len : sizeof piece);
        }
        const char *chunk;
        size_t k = textout_take(&out, false, &chunk);
        fwrite(chunk, 1, k, stdout);
        fflush(stdout);
        if (engine_done)
            ended = true;
        if (chat_interrupted) {
            ended = true;
            if (c->tty)
                fputs(" [stopped]", stdout);
        }
    }
    const char *chunk;
    size_t k = textout_take(&out, true, &chunk);
    fwrite(chunk, 1, k, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    if (c->n < CHAT_MAX_TURNS)
        c->msgs[c->n++] = (struct chat_msg){ .role = "assistant", .content = xstrdup(textout_text(&out)) };
    textout_fini(&out);
    int rrc = engine_done ? pic_release(&st) : pic_abandon(&st, 600000);
    return rc ? rc : rrc;
}

static void choose_template(struct chat *c, const char *override)
{
    const char *jinja = NULL;
    (void)gguf_get_str(c->m->gguf, "tokenizer.chat_template", &jinja);
    int f = override ? chat_family_from_name(override) : chat_family_detect(jinja);
    if (f < 0) {
        f = CHAT_CHATML;
        fprintf(stderr, "pictl chat: warning: %s; using chatml (choose one with --chat-template)\n",
                jinja ? "the model's chat template is not recognised" : "the model has no chat template");
    }
    c->fam = (enum chat_family)f;
    const char *eot = chat_family_eot(c->fam);
    c->eot = tok_lookup(c->m->tok, eot, strlen(eot));
}

static void reset(struct chat *c, const char *system)
{
    for (size_t i = 0; i < c->n; i++)
        free((char *)c->msgs[i].content);
    c->n = 0;
    if (system)
        c->msgs[c->n++] = (struct chat_msg){ .role = "system", .content = xstrdup(system) };
}

static int chat_loop(const char *name, const char *template_name, const char *system, int n_predict, json_t *fields)
{
    struct chat c = { .fields = fields, .tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO) };
    int rc = pic_open(&c.conn, name);
    if (rc)
        return rc;
    if ((rc = model_load(&c.m, c.conn.ctl->model_path)))
        goto out;
    choose_template(&c, template_name);
    reset(&c, system);
    if (c.tty)
        fprintf(stderr, "pictl chat: %s (template %s); /reset, /exit, Ctrl-C stops a reply\n", c.m->name,
                chat_family_name(c.fam));
    char *line = malloc(CHAT_LINE_MAX);
    if (!line) {
        rc = pi_fail(PI_E_NOMEM, "chat: out of memory");
        goto out;
    }
    for (;;) {
        if (c.tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        chat_interrupted = 0;
        if (!fgets(line, CHAT_LINE_MAX, stdin))
            break; /* EOF, or Ctrl-C at the prompt (EINTR) */
        line[strcspn(line, "\n")] = '\0';
        if (!strcmp(line, "/exit"))
            break;
        if (!strcmp(line, "/reset")) {
            reset(&c, system);
            continue;
        }
        if (!line[0])
            continue;
        if (c.n + 2 > CHAT_MAX_TURNS) {
            fputs("pictl chat: the history is full (/reset)\n", stderr);
            continue;
        }
        c.msgs[c.n++] = (struct chat_msg){ .role = "user", .content = xstrdup(line) };
        if ((rc = reply(&c, n_predict))) {
            pictl_error("chat", "reply", rc);
            c.n--; /* the turn failed: forget it */
            free((char *)c.msgs[c.n].content);
            rc = 0;
        }
    }
    free(line);
    reset(&c, NULL);
out:
    model_free(c.m);
    pic_close(&c.conn);
    return rc;
}

static void chat_usage(void)
{
    printf("usage: pictl chat [--name NAME | -m MODEL] [options]   (an interactive chat)\n"
           "  --name NAME              a running instance (default %s)\n"
           "  -m, --model FILE         start an ephemeral instance of this model instead\n"
           "  --system TEXT            system message\n"
           "  --chat-template NAME     %s (default: from the model)\n"
           "  -n N                     most tokens per reply (default %d)\n"
           "  --temp T, --top-k K, --top-p P, --seed S   sampling (the engine's defaults otherwise)\n"
           "  -t N, -c N               threads and context of an ephemeral instance\n",
           INST_DEFAULT_NAME, chat_family_list(), CHAT_DEFAULT_N);
}

int cmd_chat(int argc, char **argv)
{
    enum { O_NAME = 1000, O_SYSTEM, O_TEMPLATE, O_TEMP, O_TOPK, O_TOPP, O_SEED };
    static const struct option longs[] = {
        { "name", required_argument, NULL, O_NAME },         { "model", required_argument, NULL, 'm' },
        { "system", required_argument, NULL, O_SYSTEM },     { "chat-template", required_argument, NULL, O_TEMPLATE },
        { "temp", required_argument, NULL, O_TEMP },         { "top-k", required_argument, NULL, O_TOPK },
        { "top-p", required_argument, NULL, O_TOPP },        { "seed", required_argument, NULL, O_SEED },
        { "help", no_argument, NULL, 'h' },                  { NULL, 0, NULL, 0 },
    };
    const char *name = INST_DEFAULT_NAME, *model = NULL, *system = NULL, *tmpl = NULL;
    int n_predict = CHAT_DEFAULT_N, threads = 0, ctx = CHAT_CTX, opt;
    json_t *fields = json_object();
    optind = 1;
    while ((opt = getopt_long(argc, argv, "m:n:t:c:h", longs, NULL)) != -1) {
        switch (opt) {
        case O_NAME: name = optarg; break;
        case 'm': model = optarg; break;
        case O_SYSTEM: system = optarg; break;
        case O_TEMPLATE: tmpl = optarg; break;
        case 'n': n_predict = atoi(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'c': ctx = atoi(optarg); break;
        case O_TEMP: json_object_set_new(fields, "temp", json_real(atof(optarg))); break;
        case O_TOPK: json_object_set_new(fields, "top_k", json_integer(atoi(optarg))); break;
        case O_TOPP: json_object_set_new(fields, "top_p", json_real(atof(optarg))); break;
        case O_SEED: json_object_set_new(fields, "seed", json_string(optarg)); break;
        case 'h': chat_usage(); json_decref(fields); return 0;
        default: json_decref(fields); fprintf(stderr, "pictl chat: see --help\n"); return 2;
        }
    }
    if (n_predict < 1 || (tmpl && chat_family_from_name(tmpl) < 0)) {
        fprintf(stderr, "pictl chat: -n must be >= 1 and --chat-template one of %s\n", chat_family_list());
        json_decref(fields);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: fgets and the futex wait return */
    sigaction(SIGINT, &sa, NULL);
    char eph[PI_INSTANCE_MAX];
    int rc = 0;
    if (model) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(eph, sizeof eph, "chat%d", (int)getpid());
        struct start_opts so = { .name = eph, .model = model, .n_threads = threads > 0 ? threads : (int32_t)(ncpu > 0 ? ncpu : 1),
                                 .n_ctx = ctx, .gpu_ffn_share = SUP_DEFAULT_GPU_FFN_SHARE, .vram_budget_gib = -1.0, .n_gpu_layers = -1,
                                 .quiet = true, .owner_pid = getpid() };
        if ((rc = inst_start(&so))) {
            json_decref(fields);
            return pictl_error("chat", model, rc);
        }
        name = eph;
    }
    rc = chat_loop(name, tmpl, system, n_predict, fields);
    if (model) {
        inst_stop(eph);
        inst_remove_dir(eph);
    }
    json_decref(fields);
    return rc ? pictl_error("chat", name, rc) : 0;
}
