/* gpud — the executor stage (see gpud.h). main only builds the context and runs the loop. */
#include <stdio.h>

#include "gpud.h"
#include "pi_err.h"
#include "stage.h"

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
        return stage_start_exit_status(rc);
    }
    rc = gpud_run(&g);
    gpud_log_step_time(&g);
    if (rc)
        stage_fail(&g.rt, rc, "serve");
    gpud_fini(&g);
    return rc ? 1 : 0;
}
