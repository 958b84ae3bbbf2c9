/* bundle.c — the bundled FFN sidecar (bundle.h). */
#include "bundle.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pi_err.h"
#include "quant.h"
#include "tmp_guard.h"

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull
#define WRITE_NEURONS 256 /* records gathered per write(): a few MiB at 7B shapes */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= FNV_PRIME;
    }
    return h;
}

static uint64_t hdr_sum(const struct bundle_hdr *h)
{
    return fnv(FNV_OFFSET, h, offsetof(struct bundle_hdr, hdr_sum));
}

uint64_t bundle_fingerprint(const struct pi_model *m)
{
    const struct pi_hparams *hp = &m->hp;
    uint64_t h = FNV_OFFSET;
    const int32_t dims[] = { hp->n_layer, hp->n_ff, hp->n_embd, hp->n_vocab, hp->n_head, hp->n_head_kv };
    h = fnv(h, dims, sizeof dims);
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const struct pi_layer *ly = &m->layers[l];
        const uint32_t types[] = { ly->ffn_gate.type, ly->ffn_up.type, ly->ffn_down_t.type };
        h = fnv(h, types, sizeof types);
        h = fnv(h, ly->ffn_norm.data, (size_t)ly->ffn_norm.row_bytes);
    }
    return fnv(h, m->output_norm.data, m->output_norm.row_bytes);
}

int bundle_plan(const struct pi_model *m, uint32_t align, struct bundle_hdr *h)
{
    const struct pi_hparams *hp = &m->hp;
    memset(h, 0, sizeof *h);
    if (align < 512 || (align & (align - 1)) || align > (1u << 20))
        return pi_fail(PI_E_INVAL, "bundle: alignment %u is not a power of two in [512, 1 MiB]", align);
    if (!hp->powerinfer || hp->n_layer < 1)
        return pi_fail(PI_E_UNSUPPORTED, "bundle: %s is not a PowerInfer (PWRI) file: only those have ffn_down_t",
                       m->name ? m->name : "the model");
    const struct pi_layer *l0 = &m->layers[0];
    for (int32_t l = 0; l < hp->n_layer; l++) {
        const struct pi_layer *ly = &m->layers[l];
        if (!ly->ffn_down_t.data)
            return pi_fail(PI_E_NOTFOUND, "bundle: layer %d has no ffn_down_t", l);
        if (ly->ffn_gate.type != l0->ffn_gate.type || ly->ffn_up.type != l0->ffn_up.type ||
            ly->ffn_down_t.type != l0->ffn_down_t.type)
            return pi_fail(PI_E_UNSUPPORTED, "bundle: layer %d's FFN types differ from layer 0's (one record size per file)",
                           l);
    }
    h->magic = BUNDLE_MAGIC;
    h->version = BUNDLE_VERSION;
    h->n_layer = (uint32_t)hp->n_layer;
    h->n_ff = (uint32_t)hp->n_ff;
    h->n_embd = (uint32_t)hp->n_embd;
    h->align = align;
    h->gate_type = l0->ffn_gate.type;
    h->up_type = l0->ffn_up.type;
    h->down_type = l0->ffn_down_t.type;
    h->gate_bytes = l0->ffn_gate.row_bytes;
    h->up_bytes = l0->ffn_up.row_bytes;
    h->down_bytes = l0->ffn_down_t.row_bytes;
    const uint64_t rec = h->gate_bytes + h->up_bytes + h->down_bytes;
    h->stride = (rec + align - 1) / align * align;
    h->data_off = BUNDLE_HDR_BYTES > align ? BUNDLE_HDR_BYTES : align;
    h->file_bytes = h->data_off + (uint64_t)h->n_layer * h->n_ff * h->stride;
    h->fingerprint = bundle_fingerprint(m);
    h->hdr_sum = hdr_sum(h);
    return 0;
}

int bundle_parse(const void *buf, uint64_t file_bytes, struct bundle_hdr *h)
{
    memcpy(h, buf, sizeof *h);
    if (h->magic != BUNDLE_MAGIC)
        return pi_fail(PI_E_FORMAT, "bundle: bad magic %08x (not an FFN bundle)", h->magic);
    if (h->version != BUNDLE_VERSION)
        return pi_fail(PI_E_UNSUPPORTED, "bundle: version %u (this build reads %u)", h->version, BUNDLE_VERSION);
    if (h->hdr_sum != hdr_sum(h))
        return pi_fail(PI_E_FORMAT, "bundle: header checksum mismatch (a damaged file)");
    const uint64_t rec = h->gate_bytes + h->up_bytes + h->down_bytes;
    if (h->align < 512 || (h->align & (h->align - 1)) || h->stride < rec || h->stride % h->align ||
        h->data_off % h->align || h->data_off < sizeof *h || h->n_layer == 0 || h->n_ff == 0)
        return pi_fail(PI_E_FORMAT, "bundle: inconsistent header (align %u, stride %llu, record %llu)", h->align,
                       (unsigned long long)h->stride, (unsigned long long)rec);
    const uint64_t want = h->data_off + (uint64_t)h->n_layer * h->n_ff * h->stride;
    if (want != h->file_bytes || file_bytes != want)
        return pi_fail(file_bytes < want ? PI_E_TRUNCATED : PI_E_FORMAT,
                       "bundle: the file has %llu bytes, its header says %llu", (unsigned long long)file_bytes,
                       (unsigned long long)want);
    return 0;
}

int bundle_check(const struct bundle_hdr *h, const struct pi_model *m)
{
    struct bundle_hdr want;
    int rc = bundle_plan(m, h->align, &want);
    if (rc)
        return rc;
    if (h->n_layer != want.n_layer || h->n_ff != want.n_ff || h->n_embd != want.n_embd)
        return pi_fail(PI_E_FORMAT, "bundle: made for %u layers x %u neurons x %u, the model has %u x %u x %u",
                       h->n_layer, h->n_ff, h->n_embd, want.n_layer, want.n_ff, want.n_embd);
    if (h->gate_type != want.gate_type || h->up_type != want.up_type || h->down_type != want.down_type ||
        h->gate_bytes != want.gate_bytes || h->up_bytes != want.up_bytes || h->down_bytes != want.down_bytes)
        return pi_fail(PI_E_FORMAT, "bundle: rows of types %s/%s/%s, the model's are %s/%s/%s",
                       quant_traits(h->gate_type) ? quant_traits(h->gate_type)->name : "?",
                       quant_traits(h->up_type) ? quant_traits(h->up_type)->name : "?",
                       quant_traits(h->down_type) ? quant_traits(h->down_type)->name : "?",
                       quant_traits(want.gate_type)->name, quant_traits(want.up_type)->name,
                       quant_traits(want.down_type)->name);
    if (h->fingerprint != want.fingerprint)
        return pi_fail(PI_E_FORMAT, "bundle: made from another model (fingerprint %016llx, this model's %016llx)",
                       (unsigned long long)h->fingerprint, (unsigned long long)want.fingerprint);
    return 0;
}

/* record of neuron i of layer ly into dst (stride bytes, the tail zeroed) */
static void fill_record(const struct bundle_hdr *h, const struct pi_layer *ly, int64_t i, char *dst)
{
    memcpy(dst, (const char *)ly->ffn_gate.data + (size_t)i * h->gate_bytes, h->gate_bytes);
    memcpy(dst + h->gate_bytes, (const char *)ly->ffn_up.data + (size_t)i * h->up_bytes, h->up_bytes);
    memcpy(dst + h->gate_bytes + h->up_bytes, (const char *)ly->ffn_down_t.data + (size_t)i * h->down_bytes,
           h->down_bytes);
    const size_t rec = h->gate_bytes + h->up_bytes + h->down_bytes;
    memset(dst + rec, 0, h->stride - rec);
}

static int write_all(int fd, const void *p, size_t n, const char *path)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return pi_fail(errno ? errno : EIO, "bundle: writing %s: %s", path, strerror(errno ? errno : EIO));
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int bundle_write(const struct pi_model *m, const char *path, uint32_t align, uint64_t *bytes)
{
    struct bundle_hdr h;
    int rc = bundle_plan(m, align, &h);
    if (rc)
        return rc;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return pi_fail(PI_E_INVAL, "bundle: path too long");
    char *buf = calloc(1, (size_t)h.data_off > WRITE_NEURONS * h.stride ? (size_t)h.data_off : WRITE_NEURONS * h.stride);
    if (!buf)
        return pi_fail(PI_E_NOMEM, "bundle: out of memory");
    const int guard = tmp_guard_add(tmp); /* ^C from here on removes tmp */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = pi_fail(errno, "bundle: cannot create %s: %s", tmp, strerror(errno));
        tmp_guard_drop(guard);
        free(buf);
        return rc;
    }
    memcpy(buf, &h, sizeof h);
    rc = write_all(fd, buf, h.data_off, tmp);
    for (uint32_t l = 0; !rc && l < h.n_layer; l++) {
        const struct pi_layer *ly = &m->layers[l];
        for (int64_t i0 = 0; !rc && i0 < h.n_ff; i0 += WRITE_NEURONS) {
            const int64_t n = h.n_ff - i0 < WRITE_NEURONS ? h.n_ff - i0 : WRITE_NEURONS;
            for (int64_t k = 0; k < n; k++)
                fill_record(&h, ly, i0 + k, buf + (size_t)k * h.stride);
            rc = write_all(fd, buf, (size_t)n * h.stride, tmp);
        }
    }
    if (!rc && fsync(fd))
        rc = pi_fail(errno, "bundle: fsync %s: %s", tmp, strerror(errno));
    if (close(fd) && !rc)
        rc = pi_fail(errno, "bundle: close %s: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path))
        rc = pi_fail(errno, "bundle: rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc)
        unlink(tmp);
    else if (bytes)
        *bytes = h.file_bytes;
    tmp_guard_drop(guard);
    free(buf);
    return rc;
}

int bundle_open(const char *path, const struct pi_model *m, bool want_direct, int *fd, bool *direct,
                struct bundle_hdr *h)
{
    *fd = -1;
    *direct = false;
    int f = -1;
    if (want_direct)
        f = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (f >= 0)
        *direct = true;
    else
        f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0)
        return pi_fail(errno, "bundle: cannot open %s: %s (make it with: pictl bundle MODEL)", path, strerror(errno));
    struct stat st;
    void *buf = NULL;
    int rc = 0;
    if (fstat(f, &st))
        rc = pi_fail(errno, "bundle: stat %s: %s", path, strerror(errno));
    else if (posix_memalign(&buf, BUNDLE_HDR_BYTES, BUNDLE_HDR_BYTES))
        rc = pi_fail(PI_E_NOMEM, "bundle: out of memory");
    if (!rc) {
        ssize_t n = pread(f, buf, BUNDLE_HDR_BYTES, 0);
        if (n < (ssize_t)sizeof *h)
            rc = pi_fail(n < 0 ? errno : PI_E_TRUNCATED, "bundle: reading the header of %s: %s", path,
                         n < 0 ? strerror(errno) : "file too short");
    }
    if (!rc && !(rc = bundle_parse(buf, (uint64_t)st.st_size, h)))
        rc = m ? bundle_check(h, m) : 0;
    if (rc && !strstr(pi_errmsg(), path)) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", pi_errmsg());
        pi_fail(rc < 0 ? -rc : rc, "%s: %s", path, msg);
    }
    free(buf);
    if (rc) {
        close(f);
        return rc;
    }
    *fd = f;
    return 0;
}

int bundle_verify(int fd, const struct bundle_hdr *h, const struct pi_model *m)
{
    void *buf = NULL, *want = malloc(h->stride);
    const size_t chunk = WRITE_NEURONS * h->stride;
    if (!want || posix_memalign(&buf, h->align, chunk)) {
        free(want);
        return pi_fail(PI_E_NOMEM, "bundle: out of memory");
    }
    int rc = 0;
    for (uint32_t l = 0; !rc && l < h->n_layer; l++) {
        for (int64_t i0 = 0; !rc && i0 < h->n_ff; i0 += WRITE_NEURONS) {
            const int64_t n = h->n_ff - i0 < WRITE_NEURONS ? h->n_ff - i0 : WRITE_NEURONS;
            const uint64_t off = bundle_offset(h, (int)l, i0);
            ssize_t got = pread(fd, buf, (size_t)n * h->stride, (off_t)off);
            if (got != (ssize_t)((size_t)n * h->stride)) {
                rc = pi_fail(got < 0 ? errno : PI_E_TRUNCATED, "bundle: read at offset %llu: %s",
                             (unsigned long long)off, got < 0 ? strerror(errno) : "short read");
                break;
            }
            for (int64_t k = 0; k < n; k++) {
                fill_record(h, &m->layers[l], i0 + k, want);
                if (memcmp((char *)buf + (size_t)k * h->stride, want, h->stride)) {
                    rc = pi_fail(PI_E_FORMAT, "bundle: layer %u neuron %lld (offset %llu) differs from the model's rows",
                                 l, (long long)(i0 + k), (unsigned long long)bundle_offset(h, (int)l, i0 + k));
                    break;
                }
            }
        }
    }
    free(buf);
    free(want);
    return rc;
}

int bundle_default_path(const char *model_path, char *out, size_t cap)
{
    if (snprintf(out, cap, "%s%s", model_path, BUNDLE_SUFFIX) >= (int)cap)
        return pi_fail(PI_E_INVAL, "bundle: path too long: %s", model_path);
    return 0;
}
