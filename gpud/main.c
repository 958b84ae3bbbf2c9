/* gpud — the executor stage (see gpud.h). main only builds the context and runs the loop. */
#include <stdio.h>

#include "gpud.h"
#include "pi_err.h"

int main(int argc, char **argv)
{
    struct gpud g;
    int rc = gpud_init(&g, argc, argv);
    if (rc) {
        if (g.rt.me)
            stage_fail(&g.rt, rc, "start");
        else
            fprintf(stderr, "gpud: %s: %s\n", pi_strerror(rc), pi_errmsg());
        gpud_fini(&g);
        return 1;
    }
    rc = gpud_run(&g);
    gpud_log_step_time(&g);
    if (rc)
        stage_fail(&g.rt, rc, "serve");
    gpud_fini(&g);
    return rc ? 1 : 0;
}
