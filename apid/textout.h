/* textout.h — the generated text as it may be shown: token pieces appended as raw bytes, stop
 * strings cut, and only what can no longer change released.
 *
 * A stop string may arrive split over several tokens ("\n\n" as "\n" + "\n"): the tail of the text
 * that is a prefix of some stop string is held back until the next piece shows whether it matches.
 * A UTF-8 character may also arrive split (byte-fallback tokens): an incomplete sequence at the end
 * is held back too, and bytes that can never form a character become U+FFFD, so every released
 * chunk is valid UTF-8 (JSON strings must be). Not thread-safe: one per request. */
#ifndef PI_APID_TEXTOUT_H
#define PI_APID_TEXTOUT_H

#include <stdbool.h>
#include <stddef.h>

#define TEXTOUT_MAX_STOPS 16
#define TEXTOUT_MAX_STOP_LEN 256

struct textout {
    char *buf;          /* sanitized text so far (valid UTF-8 up to valid_len) */
    size_t len, cap;
    size_t valid_len;   /* bytes of buf that are complete characters */
    size_t released;    /* bytes handed out by textout_take */
    char *stops[TEXTOUT_MAX_STOPS];
    size_t n_stops;
    bool stopped;       /* a stop string matched: buf ends where it began */
};

void textout_init(struct textout *t);
void textout_fini(struct textout *t);
/* Copies s. 0, or -PI_E_RANGE/-PI_E_INVAL for too many, too long or empty stop strings. */
int textout_add_stop(struct textout *t, const char *s, size_t len);
/* Append one piece (any bytes). Returns true when a stop string matched (nothing more may be
 * appended), false otherwise; negative on out of memory. */
int textout_push(struct textout *t, const char *piece, size_t len);
/* The releasable text since the last take: *out points into the buffer (valid until the next push),
 * its length is returned. final: the generation ended, release everything (an incomplete
 * character at the very end becomes U+FFFD). */
size_t textout_take(struct textout *t, bool final, const char **out);
/* The whole text released or releasable so far, NUL-terminated (after a final take: the answer). */
const char *textout_text(const struct textout *t);

/* in[0..n) as valid UTF-8 into out (cap >= 3 * n + 1 always suffices): a byte that does not begin a
 * complete character becomes U+FFFD. NUL-terminated; returns the length. For one token's text, which
 * may be part of a character (byte-fallback tokens). */
size_t textout_utf8_copy(const char *in, size_t n, char *out, size_t cap);

#endif
