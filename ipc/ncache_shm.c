/* ncache_shm.c — layout of the "ncache" segment (ncache_shm.h). */
#include "ncache_shm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pi_err.h"

#define NCSHM_ALIGN 64

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

static uint32_t ring_slots(uint64_t n_tags)
{
    uint32_t n = 1;
    while (n < n_tags && n < RING_MAX_SLOTS)
        n <<= 1;
    return n;
}

struct ncshm_offsets {
    uint64_t off[5];
    uint64_t total;
    uint32_t ring_n;
    size_t sq_bytes, cq_bytes;
};

static int compute(const struct ncshm_params *p, struct ncshm_offsets *o)
{
    if (!p->n_tags || p->n_tags > RING_MAX_SLOTS || !p->stride || p->align < 512 || (p->align & (p->align - 1)) ||
        p->stride % p->align)
        return pi_fail(PI_E_INVAL, "ncache segment: invalid geometry (%llu slots of %llu bytes, align %u)",
                       (unsigned long long)p->n_tags, (unsigned long long)p->stride, p->align);
    o->ring_n = ring_slots(p->n_tags);
    o->sq_bytes = ring_bytes(o->ring_n, sizeof(uint64_t));
    o->cq_bytes = ring_bytes(o->ring_n, sizeof(struct ncshm_done));
    uint64_t at = align_up(sizeof(struct pi_seg_header), NCSHM_ALIGN);
    o->off[NCSHM_OFF_HDR] = at;
    at = align_up(at + sizeof(struct ncshm_hdr), NCSHM_ALIGN);
    o->off[NCSHM_OFF_REC] = at;
    at = align_up(at + p->n_tags * sizeof(struct ncshm_rec), p->align);
    o->off[NCSHM_OFF_MEM] = at;
    at = align_up(at + p->n_tags * p->stride, NCSHM_ALIGN);
    o->off[NCSHM_OFF_SQ] = at;
    at = align_up(at + o->sq_bytes, NCSHM_ALIGN);
    o->off[NCSHM_OFF_CQ] = at;
    o->total = align_up(at + o->cq_bytes, NCSHM_ALIGN);
    return 0;
}

size_t ncshm_bytes(const struct ncshm_params *p)
{
    struct ncshm_offsets o;
    return compute(p, &o) ? 0 : (size_t)o.total;
}

static int view(struct ncshm_view *v, const struct ncshm_offsets *o, bool rings)
{
    v->hdr = shm_at(&v->seg, o->off[NCSHM_OFF_HDR], sizeof *v->hdr);
    v->rec = shm_at(&v->seg, o->off[NCSHM_OFF_REC], v->hdr->n_tags * sizeof *v->rec);
    v->mem = shm_at(&v->seg, o->off[NCSHM_OFF_MEM], v->hdr->n_tags * v->hdr->stride);
    if (!v->rec || !v->mem)
        return pi_fail(PI_E_FORMAT, "ncache segment: parts out of the segment");
    int rc;
    if (rings && ((rc = ring_attach(&v->sq, shm_at(&v->seg, o->off[NCSHM_OFF_SQ], o->sq_bytes), o->sq_bytes)) ||
                  (rc = ring_attach(&v->cq, shm_at(&v->seg, o->off[NCSHM_OFF_CQ], o->cq_bytes), o->cq_bytes))))
        return rc;
    return 0;
}

int ncshm_create(struct ncshm_view *v, const char *instance, const struct ncshm_params *p, uint64_t gen)
{
    memset(v, 0, sizeof *v);
    v->seg.fd = -1;
    struct ncshm_offsets o;
    int rc = compute(p, &o);
    if (rc)
        return rc;
    char name[SHM_NAME_CAP];
    if ((rc = shm_name(name, sizeof name, geteuid(), instance, NCSHM_SEG)))
        return rc;
    shm_remove(name); /* a dead cpud's: its loaderd notices the new generation and re-attaches */
    if ((rc = shm_create(&v->seg, instance, NCSHM_SEG, PI_SEG_KIND_NCACHE, (size_t)o.total)))
        return rc;
    struct pi_seg_header *sh = v->seg.hdr;
    sh->n_offsets = 5;
    for (unsigned i = 0; i < 5; i++)
        sh->offsets[i] = o.off[i];
    struct ncshm_hdr *h = shm_at(&v->seg, o.off[NCSHM_OFF_HDR], sizeof *h);
    h->gen = gen;
    h->n_tags = p->n_tags;
    h->stride = p->stride;
    h->align = p->align;
    h->cpud_pid = (int32_t)getpid();
    snprintf(h->path, sizeof h->path, "%s", p->path);
    if ((rc = ring_init(shm_at(&v->seg, o.off[NCSHM_OFF_SQ], o.sq_bytes), o.sq_bytes, o.ring_n, sizeof(uint64_t))) ||
        (rc = ring_init(shm_at(&v->seg, o.off[NCSHM_OFF_CQ], o.cq_bytes), o.cq_bytes, o.ring_n,
                        sizeof(struct ncshm_done))) ||
        (rc = view(v, &o, true))) {
        shm_detach(&v->seg);
        shm_remove(name);
        return rc;
    }
    for (uint64_t t = 0; t < p->n_tags; t++)
        atomic_init(&v->rec[t].claim, NCSHM_IDLE);
    shm_publish(&v->seg);
    return 0;
}

int ncshm_attach(struct ncshm_view *v, const char *instance, bool rdonly)
{
    memset(v, 0, sizeof *v);
    v->seg.fd = -1;
    int rc = shm_attach(&v->seg, instance, NCSHM_SEG, PI_SEG_KIND_NCACHE, rdonly ? SHM_ATTACH_RDONLY : 0);
    if (rc)
        return rc;
    const struct pi_seg_header *sh = v->seg.hdr;
    const struct ncshm_hdr *h = sh->n_offsets >= 5 ? shm_at(&v->seg, sh->offsets[NCSHM_OFF_HDR], sizeof *h) : NULL;
    struct ncshm_offsets o;
    if (!h || (rc = compute(&(struct ncshm_params){ h->n_tags, h->stride, h->align, h->path }, &o)))
        goto bad;
    for (unsigned i = 0; i < 5; i++)
        if (sh->offsets[i] != o.off[i])
            goto bad;
    if (o.total > v->seg.size || (rc = view(v, &o, !rdonly))) {
        ncshm_detach(v);
        return rc ? rc : pi_fail(PI_E_FORMAT, "ncache segment: smaller than its layout");
    }
    return 0;
bad:
    ncshm_detach(v);
    return rc ? rc : pi_fail(PI_E_FORMAT, "ncache segment: layout does not match its header");
}

void ncshm_detach(struct ncshm_view *v)
{
    shm_detach(&v->seg);
    v->hdr = NULL;
    v->rec = NULL;
    v->mem = NULL;
}

bool ncshm_pid_alive(int32_t pid)
{
    if (pid <= 0)
        return false;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold spaces and parens */
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X' && p[2] != 'x';
}
