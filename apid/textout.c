/* textout.c — stop strings and UTF-8 boundaries of the generated text (see textout.h). */
#include "textout.h"

#include <stdlib.h>
#include <string.h>

#include "pi_err.h"

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD */

void textout_init(struct textout *t) { memset(t, 0, sizeof *t); }

void textout_fini(struct textout *t)
{
    free(t->buf);
    for (size_t i = 0; i < t->n_stops; i++)
        free(t->stops[i]);
    memset(t, 0, sizeof *t);
}

int textout_add_stop(struct textout *t, const char *s, size_t len)
{
    if (t->n_stops == TEXTOUT_MAX_STOPS)
        return pi_fail(PI_E_RANGE, "at most %d stop strings", TEXTOUT_MAX_STOPS);
    if (len == 0 || len > TEXTOUT_MAX_STOP_LEN)
        return pi_fail(PI_E_RANGE, "a stop string must have 1 to %d bytes", TEXTOUT_MAX_STOP_LEN);
    char *c = malloc(len + 1);
    if (!c)
        return pi_fail(PI_E_NOMEM, "stop string");
    memcpy(c, s, len);
    c[len] = '\0';
    t->stops[t->n_stops++] = c;
    return 0;
}

static int reserve(struct textout *t, size_t extra)
{
    if (t->len + extra + 1 <= t->cap)
        return 0;
    size_t cap = t->cap ? t->cap * 2 : 256;
    while (cap < t->len + extra + 1)
        cap *= 2;
    char *b = realloc(t->buf, cap);
    if (!b)
        return pi_fail(PI_E_NOMEM, "generated text");
    t->buf = b;
    t->cap = cap;
    return 0;
}

/* Length of the UTF-8 sequence s[0..n) starts: 1-4 when complete and valid, 0 when it is a valid
 * but incomplete prefix (more bytes may complete it), -1 when no continuation can make it valid. */
static int utf8_seq(const unsigned char *s, size_t n)
{
    const unsigned char c = s[0];
    int need;
    unsigned min_second = 0x80, max_second = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            min_second = 0xA0; /* overlong */
        if (c == 0xED)
            max_second = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            min_second = 0x90;
        if (c == 0xF4)
            max_second = 0x8F; /* > U+10FFFF */
    } else
        return -1;
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n)
            return 0;
        const unsigned lo = i == 1 ? min_second : 0x80, hi = i == 1 ? max_second : 0xBF;
        if (s[i] < lo || s[i] > hi)
            return -1;
    }
    return need;
}

/* Move valid_len forward over complete characters, replacing invalid bytes by U+FFFD in place. */
static int sanitize(struct textout *t)
{
    while (t->valid_len < t->len) {
        int k = utf8_seq((unsigned char *)t->buf + t->valid_len, t->len - t->valid_len);
        if (k == 0)
            return 0;
        if (k > 0) {
            t->valid_len += (size_t)k;
            continue;
        }
        /* one bad byte → U+FFFD (3 bytes): shift the rest right by 2 */
        if (reserve(t, 2))
            return -PI_E_NOMEM;
        memmove(t->buf + t->valid_len + 3, t->buf + t->valid_len + 1, t->len - t->valid_len - 1);
        memcpy(t->buf + t->valid_len, REPLACEMENT, 3);
        t->len += 2;
        t->valid_len += 3;
    }
    return 0;
}

int textout_push(struct textout *t, const char *piece, size_t len)
{
    if (t->stopped)
        return 1;
    if (reserve(t, len))
        return -PI_E_NOMEM;
    /* a match can only begin within a stop string's reach before the old end of the checked
     * (complete) text: earlier text was searched before */
    const size_t old = t->valid_len;
    memcpy(t->buf + t->len, piece, len);
    t->len += len;
    t->buf[t->len] = '\0';
    if (sanitize(t))
        return -PI_E_NOMEM;
    for (size_t i = 0; i < t->n_stops; i++) {
        const size_t sl = strlen(t->stops[i]);
        size_t from = old >= sl ? old - sl + 1 : 0;
        if (from < t->released)
            from = t->released; /* released text was checked before */
        for (size_t p = from; p + sl <= t->len; p++)
            if (!memcmp(t->buf + p, t->stops[i], sl)) {
                t->len = p;
                t->buf[p] = '\0';
                if (t->valid_len > p)
                    t->valid_len = p;
                t->stopped = true;
                /* the earliest match of any stop string wins: later strings only see the cut text */
                break;
            }
    }
    return t->stopped ? 1 : 0;
}

/* Bytes at the end of buf[0..end) that are a proper prefix of some stop string (may still match). */
static size_t holdback(const struct textout *t, size_t end)
{
    size_t best = 0;
    for (size_t i = 0; i < t->n_stops; i++) {
        const size_t sl = strlen(t->stops[i]);
        for (size_t k = sl - 1 < end ? sl - 1 : end; k > best; k--)
            if (!memcmp(t->buf + end - k, t->stops[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

size_t textout_take(struct textout *t, bool final, const char **out)
{
    if (final || t->stopped) {
        if (t->valid_len < t->len && !t->stopped) {
            /* an incomplete character at the very end can no longer be completed */
            t->len = t->valid_len;
            if (reserve(t, 3) == 0) {
                memcpy(t->buf + t->len, REPLACEMENT, 3);
                t->len += 3;
            }
            t->buf[t->len] = '\0';
            t->valid_len = t->len;
        }
        if (t->stopped)
            t->len = t->valid_len < t->len ? t->valid_len : t->len;
    }
    size_t end = t->valid_len;
    if (!final && !t->stopped) {
        end -= holdback(t, end);
        /* never cut a character: holdback works on bytes */
        while (end > t->released && (t->buf[end] & 0xC0) == 0x80)
            end--;
    }
    if (end < t->released)
        end = t->released;
    *out = t->buf ? t->buf + t->released : "";
    size_t n = end - t->released;
    t->released = end;
    return n;
}

const char *textout_text(const struct textout *t) { return t->buf ? t->buf : ""; }

size_t textout_utf8_copy(const char *in, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && cap > 0;) {
        int k = utf8_seq((const unsigned char *)in + i, n - i);
        const char *src = k > 0 ? in + i : REPLACEMENT;
        const size_t len = k > 0 ? (size_t)k : 3;
        if (o + len + 1 > cap)
            break;
        memcpy(out + o, src, len);
        o += len;
        i += k > 0 ? (size_t)k : 1;
    }
    if (cap > 0)
        out[o] = '\0';
    return o;
}
