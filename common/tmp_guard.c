/* tmp_guard.c — see tmp_guard.h. The handler only calls unlink, sigaction and raise, which are
 * async-signal-safe; a slot's name is written before the slot is marked used (release), and read
 * by the handler only once marked (acquire), so a signal between the two sees no half name. */
#include "tmp_guard.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

static const int guarded_signals[] = { SIGINT, SIGTERM, SIGHUP };

static char slot_path[TMP_GUARD_SLOTS][TMP_GUARD_PATH_MAX];
static atomic_int slot_used[TMP_GUARD_SLOTS];
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER; /* between adders claiming a free slot */

static void on_fatal_signal(int sig)
{
    for (int i = 0; i < TMP_GUARD_SLOTS; i++)
        if (atomic_load_explicit(&slot_used[i], memory_order_acquire))
            unlink(slot_path[i]);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig); /* delivered when the handler returns: the process ends as the signal meant */
}

/* Install the handler for each guarded signal whose action is still the default (once). */
static void install_handlers(void)
{
    for (size_t i = 0; i < sizeof guarded_signals / sizeof *guarded_signals; i++) {
        struct sigaction old;
        if (sigaction(guarded_signals[i], NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) ||
            old.sa_handler != SIG_DFL)
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_signal;
        sigfillset(&sa.sa_mask); /* one handler run at a time */
        sigaction(guarded_signals[i], &sa, NULL);
    }
}

int tmp_guard_add(const char *path)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    const size_t len = strlen(path);
    if (len >= TMP_GUARD_PATH_MAX)
        return -1;
    pthread_once(&once, install_handlers);
    int slot = -1;
    pthread_mutex_lock(&slot_lock);
    for (int i = 0; i < TMP_GUARD_SLOTS && slot < 0; i++)
        if (!atomic_load_explicit(&slot_used[i], memory_order_relaxed)) {
            memcpy(slot_path[i], path, len + 1);
            atomic_store_explicit(&slot_used[i], 1, memory_order_release);
            slot = i;
        }
    pthread_mutex_unlock(&slot_lock);
    return slot;
}

void tmp_guard_drop(int slot)
{
    if (slot < 0 || slot >= TMP_GUARD_SLOTS)
        return;
    /* only its owner drops a slot, and an adder claims only a free one: no lock needed here */
    atomic_store_explicit(&slot_used[slot], 0, memory_order_release);
}
