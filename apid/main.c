/* apid — the HTTP front door stage (see apid.h). main only parses the settings, builds the context
 * and runs the loop. */
#include <stdio.h>

#include "apid.h"
#include "pi_err.h"
#include "stage.h"

/* A settings error comes before the stage attaches: attach now (where the instance is known) to
 * leave it in last_error, so that the failed start says what was wrong, not only the exit status. */
static void record_start_error(const char *instance, int rc)
{
    if (!instance[0])
        return;
    char msg[PI_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", pi_errmsg());
    char *sargv[] = { "apid", "--instance", (char *)instance, NULL };
    struct stage_rt rt;
    if (stage_init(&rt, PI_STAGE_APID, 3, sargv))
        return;
    pi_set_errmsg("%s", msg);
    stage_fail(&rt, rc, "settings");
    stage_fini(&rt);
}

int main(int argc, char **argv)
{
    static struct apid a;
    char instance[PI_INSTANCE_MAX];
    int rc = apid_config_parse(&a.cfg, instance, sizeof instance, argc, argv);
    if (rc > 0)
        return 0;
    if (rc) {
        fprintf(stderr, "apid: %s: %s\n", pi_strerror(rc), pi_errmsg());
        record_start_error(instance, rc);
        return stage_start_exit_status(rc);
    }
    rc = apid_run(&a, instance);
    /* a start that failed on its settings (the address: in use, not this machine's) would fail again */
    return !rc ? 0 : a.listened ? 1 : stage_start_exit_status(rc);
}
