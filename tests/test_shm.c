/* test_shm.c — named shared-memory segments: name validation, create/attach round trip, mode 0600
 * whatever the umask, O_EXCL, attach refusing foreign or corrupt segments (permission bits, owner,
 * magic, version, kind, size, offsets), shm_remove and the leftover scan of one instance.
 * Every segment uses an instance name unique to this process and is removed at the end. */
#include "pi_err.h"
#include "shm.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEG_SIZE 4096
#define NOBODY_UID 65534   /* "nobody" on Debian: an owner that is not us */

static char inst[SHM_PART_MAX + 1];   /* tshm<pid> */
static char inst2[SHM_PART_MAX + 1];  /* tshm<pid>0: shares a textual prefix with inst */

static int count_cb(const char *name, void *arg)
{
    (void)name;
    (*(int *)arg)++;
    return 0;
}

static int count_instance(const char *instance)
{
    int n = 0;
    int rc = shm_list_instance(geteuid(), instance, count_cb, &n);
    CHECK(rc == n, "list returned %d, callback saw %d", rc, n);
    return n;
}

static mode_t file_mode(const char *name)
{
    char path[SHM_NAME_CAP + 16];
    snprintf(path, sizeof path, SHM_DIR "%s", name);
    struct stat st;
    if (stat(path, &st) != 0)
        return (mode_t)-1;
    return st.st_mode & 07777;
}

/* attach must fail with `code` and a message containing `word` */
static void expect_attach_fails(const char *segment, uint32_t kind, int code, const char *word)
{
    struct shm_seg s;
    int rc = shm_attach(&s, inst, segment, kind, 0);
    CHECK(rc == code && strstr(pi_errmsg(), word), "attach %s: expected %s ('%s'), got %d %s: %s", segment,
          pi_strerror(code), word, rc, pi_strerror(rc), pi_errmsg());
    CHECK(s.fd == -1 && s.hdr == NULL, "failed attach leaves nothing open");
    if (rc == 0)
        shm_detach(&s);
}

static void test_names(void)
{
    char buf[SHM_NAME_CAP];
    CHECK_OK(shm_name(buf, sizeof buf, 1000, "inst_1", "seg-a_2"));
    CHECK(strcmp(buf, "/pinfer-1000-inst_1-seg-a_2") == 0, "name %s", buf);
    const char *bad_inst[] = {"", "a-b", "a/b", "a.b", "../x", "a b", "ä", "0123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof bad_inst / sizeof *bad_inst; i++) {
        int rc = shm_name(buf, sizeof buf, 0, bad_inst[i], "seg");
        CHECK(rc == -PI_E_INVAL && strstr(pi_errmsg(), "instance"), "instance '%s': %d %s", bad_inst[i], rc,
              pi_errmsg());
    }
    const char *bad_seg[] = {"", "a/b", "a.b", "x\n", "0123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof bad_seg / sizeof *bad_seg; i++) {
        int rc = shm_name(buf, sizeof buf, 0, "inst", bad_seg[i]);
        CHECK(rc == -PI_E_INVAL && strstr(pi_errmsg(), "segment"), "segment '%s': %d %s", bad_seg[i], rc,
              pi_errmsg());
    }
    CHECK(shm_name(buf, 16, 0, "inst", "seg_long_enough") == -PI_E_INVAL, "name longer than the buffer");
    struct shm_seg s;
    CHECK(shm_create(&s, "bad-inst", "x", PI_SEG_KIND_TEST, SEG_SIZE) == -PI_E_INVAL, "create with a bad name");
    CHECK(shm_attach(&s, inst, "bad/seg", PI_SEG_KIND_ANY, 0) == -PI_E_INVAL, "attach with a bad name");
    CHECK(shm_remove("/etc-passwd") == -PI_E_INVAL, "remove refuses non-pinfer names");
    CHECK(shm_remove("/pinfer-0-a/../x") == -PI_E_INVAL, "remove refuses a slash");
}

static void test_round_trip(void)
{
    struct shm_seg c, a;
    CHECK(shm_create(&c, inst, "small", PI_SEG_KIND_TEST, 100) == -PI_E_INVAL, "size below the header");
    CHECK(shm_attach(&a, inst, "absent", PI_SEG_KIND_ANY, 0) == -ENOENT, "absent segment: -ENOENT");

    mode_t old = umask(0); /* the most permissive umask: the object must still be 0600 */
    int rc = shm_create(&c, inst, "main", PI_SEG_KIND_TEST, SEG_SIZE);
    umask(old);
    REQUIRE(rc == 0, "create: %s", pi_errmsg());
    CHECK(file_mode(c.name) == 0600, "mode %04o under umask 0", (unsigned)file_mode(c.name));
    CHECK(c.size == SEG_SIZE && c.hdr->size == SEG_SIZE && c.hdr->kind == PI_SEG_KIND_TEST, "header");

    CHECK(shm_attach(&a, inst, "main", PI_SEG_KIND_TEST, 0) == -EAGAIN, "attach before publish: -EAGAIN");
    c.hdr->n_offsets = 2;
    c.hdr->offsets[0] = 256;
    c.hdr->offsets[1] = 1024;
    memcpy((char *)c.base + 256, "hello", 6);
    shm_publish(&c);

    rc = shm_attach(&a, inst, "main", PI_SEG_KIND_TEST, 0);
    REQUIRE(rc == 0, "attach: %s", pi_errmsg());
    CHECK(a.base != c.base, "a second mapping");
    CHECK(a.hdr->n_offsets == 2 && a.hdr->offsets[1] == 1024, "offsets visible");
    CHECK(strcmp(shm_at(&a, a.hdr->offsets[0], 6), "hello") == 0, "contents visible");
    memcpy((char *)a.base + 1024, "back", 5);
    CHECK(strcmp((char *)c.base + 1024, "back") == 0, "writes through the attacher are shared");
    CHECK(shm_at(&a, SEG_SIZE, 0) != NULL && shm_at(&a, SEG_SIZE, 1) == NULL && shm_at(&a, UINT64_MAX, 2) == NULL,
          "shm_at bounds");
    shm_detach(&a);
    shm_detach(&a); /* twice is harmless */

    struct shm_seg ro;
    rc = shm_attach(&ro, inst, "main", PI_SEG_KIND_ANY, SHM_ATTACH_RDONLY);
    CHECK(rc == 0 && ro.hdr->offsets[0] == 256, "read-only attach: %s", pi_errmsg());
    if (rc == 0)
        shm_detach(&ro);

    /* exclusive create */
    struct shm_seg dup;
    CHECK(shm_create(&dup, inst, "main", PI_SEG_KIND_TEST, SEG_SIZE) == -EEXIST, "second create: -EEXIST (%s)",
          pi_errmsg());
    CHECK(c.hdr->magic == PI_SEG_MAGIC && strcmp((char *)c.base + 256, "hello") == 0, "original untouched");

    /* group/other permission bits */
    REQUIRE(fchmod(c.fd, 0640) == 0, "fchmod");
    expect_attach_fails("main", PI_SEG_KIND_ANY, -EACCES, "mode 0640");
    REQUIRE(fchmod(c.fd, 0602) == 0, "fchmod");
    expect_attach_fails("main", PI_SEG_KIND_ANY, -EACCES, "group/other");
    REQUIRE(fchmod(c.fd, 0600) == 0, "fchmod");

    /* header fields */
    c.hdr->magic = 0xdeadbeef;
    expect_attach_fails("main", PI_SEG_KIND_ANY, -PI_E_FORMAT, "magic");
    c.hdr->magic = PI_SEG_MAGIC;
    c.hdr->version = 7;
    expect_attach_fails("main", PI_SEG_KIND_ANY, -PI_E_FORMAT, "version");
    c.hdr->version = PI_SEG_VERSION;
    expect_attach_fails("main", 99, -PI_E_FORMAT, "kind");
    c.hdr->size = SEG_SIZE * 2;
    expect_attach_fails("main", PI_SEG_KIND_ANY, -PI_E_FORMAT, "size");
    c.hdr->size = SEG_SIZE;
    c.hdr->n_offsets = PI_SEG_MAX_OFFSETS + 1;
    expect_attach_fails("main", PI_SEG_KIND_ANY, -PI_E_FORMAT, "n_offsets");
    c.hdr->n_offsets = 2;
    c.hdr->offsets[1] = SEG_SIZE + 1;
    expect_attach_fails("main", PI_SEG_KIND_ANY, -PI_E_FORMAT, "offsets[1]");
    c.hdr->offsets[1] = 1024;
    rc = shm_attach(&a, inst, "main", PI_SEG_KIND_TEST, 0);
    CHECK(rc == 0, "attach after repairs: %s", pi_errmsg());
    if (rc == 0)
        shm_detach(&a);

    char name[SHM_NAME_CAP];
    memcpy(name, c.name, sizeof name);
    shm_detach(&c);
    CHECK(strcmp(c.name, name) == 0, "detach keeps the name for shm_remove");
}

/* The object's size disagrees with its header: grown, and shrunk below the header. We resize
 * through our own descriptor, with no mapping of it alive (touching a mapping past a shrunken
 * end would raise SIGBUS). */
static void test_sizes(void)
{
    struct shm_seg c;
    int rc = shm_create(&c, inst, "sized", PI_SEG_KIND_TEST, SEG_SIZE);
    REQUIRE(rc == 0, "create: %s", pi_errmsg());
    shm_publish(&c);
    shm_detach(&c);
    int fd = shm_open(c.name, O_RDWR, 0);
    REQUIRE(fd >= 0, "shm_open");
    CHECK(ftruncate(fd, SEG_SIZE * 2) == 0, "grow");
    expect_attach_fails("sized", PI_SEG_KIND_ANY, -PI_E_FORMAT, "size");
    CHECK(ftruncate(fd, 64) == 0, "shrink");
    expect_attach_fails("sized", PI_SEG_KIND_ANY, -PI_E_FORMAT, "header");
    CHECK(ftruncate(fd, 0) == 0, "empty");
    expect_attach_fails("sized", PI_SEG_KIND_ANY, -EAGAIN, "empty"); /* as seen mid-shm_create */
    close(fd);
}

/* shm_create_lazy: the size is set but only the header's page has memory; shm_allocate gives the
 * ranges the creator asks for, and only those (st_blocks); the segment attaches like any other. */
static void test_lazy(void)
{
    enum { PAGES = 64, PAGE = 4096 };
    struct shm_seg c, a;
    int rc = shm_create_lazy(&c, inst, "lazy", PI_SEG_KIND_TEST, PAGES * PAGE);
    REQUIRE(rc == 0, "create_lazy: %s", pi_errmsg());
    struct stat st;
    CHECK(fstat(c.fd, &st) == 0 && st.st_size == PAGES * PAGE && st.st_blocks * 512 == PAGE,
          "lazy: size %lld, %lld bytes resident (want %d, %d)", (long long)st.st_size, (long long)st.st_blocks * 512,
          PAGES * PAGE, PAGE);
    CHECK(shm_allocate(&c, 8 * PAGE, 4 * PAGE) == 0 && shm_allocate(&c, 60 * PAGE, 4 * PAGE) == 0, "allocate: %s",
          pi_errmsg());
    CHECK(shm_allocate(&c, 62 * PAGE, 4 * PAGE) == -PI_E_RANGE, "allocate past the end refused");
    CHECK(fstat(c.fd, &st) == 0 && st.st_blocks * 512 == 9 * PAGE, "allocated: %lld bytes resident (want %d)",
          (long long)st.st_blocks * 512, 9 * PAGE);
    shm_publish(&c);
    rc = shm_attach(&a, inst, "lazy", PI_SEG_KIND_TEST, SHM_ATTACH_RDONLY);
    CHECK(rc == 0 && a.size == PAGES * PAGE, "attach a lazy segment: %s", pi_errmsg());
    if (rc == 0)
        shm_detach(&a);
    shm_detach(&c);
    shm_unlink(c.name);
}

/* A segment owned by someone else is refused even when we can open it (as root we can). */
static void test_foreign_owner(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "not root: foreign-owner check skipped (cannot chown)\n");
        return;
    }
    struct shm_seg c;
    int rc = shm_create(&c, inst, "foreign", PI_SEG_KIND_TEST, SEG_SIZE);
    REQUIRE(rc == 0, "create: %s", pi_errmsg());
    shm_publish(&c);
    if (fchown(c.fd, NOBODY_UID, NOBODY_UID) != 0) {
        fprintf(stderr, "fchown to %d failed (%s): foreign-owner check skipped\n", NOBODY_UID, strerror(errno));
    } else {
        expect_attach_fails("foreign", PI_SEG_KIND_ANY, -EACCES, "owned by uid 65534");
    }
    shm_detach(&c);
}

static void test_cleanup(void)
{
    /* inst has main, sized, maybe foreign; inst2 gets one segment that must survive inst's cleanup */
    struct shm_seg c;
    int rc = shm_create(&c, inst2, "other", PI_SEG_KIND_TEST, SEG_SIZE);
    REQUIRE(rc == 0, "create: %s", pi_errmsg());
    shm_detach(&c);
    int expect = geteuid() == 0 ? 3 : 2;
    CHECK(count_instance(inst) == expect, "segments of %s: %d, expected %d", inst, count_instance(inst), expect);
    CHECK(count_instance(inst2) == 1, "segments of %s", inst2);
    CHECK(shm_list_instance(geteuid(), "bad-inst", count_cb, &rc) == -PI_E_INVAL, "list with a bad instance");

    char name[SHM_NAME_CAP];
    REQUIRE(shm_name(name, sizeof name, geteuid(), inst, "main") == 0, "name");
    CHECK_OK(shm_remove(name));
    CHECK_OK(shm_remove(name)); /* already gone: fine */
    CHECK(count_instance(inst) == expect - 1, "one removed");
    rc = shm_remove_instance(inst);
    CHECK(rc == expect - 1, "remove_instance removed %d", rc);
    CHECK(count_instance(inst) == 0, "instance %s clean", inst);
    CHECK(count_instance(inst2) == 1, "instance %s untouched by the cleanup of %s", inst2, inst);
    CHECK(shm_remove_instance(inst2) == 1, "cleanup %s", inst2);
    CHECK(count_instance(inst2) == 0, "instance %s clean", inst2);
}

int main(void)
{
    snprintf(inst, sizeof inst, "tshm%ld", (long)getpid());
    snprintf(inst2, sizeof inst2, "tshm%ld0", (long)getpid());
    test_names();
    test_round_trip();
    test_sizes();
    test_lazy();
    test_foreign_owner();
    test_cleanup();
    shm_remove_instance(inst); /* in case a check above failed midway */
    shm_remove_instance(inst2);
    return tu_finish("shm");
}
