/* pictl.h — the subcommands of pictl. Each takes argv from its own name on and returns the process
 * exit code; only main() exits. */
#ifndef PI_PICTL_H
#define PI_PICTL_H

int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);

/* Print "pictl CMD: <what>: <pi_strerror>: <detail>" to stderr; returns exit code 1. */
int pictl_error(const char *cmd, const char *what, int rc);

#endif
