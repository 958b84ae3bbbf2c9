/* shm.h — named POSIX shared-memory segments, private to one user and one instance.
 *
 * A segment is named /pinfer-<uid>-<instance>-<segment> (uid = geteuid()). instance is
 * [A-Za-z0-9_]{1,SHM_PART_MAX} — no '-', so that the prefix /pinfer-<uid>-<instance>- of one
 * instance can never match another instance's segments ("a" vs "a-b") when a supervisor removes
 * leftovers; segment is [A-Za-z0-9_-]{1,SHM_PART_MAX}. The object has mode 0600 and starts with a
 * struct pi_seg_header (ipc/layout.h).
 *
 * Lifecycle (creator):  shm_create -> fill offsets and contents -> shm_publish -> ... ->
 *                       shm_detach, shm_remove (on stop; the supervisor also removes leftovers of
 *                       a dead instance with shm_remove_instance).
 * Lifecycle (others):   shm_attach -> ... -> shm_detach. attach returns -EAGAIN while the creator
 *                       has not published the segment yet.
 *
 * All functions return 0 or a negative code (-errno, -PI_E_*) and record a message naming the
 * segment (pi_errmsg). */
#ifndef PI_IPC_SHM_H
#define PI_IPC_SHM_H

#include "layout.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SHM_PART_MAX 32   /* longest instance or segment name */
#define SHM_NAME_CAP 96   /* "/pinfer-" + uid (10 digits) + 2 names + separators + NUL fits */
#define SHM_DIR "/dev/shm" /* where Linux (glibc) keeps POSIX shm objects, for the leftover scan */

/* A mapped segment, process-local (never put this struct in shared memory). */
struct shm_seg {
    char name[SHM_NAME_CAP];
    int fd;                      /* kept open: fchmod/fstat later, and it pins the object */
    void *base;                  /* mapping of the whole object; base == (void *)hdr */
    size_t size;
    struct pi_seg_header *hdr;
};

/* Flags of shm_attach. */
#define SHM_ATTACH_RDONLY 1u     /* map read-only (e.g. weights a stage must not modify) */

/* Build /pinfer-<uid>-<instance>-<segment> into buf (validating both names). */
int shm_name(char *buf, size_t cap, uid_t uid, const char *instance, const char *segment);

/* Create a new segment of `size` bytes (>= sizeof(struct pi_seg_header)): exclusive (-EEXIST if
 * it exists), mode 0600 regardless of umask, storage allocated up front (a full /dev/shm gives
 * -ENOSPC here, not SIGBUS later), zero-filled, header written with magic 0 (unpublished),
 * version, size and kind. On failure nothing is left behind. */
int shm_create(struct shm_seg *seg, const char *instance, const char *segment, uint32_t kind, size_t size);

/* The same, except that only the first SHM_HDR_PAGE bytes (the header's page) are allocated: the
 * rest is a hole until the creator allocates the ranges it wants with shm_allocate (a range never
 * allocated costs no memory as long as nobody touches it; touching it allocates then, and on a full
 * /dev/shm that is SIGBUS). For a segment most of which stays unused (the weights segment under a
 * RAM budget: the FFN rows live on disk). */
#define SHM_HDR_PAGE 4096u
int shm_create_lazy(struct shm_seg *seg, const char *instance, const char *segment, uint32_t kind, size_t size);
/* Allocate [off, off + len) of a segment this process created (posix_fallocate: -ENOSPC on a full
 * /dev/shm). */
int shm_allocate(struct shm_seg *seg, uint64_t off, uint64_t len);

/* Make the segment visible to shm_attach: release-store of the magic, after the creator wrote the
 * header's offsets and the contents (pairs with the acquire load of the magic in shm_attach). */
void shm_publish(struct shm_seg *seg);

/* Attach to an existing segment of this user. Refuses (-EACCES) an object owned by another user
 * or with group/other permission bits; refuses (-PI_E_FORMAT, naming the field) a wrong magic,
 * version, size (must be >= the header and equal header.size), kind (unless `kind` is
 * PI_SEG_KIND_ANY), n_offsets or an offset beyond the size; -EAGAIN if not yet published (magic 0
 * or an empty object: the creator is still at work, retry);
 * -ENOENT if absent. flags: 0 or SHM_ATTACH_RDONLY. */
int shm_attach(struct shm_seg *seg, const char *instance, const char *segment, uint32_t kind, unsigned flags);

/* Unmap and close (does not remove the name). Safe after a failed create/attach and when called
 * twice (both leave fd = -1). */
void shm_detach(struct shm_seg *seg);

/* Unlink a segment by its full name ("/pinfer-..."); an absent segment is not an error. */
int shm_remove(const char *name);

/* Call cb(name, arg) for each segment of (uid, instance) found in SHM_DIR, name being the full
 * "/pinfer-..." name. A non-zero return from cb stops the scan and is returned. Returns the
 * number of segments visited otherwise. */
typedef int (*shm_list_fn)(const char *name, void *arg);
int shm_list_instance(uid_t uid, const char *instance, shm_list_fn cb, void *arg);

/* Remove every segment of (geteuid(), instance): cleanup after a stop or a crash. Returns the
 * number removed or a negative code. */
int shm_remove_instance(const char *instance);

/* Pointer to `off` bytes into the segment, or NULL if [off, off+len) is not inside it. */
void *shm_at(const struct shm_seg *seg, uint64_t off, uint64_t len);

#endif
