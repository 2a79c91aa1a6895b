/*
 * redact: an agent's secret values taken out of what fleet shows of its
 * output (run logs, health details, fleetd's log lines that quote them).
 * Every occurrence of a value becomes "[secret KEY]", in these forms:
 *   - the bytes themselves;
 *   - URL-encoded: each byte as itself or %XX (either case; '%' itself
 *     only as %25), a space also as '+', so any encoder's choice of what
 *     to escape is covered;
 *   - base64 and base64url: the value encoded alone (with and without its
 *     '=' padding) and the characters its bytes alone decide when it sits
 *     inside a longer encoded text at each of the three alignments; a line
 *     break may sit between two characters once its line holds 16 base64
 *     characters (encoders wrap at 64 or 76; a shorter line is no wrap). A
 *     character that mixes the value's bits with its neighbours' stays: it
 *     shows at most 4 bits of the value at each end.
 * Overlapping occurrences (of one value or of several) merge: one run of
 * covered bytes becomes one marker per key found in it, in order.
 *
 * Values shorter than REDACT_MIN_LEN bytes are not redacted: replacing every
 * "on" or "1" would destroy the output and still say the value. The caller
 * is told (redactor_short_keys) so it can warn; `fleetctl secret set` warns.
 *
 * Output is a stream (a run's output arrives in chunks): a redact_stream
 * holds back only bytes that may begin a form (at most the longest form's
 * length less one byte), so a value split across chunks is still found, a
 * line that begins none is written at once (`logs -f`), and what it emits
 * does not depend on where the chunks were cut. Memory is bounded by the values (about 14
 * forms of each, three times a value's length at most, held back).
 * Everything derived from a value is wiped when freed.
 */
#ifndef FLEET_CORE_REDACT_H
#define FLEET_CORE_REDACT_H

#include <stddef.h>

struct secret_values;

#define REDACT_MIN_LEN 4

struct redactor;
struct redact_stream;

/* The forms of every value of s (s may be NULL or empty: nothing is redacted). Never fails. */
struct redactor *redactor_new(const struct secret_values *s);
void redactor_free(struct redactor *r);
static inline void redactor_freep(struct redactor **r) { redactor_free(*r); }
/* How many values were too short to redact; their keys (owned by r) in *ret_keys, may be NULL. */
size_t redactor_short_keys(const struct redactor *r, const char *const **ret_keys);
/* Whether r redacts anything at all. */
int redactor_active(const struct redactor *r);

/* Where a stream's redacted bytes go. */
typedef void (*redact_write_fn)(void *userdata, const char *data, size_t len);

/* A stream over r (which must outlive it) writing to out. */
struct redact_stream *redact_stream_new(const struct redactor *r, redact_write_fn out, void *userdata);
/* Redact len bytes; what can be decided is written now, the rest held back. */
void redact_stream_push(struct redact_stream *s, const void *data, size_t len);
/* End of the stream: write what was held back. */
void redact_stream_flush(struct redact_stream *s);
/* Frees without flushing (what was held back is wiped, not written). */
void redact_stream_free(struct redact_stream *s);

/* text redacted, as a NUL-terminated malloc'd string (*ret_len its length, may be NULL). */
char *redact_text(const struct redactor *r, const void *text, size_t len, size_t *ret_len);
/*
 * The same for a text that was cut at a size limit: its end may be the
 * start of a value, so what a stream would still hold back is dropped and
 * " [cut]" ends it.
 */
char *redact_text_cut(const struct redactor *r, const void *text, size_t len, size_t *ret_len);

#endif
