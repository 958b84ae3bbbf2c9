/* apid — the HTTP front door stage (see apid.h). main only parses the settings, builds the context
 * and runs the loop. */
#include <stdio.h>

#include "apid.h"
#include "pi_err.h"

int main(int argc, char **argv)
{
    static struct apid a;
    char instance[PI_INSTANCE_MAX];
    int rc = apid_config_parse(&a.cfg, instance, sizeof instance, argc, argv);
    if (rc > 0)
        return 0;
    if (rc) {
        fprintf(stderr, "apid: %s: %s\n", pi_strerror(rc), pi_errmsg());
        return 2;
    }
    rc = apid_run(&a, instance);
    return rc ? 1 : 0;
}
