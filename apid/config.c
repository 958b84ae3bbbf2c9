/* config.c — apid's settings: defaults, then <runtime dir>/apid.json (pictl start --http writes it),
 * then flags. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apid.h"
#include "instance.h"
#include "pi_err.h"

#ifndef PI_APID_WEB_DIR
#define PI_APID_WEB_DIR "apid/web"
#endif

static int parse_listen(struct apid_config *c, const char *s)
{
    /* HOST:PORT, the host may be [v6]; the last ':' separates the port */
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        return pi_fail(PI_E_INVAL, "listen address '%s' is not HOST:PORT", s);
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || port < 1 || port > 65535)
        return pi_fail(PI_E_INVAL, "listen address '%s': the port must be 1..65535", s);
    size_t hl = (size_t)(colon - s);
    if (s[0] == '[' && hl >= 2 && s[hl - 1] == ']') {
        s++;
        hl -= 2;
    }
    if (hl >= sizeof c->host)
        return pi_fail(PI_E_INVAL, "listen address '%s': host too long", s);
    memcpy(c->host, s, hl);
    c->host[hl] = '\0';
    c->port = (int)port;
    return 0;
}

static int set_str(char *dst, size_t cap, const char *v, const char *what)
{
    if (strlen(v) >= cap)
        return pi_fail(PI_E_INVAL, "%s is longer than %zu bytes", what, cap - 1);
    snprintf(dst, cap, "%s", v);
    return 0;
}

static int read_key_file(struct apid_config *c, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return pi_fail(errno, "cannot open the API key file '%s': %s", path, strerror(errno));
    char line[sizeof c->api_key];
    bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[ok ? strcspn(line, "\r\n") : 0] = '\0';
    if (!line[0])
        return pi_fail(PI_E_INVAL, "the API key file '%s' holds no key", path);
    return set_str(c->api_key, sizeof c->api_key, line, "the API key");
}

static int load_file(struct apid_config *c, const char *path, bool must_exist)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
        if (!must_exist && access(path, F_OK) != 0)
            return 0;
        return pi_fail(PI_E_FORMAT, "%s: %s (line %d)", path, je.text, je.line);
    }
    int rc = 0;
    const char *key;
    json_t *v;
    json_object_foreach(j, key, v) {
        if (!strcmp(key, "listen") && json_is_string(v))
            rc = parse_listen(c, json_string_value(v));
        else if (!strcmp(key, "api_key") && json_is_string(v))
            rc = set_str(c->api_key, sizeof c->api_key, json_string_value(v), "api_key");
        else if (!strcmp(key, "chat_template") && json_is_string(v))
            rc = set_str(c->chat_template, sizeof c->chat_template, json_string_value(v), "chat_template");
        else if (!strcmp(key, "model_alias") && json_is_string(v))
            rc = set_str(c->model_alias, sizeof c->model_alias, json_string_value(v), "model_alias");
        else if (!strcmp(key, "web_dir") && json_is_string(v))
            rc = set_str(c->web_dir, sizeof c->web_dir, json_string_value(v), "web_dir");
        else if (!strcmp(key, "max_queue") && json_is_integer(v) && json_integer_value(v) > 0)
            c->max_queue = (int)json_integer_value(v);
        else if (!strcmp(key, "timeout_s") && json_is_integer(v) && json_integer_value(v) > 0)
            c->timeout_s = (int)json_integer_value(v);
        else if (!strcmp(key, "max_body") && json_is_integer(v) && json_integer_value(v) > 0)
            c->max_body = (size_t)json_integer_value(v);
        else
            rc = pi_fail(PI_E_INVAL, "%s: unknown or invalid setting '%s'", path, key);
        if (rc)
            break;
    }
    json_decref(j);
    return rc;
}

static void usage(void)
{
    printf("usage: apid --instance NAME [options]   (started by the supervisor: pictl start --http HOST:PORT)\n"
           "  --listen HOST:PORT     address to serve (default %s:%d)\n"
           "  --api-key-file FILE    require 'Authorization: Bearer KEY' (KEY: the file's first line)\n"
           "  --chat-template NAME   %s (default: from the model)\n"
           "  --max-queue N          completion requests accepted at once (default %d; more get 429)\n"
           "  --timeout S            per-request limit in seconds (default %d)\n"
           "  --max-body BYTES       largest request body (default %u)\n"
           "  --web-dir DIR          the web page's files\n"
           "  --model-alias NAME     another name clients may use for the model\n"
           "  --config FILE          settings file (default: <runtime dir>/%s when present)\n",
           APID_DEFAULT_HOST, APID_DEFAULT_PORT, chat_family_list(), APID_DEFAULT_MAX_QUEUE, APID_DEFAULT_TIMEOUT_S,
           APID_DEFAULT_MAX_BODY, INST_APID_CONFIG);
}

static long num_arg(const char *flag, const char *s, long lo, long hi, int *err)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        *err = pi_fail(PI_E_INVAL, "%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, s);
        return lo;
    }
    return v;
}

/* 0: parsed; 1: --help; negative: error (message recorded). */
int apid_config_parse(struct apid_config *c, char *instance, size_t icap, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    snprintf(c->host, sizeof c->host, "%s", APID_DEFAULT_HOST);
    c->port = APID_DEFAULT_PORT;
    c->max_queue = APID_DEFAULT_MAX_QUEUE;
    c->timeout_s = APID_DEFAULT_TIMEOUT_S;
    c->max_body = APID_DEFAULT_MAX_BODY;
    const char *env_web = getenv("PINFER_WEB_DIR");
    snprintf(c->web_dir, sizeof c->web_dir, "%s", env_web ? env_web : PI_APID_WEB_DIR);
    enum { O_INSTANCE = 1000, O_LISTEN, O_KEYFILE, O_TEMPLATE, O_QUEUE, O_TIMEOUT, O_BODY, O_WEB, O_ALIAS, O_CONFIG };
    static const struct option longs[] = {
        { "instance", required_argument, NULL, O_INSTANCE }, { "listen", required_argument, NULL, O_LISTEN },
        { "api-key-file", required_argument, NULL, O_KEYFILE }, { "chat-template", required_argument, NULL, O_TEMPLATE },
        { "max-queue", required_argument, NULL, O_QUEUE },   { "timeout", required_argument, NULL, O_TIMEOUT },
        { "max-body", required_argument, NULL, O_BODY },     { "web-dir", required_argument, NULL, O_WEB },
        { "model-alias", required_argument, NULL, O_ALIAS }, { "config", required_argument, NULL, O_CONFIG },
        { "help", no_argument, NULL, 'h' },                  { NULL, 0, NULL, 0 },
    };
    /* two passes: the instance and the settings file first, then the flags override the file */
    const char *config = NULL;
    int opt, rc = 0;
    instance[0] = '\0';
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
        if (opt == 'h') {
            usage();
            return 1;
        }
        if (opt == O_INSTANCE && (rc = set_str(instance, icap, optarg, "--instance")))
            return rc;
        if (opt == O_CONFIG)
            config = optarg;
        if (opt == '?')
            return pi_fail(PI_E_INVAL, "unknown or incomplete option '%s' (see --help)", argv[optind - 1]);
    }
    if (optind < argc)
        return pi_fail(PI_E_INVAL, "unexpected argument '%s'", argv[optind]);
    if (!instance[0])
        return pi_fail(PI_E_INVAL, "--instance NAME is required");
    if ((rc = inst_check_name(instance)))
        return rc;
    char path[INST_PATH_MAX];
    if (config)
        rc = load_file(c, config, true);
    else if ((rc = inst_path(instance, INST_APID_CONFIG, path, sizeof path)) == 0)
        rc = load_file(c, path, false);
    if (rc)
        return rc;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longs, NULL)) != -1 && !rc) {
        switch (opt) {
        case O_LISTEN: rc = parse_listen(c, optarg); break;
        case O_KEYFILE: rc = read_key_file(c, optarg); break;
        case O_TEMPLATE: rc = set_str(c->chat_template, sizeof c->chat_template, optarg, "--chat-template"); break;
        case O_QUEUE: c->max_queue = (int)num_arg("--max-queue", optarg, 1, 1 << 20, &rc); break;
        case O_TIMEOUT: c->timeout_s = (int)num_arg("--timeout", optarg, 1, 1 << 24, &rc); break;
        case O_BODY: c->max_body = (size_t)num_arg("--max-body", optarg, 1024, 1L << 30, &rc); break;
        case O_WEB: rc = set_str(c->web_dir, sizeof c->web_dir, optarg, "--web-dir"); break;
        case O_ALIAS: rc = set_str(c->model_alias, sizeof c->model_alias, optarg, "--model-alias"); break;
        default: break;
        }
    }
    if (!rc && c->chat_template[0] && chat_family_from_name(c->chat_template) < 0)
        rc = pi_fail(PI_E_INVAL, "unknown chat template '%s' (one of %s)", c->chat_template, chat_family_list());
    return rc;
}
