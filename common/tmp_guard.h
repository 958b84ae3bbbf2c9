/* tmp_guard.h — remove a command's half-written PATH.tmp when SIGINT, SIGTERM or SIGHUP ends it.
 *
 * Writers that build a file under PATH.tmp and rename it over PATH at the end (the GGUF writer,
 * bundles, convert's intermediate F16) register the temporary name while it exists. If one of those
 * signals then arrives with its default action, the handler unlinks every registered name and
 * re-raises the signal, so the process still dies of it (the shell sees 130 for ^C) but leaves no
 * partial file. A process that handles these signals itself (the stages, pictl run) keeps its own
 * handlers: they are only installed where the action is still the default. */
#ifndef PI_TMP_GUARD_H
#define PI_TMP_GUARD_H

#define TMP_GUARD_SLOTS 8     /* names alive at once, per process */
#define TMP_GUARD_PATH_MAX 4096

/* Register path (copied). Returns a slot >= 0 for tmp_guard_drop, or -1 when the name is too long
 * or every slot is taken: the file is then simply not guarded (never an error for the writer). */
int tmp_guard_add(const char *path);

/* Forget slot (a negative slot is ignored): the file was renamed or removed. */
void tmp_guard_drop(int slot);

#endif
