/* fuzz_util.h — what the fuzz targets share: a checked assertion that aborts (libFuzzer reports
 * the input), a private scratch directory for parsers that read files, and splitting one input
 * into several files.
 *
 * Each target defines LLVMFuzzerTestOneInput (and, when it has set-up, LLVMFuzzerInitialize). A
 * target must be deterministic and must free everything it allocates: a leak is a finding. */
#ifndef PI_FUZZ_UTIL_H
#define PI_FUZZ_UTIL_H

#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* An oracle failed: the library accepted something it documents as refused, or returned values
 * that contradict each other. abort() makes libFuzzer save the input as a crash. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A scratch directory of this process, removed at exit (tmpfs when there is one: the file targets
 * write one file per input). */
static char fuzz_dir[256];

static inline void fuzz_dir_remove(void)
{
    char cmd[300];
    if (fuzz_dir[0] && snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir) < (int)sizeof cmd && system(cmd) != 0)
        fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir);
}

static inline const char *fuzz_scratch_dir(void)
{
    if (!fuzz_dir[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(fuzz_dir, sizeof fuzz_dir, "%s/pinfer-fuzz-XXXXXX", base);
        if (!mkdtemp(fuzz_dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir;
}

/* Write (or, with data NULL, remove) fuzz_scratch_dir()/name; the path is returned in a static
 * buffer of the caller's choice. */
static inline void fuzz_put_file(const char *name, const uint8_t *data, size_t size, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", fuzz_scratch_dir(), name);
    if (!data) {
        unlink(path);
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror("fuzz: open");
        abort();
    }
    for (size_t off = 0; off < size;) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) {
            perror("fuzz: write");
            abort();
        }
        off += (size_t)n;
    }
    close(fd);
}

/* Cut an input into up to max_parts pieces at FUZZ_SEP (a line of its own, unlikely in real files
 * and easy for the mutator to copy: it is in the targets' dictionaries). Returns the count. */
#define FUZZ_SEP "\n#--next-file--\n"

struct fuzz_part {
    const uint8_t *data;
    size_t size;
};

static inline size_t fuzz_split(const uint8_t *data, size_t size, struct fuzz_part *parts, size_t max_parts)
{
    const size_t sep_len = sizeof FUZZ_SEP - 1;
    size_t n = 0, start = 0;
    while (n + 1 < max_parts) {
        const uint8_t *hit = size - start >= sep_len ? memmem(data + start, size - start, FUZZ_SEP, sep_len) : NULL;
        if (!hit)
            break;
        parts[n++] = (struct fuzz_part){ data + start, (size_t)(hit - (data + start)) };
        start = (size_t)(hit - data) + sep_len;
    }
    parts[n++] = (struct fuzz_part){ data + start, size - start };
    return n;
}

#endif
