/* shm.c — named POSIX shared-memory segments (see shm.h for the naming and lifecycle). */
#include "shm.h"

#include "pi_err.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_PREFIX "/pinfer-"
#define SHM_MODE 0600                 /* owner read/write only: segments are private to the user */
#define SHM_FOREIGN_BITS (S_IRWXG | S_IRWXO)

static bool name_char_ok(char c, bool allow_dash)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           (allow_dash && c == '-');
}

/* what: "instance" or "segment"; instance names may not contain '-' (see shm.h). */
static int check_part(const char *what, const char *s, bool allow_dash)
{
    if (!s || !s[0])
        return pi_fail(PI_E_INVAL, "shm: empty %s name", what);
    size_t n = strnlen(s, SHM_PART_MAX + 1);
    if (n > SHM_PART_MAX)
        return pi_fail(PI_E_INVAL, "shm: %s name '%.*s...' longer than %d characters", what, SHM_PART_MAX, s,
                       SHM_PART_MAX);
    for (size_t i = 0; i < n; i++)
        if (!name_char_ok(s[i], allow_dash))
            return pi_fail(PI_E_INVAL, "shm: %s name '%s': character %zu (0x%02x) is not one of [A-Za-z0-9_%s]",
                           what, s, i, (unsigned char)s[i], allow_dash ? "-" : "");
    return 0;
}

int shm_name(char *buf, size_t cap, uid_t uid, const char *instance, const char *segment)
{
    int rc = check_part("instance", instance, false);
    if (rc)
        return rc;
    rc = check_part("segment", segment, true);
    if (rc)
        return rc;
    int n = snprintf(buf, cap, SHM_PREFIX "%u-%s-%s", (unsigned)uid, instance, segment);
    if (n < 0 || (size_t)n >= cap)
        return pi_fail(PI_E_INVAL, "shm: name for instance '%s' segment '%s' exceeds %zu bytes", instance, segment,
                       cap);
    return 0;
}

static void seg_clear(struct shm_seg *seg)
{
    memset(seg, 0, sizeof *seg);
    seg->fd = -1;
    seg->base = MAP_FAILED;
}

/* alloc_all: posix_fallocate the whole object; else only set its size (ftruncate) and allocate the
 * header's page: the caller allocates the rest with shm_allocate. */
static int create(struct shm_seg *seg, const char *instance, const char *segment, uint32_t kind, size_t size,
                  bool alloc_all)
{
    seg_clear(seg);
    int rc = shm_name(seg->name, sizeof seg->name, geteuid(), instance, segment);
    if (rc)
        return rc;
    if (size < sizeof(struct pi_seg_header))
        return pi_fail(PI_E_INVAL, "shm: segment %s: size %zu smaller than its %zu-byte header", seg->name, size,
                       sizeof(struct pi_seg_header));
    if ((uint64_t)size > (uint64_t)INT64_MAX)
        return pi_fail(PI_E_INVAL, "shm: segment %s: size %zu too large", seg->name, size);

    seg->fd = shm_open(seg->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, SHM_MODE);
    if (seg->fd < 0) {
        rc = pi_fail(errno, "shm: create %s: %s", seg->name, strerror(errno));
        goto fail_noobj;
    }
    /* shm_open applied the umask; a umask can only remove bits, but set exactly 0600 anyway so
     * the mode is what attach expects whatever the caller's umask. */
    if (fchmod(seg->fd, SHM_MODE) != 0) {
        rc = pi_fail(errno, "shm: fchmod %s: %s", seg->name, strerror(errno));
        goto fail;
    }
    /* Allocate every page now: tmpfs would otherwise allocate on first touch and a full /dev/shm
     * would kill us with SIGBUS in the middle of a computation. Returns an error number. */
    int e = 0;
    if (!alloc_all && ftruncate(seg->fd, (off_t)size) != 0)
        e = errno;
    if (e == 0)
        e = posix_fallocate(seg->fd, 0, (off_t)(alloc_all || size < SHM_HDR_PAGE ? size : SHM_HDR_PAGE));
    if (e != 0) {
        rc = pi_fail(e, "shm: allocate %zu bytes for %s: %s", size, seg->name, strerror(e));
        goto fail;
    }
    seg->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
    if (seg->base == MAP_FAILED) {
        rc = pi_fail(errno, "shm: mmap %zu bytes of %s: %s", size, seg->name, strerror(errno));
        goto fail;
    }
    seg->size = size;
    seg->hdr = seg->base;
    /* magic stays 0 (fresh pages are zero) until shm_publish */
    seg->hdr->version = PI_SEG_VERSION;
    seg->hdr->size = size;
    seg->hdr->kind = kind;
    seg->hdr->n_offsets = 0;
    return 0;

fail:
    if (seg->base != MAP_FAILED)
        munmap(seg->base, size);
    close(seg->fd);
    shm_unlink(seg->name);
fail_noobj:
    seg_clear(seg);
    return rc;
}

int shm_create(struct shm_seg *seg, const char *instance, const char *segment, uint32_t kind, size_t size)
{
    return create(seg, instance, segment, kind, size, true);
}

int shm_create_lazy(struct shm_seg *seg, const char *instance, const char *segment, uint32_t kind, size_t size)
{
    return create(seg, instance, segment, kind, size, false);
}

int shm_allocate(struct shm_seg *seg, uint64_t off, uint64_t len)
{
    if (off > seg->size || len > seg->size - off)
        return pi_fail(PI_E_RANGE, "shm: allocate [%llu, +%llu) outside the %zu bytes of %s", (unsigned long long)off,
                       (unsigned long long)len, seg->size, seg->name);
    int e = len ? posix_fallocate(seg->fd, (off_t)off, (off_t)len) : 0;
    if (e != 0)
        return pi_fail(e, "shm: allocate %llu bytes at %llu of %s: %s", (unsigned long long)len,
                       (unsigned long long)off, seg->name, strerror(e));
    return 0;
}

void shm_publish(struct shm_seg *seg)
{
    /* Release: orders the creator's writes of the header fields and the contents before the
     * magic; pairs with the acquire load of the magic in shm_attach. */
    __atomic_store_n(&seg->hdr->magic, PI_SEG_MAGIC, __ATOMIC_RELEASE);
}

/* Validate the mapped header of an attached segment. */
static int check_header(const struct shm_seg *seg, uint32_t kind)
{
    const struct pi_seg_header *h = seg->hdr;
    /* Acquire: pairs with the release store in shm_publish, so the fields and contents the
     * creator wrote before publishing are visible once we see the magic. */
    uint32_t magic = __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE);
    if (magic == 0)
        return pi_fail(EAGAIN, "shm: segment %s is not published yet (its creator is still building it)",
                       seg->name);
    if (magic != PI_SEG_MAGIC)
        return pi_fail(PI_E_FORMAT, "shm: segment %s: field magic is 0x%08x, expected 0x%08x", seg->name, magic,
                       PI_SEG_MAGIC);
    if (h->version != PI_SEG_VERSION)
        return pi_fail(PI_E_FORMAT, "shm: segment %s: field version is %u, expected %u", seg->name, h->version,
                       PI_SEG_VERSION);
    if (h->size != seg->size)
        return pi_fail(PI_E_FORMAT, "shm: segment %s: field size is %llu but the object has %zu bytes", seg->name,
                       (unsigned long long)h->size, seg->size);
    if (kind != PI_SEG_KIND_ANY && h->kind != kind)
        return pi_fail(PI_E_FORMAT, "shm: segment %s: field kind is %u, expected %u", seg->name, h->kind, kind);
    if (h->n_offsets > PI_SEG_MAX_OFFSETS)
        return pi_fail(PI_E_FORMAT, "shm: segment %s: field n_offsets is %u, at most %d", seg->name, h->n_offsets,
                       PI_SEG_MAX_OFFSETS);
    for (uint32_t i = 0; i < h->n_offsets; i++)
        if (h->offsets[i] > h->size)
            return pi_fail(PI_E_FORMAT, "shm: segment %s: field offsets[%u] = %llu beyond size %llu", seg->name, i,
                           (unsigned long long)h->offsets[i], (unsigned long long)h->size);
    return 0;
}

int shm_attach(struct shm_seg *seg, const char *instance, const char *segment, uint32_t kind, unsigned flags)
{
    seg_clear(seg);
    int rc = shm_name(seg->name, sizeof seg->name, geteuid(), instance, segment);
    if (rc)
        return rc;
    bool rdonly = (flags & SHM_ATTACH_RDONLY) != 0;
    seg->fd = shm_open(seg->name, (rdonly ? O_RDONLY : O_RDWR) | O_CLOEXEC, 0);
    if (seg->fd < 0) {
        rc = pi_fail(errno, "shm: attach %s: %s", seg->name, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(seg->fd, &st) != 0) {
        rc = pi_fail(errno, "shm: fstat %s: %s", seg->name, strerror(errno));
        goto fail;
    }
    /* Another user's object, or one others may write, is not ours to trust: its contents could
     * be crafted to make us misbehave. (root opens anything, so check explicitly.) */
    if (st.st_uid != geteuid()) {
        rc = pi_fail(EACCES, "shm: segment %s is owned by uid %u, not by us (uid %u)", seg->name,
                     (unsigned)st.st_uid, (unsigned)geteuid());
        goto fail;
    }
    if (st.st_mode & SHM_FOREIGN_BITS) {
        rc = pi_fail(EACCES, "shm: segment %s has mode %04o; group/other permission bits are not allowed",
                     seg->name, (unsigned)(st.st_mode & 07777));
        goto fail;
    }
    if (st.st_size == 0) {
        /* shm_create between shm_open and posix_fallocate: like an unpublished magic, retry */
        rc = pi_fail(EAGAIN, "shm: segment %s is empty (its creator is still allocating it)", seg->name);
        goto fail;
    }
    if (st.st_size < (off_t)sizeof(struct pi_seg_header)) {
        rc = pi_fail(PI_E_FORMAT, "shm: segment %s: field size: object has %lld bytes, less than the %zu-byte header",
                     seg->name, (long long)st.st_size, sizeof(struct pi_seg_header));
        goto fail;
    }
    seg->size = (size_t)st.st_size;
    seg->base = mmap(NULL, seg->size, rdonly ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0);
    if (seg->base == MAP_FAILED) {
        rc = pi_fail(errno, "shm: mmap %zu bytes of %s: %s", seg->size, seg->name, strerror(errno));
        goto fail;
    }
    seg->hdr = seg->base;
    rc = check_header(seg, kind);
    if (rc)
        goto fail;
    return 0;

fail:
    shm_detach(seg);
    return rc;
}

void shm_detach(struct shm_seg *seg)
{
    if (seg->base && seg->base != MAP_FAILED && seg->size)
        munmap(seg->base, seg->size);
    if (seg->fd >= 0)
        close(seg->fd);
    char name[SHM_NAME_CAP];
    memcpy(name, seg->name, sizeof name);
    seg_clear(seg);
    memcpy(seg->name, name, sizeof name); /* keep the name: the creator may still shm_remove it */
}

int shm_remove(const char *name)
{
    if (!name || strncmp(name, SHM_PREFIX, strlen(SHM_PREFIX)) != 0 || strchr(name + 1, '/'))
        return pi_fail(PI_E_INVAL, "shm: '%s' is not a pinfer segment name", name ? name : "(null)");
    if (shm_unlink(name) != 0 && errno != ENOENT)
        return pi_fail(errno, "shm: remove %s: %s", name, strerror(errno));
    return 0;
}

int shm_list_instance(uid_t uid, const char *instance, shm_list_fn cb, void *arg)
{
    int rc = check_part("instance", instance, false);
    if (rc)
        return rc;
    char prefix[SHM_NAME_CAP];
    snprintf(prefix, sizeof prefix, "pinfer-%u-%s-", (unsigned)uid, instance); /* fits: checked above */
    size_t plen = strlen(prefix);
    DIR *d = opendir(SHM_DIR);
    if (!d)
        return pi_fail(errno, "shm: open %s: %s", SHM_DIR, strerror(errno));
    int count = 0;
    struct dirent *e;
    /* Unlinking entries already returned does not disturb readdir; the callback may remove. */
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, plen) != 0 || !e->d_name[plen])
            continue;
        char full[SHM_NAME_CAP + 8];
        if (snprintf(full, sizeof full, "/%s", e->d_name) >= (int)sizeof full)
            continue; /* not one of ours: our names are shorter */
        rc = cb(full, arg);
        if (rc) {
            closedir(d);
            return rc;
        }
        count++;
    }
    closedir(d);
    return count;
}

static int remove_cb(const char *name, void *arg)
{
    (void)arg;
    return shm_remove(name);
}

int shm_remove_instance(const char *instance)
{
    return shm_list_instance(geteuid(), instance, remove_cb, NULL);
}

void *shm_at(const struct shm_seg *seg, uint64_t off, uint64_t len)
{
    if (off > seg->size || len > seg->size - off)
        return NULL;
    return (char *)seg->base + off;
}
