/* apid — the HTTP front door stage (see apid.h). main only parses the settings, builds the context
 * and runs the loop. */
#include <stdio.h>

#include "apid.h"
#include "pi_err.h"
#include "stage.h"

int main(int argc, char **argv)
{
    static struct apid a;
    char instance[PI_INSTANCE_MAX];
    int rc = apid_config_parse(&a.cfg, instance, sizeof instance, argc, argv);
    if (rc > 0)
        return 0;
    if (rc) {
        fprintf(stderr, "apid: %s: %s\n", pi_strerror(rc), pi_errmsg());
        return stage_start_exit_status(rc);
    }
    rc = apid_run(&a, instance);
    /* a start that failed on its settings (the address: in use, not this machine's) would fail again */
    return !rc ? 0 : a.listened ? 1 : stage_start_exit_status(rc);
}
