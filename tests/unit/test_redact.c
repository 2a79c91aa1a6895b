/*
 * redact: an agent's secret values out of its output, in plain, base64
 * (every alignment, padded or not, wrapped), base64url and URL-encoded
 * form; split across chunks at every offset; overlapping values; binary.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/util.h"
#include "core/redact.h"
#include "core/secrets.h"
#include "../tap.h"

struct buf {
	char *p;
	size_t n, cap;
};

static void buf_write(void *userdata, const char *data, size_t len)
{
	struct buf *b = userdata;

	if (b->n + len + 1 > b->cap) {
		b->cap = (b->n + len + 1) * 2;
		b->p = xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->n, data, len);
	b->n += len;
	b->p[b->n] = '\0';
}

/* A set of secrets as secrets_load() gives them. */
static struct secret_values *values(size_t n, const char *const *keys, const char *const *vals, const size_t *lens)
{
	struct secret_values *s = xcalloc(1, sizeof(*s));

	s->v = xcalloc(n, sizeof(*s->v));
	s->n = n;
	for (size_t i = 0; i < n; i++) {
		size_t len = lens ? lens[i] : strlen(vals[i]);

		s->v[i].key = xstrdup(keys[i]);
		s->v[i].value = xmalloc(len + 1);
		memcpy(s->v[i].value, vals[i], len);
		s->v[i].value[len] = '\0';
		s->v[i].len = len;
	}
	return s;
}

static void values_free(struct secret_values *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].key);
		free(s->v[i].value);
	}
	free(s->v);
	free(s);
}

static struct redactor *one(const char *key, const char *value)
{
	struct secret_values *s = values(1, &key, &value, NULL);
	struct redactor *r = redactor_new(s);

	values_free(s);
	return r;
}

static void check(const struct redactor *r, const char *in, const char *want, const char *what)
{
	char *got = redact_text(r, in, strlen(in), NULL);

	is_str(got, want, "%s", what);
	free(got);
}

static char *b64(const char *s, size_t len, bool url)
{
	char *e = base64_encode(s, len);

	for (char *c = e; url && *c; c++)
		*c = *c == '+' ? '-' : *c == '/' ? '_' : *c;
	return e;
}

static void test_plain(void)
{
	struct redactor *r = one("API_TOKEN", "hunter2-s3cret");

	check(r, "token=hunter2-s3cret\n", "token=[secret API_TOKEN]\n", "plain value");
	check(r, "hunter2-s3crethunter2-s3cret", "[secret API_TOKEN]", "two adjacent occurrences: one run, one marker");
	check(r, "a hunter2-s3cret b hunter2-s3cret", "a [secret API_TOKEN] b [secret API_TOKEN]", "every occurrence");
	check(r, "hunter2-s3cre", "hunter2-s3cre", "a prefix alone is left (it is not the value)");
	check(r, "", "", "empty text");
	redactor_free(r);
}

/* The value inside a longer base64 text, at each of the three alignments, in both alphabets. */
static void test_base64(void)
{
	const char *value = "hunter2-s3cret?>~";	/* 17 bytes; '?', '>' and '~' encode to '/' and '+' */
	struct redactor *r = one("K", value);
	size_t len = strlen(value);

	for (int url = 0; url <= 1; url++) {
		char *full = b64(value, len, url), *got;

		got = redact_text(r, full, strlen(full), NULL);
		is_str(got, "[secret K]", "%s of the value alone, padded", url ? "base64url" : "base64");
		free(got);
		full[strcspn(full, "=")] = '\0';
		got = redact_text(r, full, strlen(full), NULL);
		is_str(got, "[secret K]", "%s of the value alone, unpadded", url ? "base64url" : "base64");
		free(got);
		free(full);
		for (size_t a = 0; a < 3; a++) {
			char text[64];
			char *enc, want[128];
			size_t from = (8 * a + 5) / 6, to = (8 * a + 8 * len) / 6;

			/* a bytes before it, 5 after: the characters wholly the value's go, the mixed ones stay. */
			snprintf(text, sizeof(text), "%.*s%sTAIL!", (int)a, "xyz", value);
			enc = b64(text, strlen(text), url);
			snprintf(want, sizeof(want), "%.*s[secret K]%s", (int)from, enc, enc + to);
			got = redact_text(r, enc, strlen(enc), NULL);
			is_str(got, want, "%s, value at alignment %zu of a longer text", url ? "base64url" : "base64", a);
			free(got);
			free(enc);
		}
	}
	redactor_free(r);
}

/* `base64` wraps its output at 76 columns. */
static void test_base64_wrapped(void)
{
	char value[101], *enc, text[256], *got;
	struct redactor *r;
	size_t n;

	for (int i = 0; i < 100; i++)
		value[i] = (char)('A' + (i * 7) % 26);
	value[100] = '\0';
	r = one("LONG", value);
	enc = base64_encode(value, 100);
	n = strlen(enc);
	snprintf(text, sizeof(text), "%.76s\n%s\n", enc, enc + 76);
	got = redact_text(r, text, strlen(text), NULL);
	is_str(got, "[secret LONG]\n", "base64 wrapped at 76 columns (%zu characters)", n);
	free(got);
	snprintf(text, sizeof(text), "%.64s\r\n%s\r\n", enc, enc + 64);
	got = redact_text(r, text, strlen(text), NULL);
	is_str(got, "[secret LONG]\r\n", "base64 wrapped at 64 columns with CRLF");
	free(got);
	free(enc);
	redactor_free(r);
}

static void test_url(void)
{
	struct redactor *r = one("PW", "p@ss w/rd&x=1%");

	check(r, "u=p%40ss%20w%2Frd%26x%3D1%25&z", "u=[secret PW]&z", "URL-encoded, upper-case hex");
	check(r, "u=p%40ss%20w%2frd%26x%3d1%25&z", "u=[secret PW]&z", "URL-encoded, lower-case hex");
	check(r, "u=p%40ss+w%2Frd%26x%3D1%25&z", "u=[secret PW]&z", "form-encoded (space as +)");
	check(r, "u=p@ss%20w/rd%26x%3D1%25&z", "u=[secret PW]&z", "an encoder that leaves @ and / alone");
	check(r, "%70%40%73%73%20%77%2F%72%64%26%78%3D%31%25", "[secret PW]", "every byte escaped");
	check(r, "p@ss w/rd&x=1%", "[secret PW]", "and plain");
	check(r, "p@ss w/rd&x=1%2", "[secret PW]2", "plain, followed by what looks like an escape");
	redactor_free(r);
}

/* A text holding the values in every form, pushed in 2 and 3 pieces at every offset and a byte at a time. */
static void test_chunks(void)
{
	const char *keys[] = { "A", "B" }, *vals[] = { "correct horse", "tr0ub4dor&3" };
	struct secret_values *s = values(2, keys, vals, NULL);
	struct redactor *r = redactor_new(s);
	char *a64 = b64(vals[0], strlen(vals[0]), false), *b64u = b64(vals[1], strlen(vals[1]), true);
	char *text = xasprintf("start %s|%s|correct%%20horse|tr0ub4dor%%263|%s %s end", vals[0], vals[1], a64, b64u);
	size_t len = strlen(text);
	char *whole = redact_text(r, text, len, NULL);
	bool same2 = true, same3 = true, same1;

	is_str(whole, "start [secret A]|[secret B]|[secret A]|[secret B]|[secret A] [secret B] end",
	       "every form of both values in one text");
	for (size_t i = 0; i <= len; i++) {
		struct buf out = { 0 };
		struct redact_stream *st = redact_stream_new(r, buf_write, &out);

		redact_stream_push(st, text, i);
		redact_stream_push(st, text + i, len - i);
		redact_stream_flush(st);
		redact_stream_free(st);
		if (!out.p || strcmp(out.p, whole) != 0) {
			if (same2)
				printf("# split at %zu: '%s'\n", i, out.p ? out.p : "(nothing)");
			same2 = false;
		}
		free(out.p);
		for (size_t j = i; j <= len && same3; j += 3) {
			struct buf o3 = { 0 };

			st = redact_stream_new(r, buf_write, &o3);
			redact_stream_push(st, text, i);
			redact_stream_push(st, text + i, j - i);
			redact_stream_push(st, text + j, len - j);
			redact_stream_flush(st);
			redact_stream_free(st);
			same3 = o3.p && strcmp(o3.p, whole) == 0;
			free(o3.p);
		}
	}
	ok(same2, "split in two at each of %zu offsets: the same output", len + 1);
	ok(same3, "split in three at many offset pairs: the same output");
	{
		struct buf out = { 0 };
		struct redact_stream *st = redact_stream_new(r, buf_write, &out);

		bool prefix = true;

		for (size_t i = 0; i < len; i++) {
			redact_stream_push(st, text + i, 1);
			prefix = prefix && (!out.p || strncmp(out.p, whole, out.n) == 0);
		}
		redact_stream_flush(st);
		redact_stream_free(st);
		same1 = out.p && strcmp(out.p, whole) == 0;
		ok(same1, "a byte at a time: the same output");
		ok(prefix, "and what was written after each byte was already final (a start of the whole output)");
		free(out.p);
	}
	free(whole);
	free(text);
	free(a64);
	free(b64u);
	redactor_free(r);
	values_free(s);
}

/* Values that overlap in the text, or contain each other: no byte of any of them shows. */
static void test_overlap(void)
{
	const char *keys[] = { "A", "B", "C" }, *vals[] = { "secretpass", "pass1234", "cretp" };
	struct secret_values *s = values(3, keys, vals, NULL);
	struct redactor *r = redactor_new(s);

	check(r, "x secretpass1234 y", "x [secret A][secret B] y", "two values overlapping: one run, both named");
	check(r, "x pass1234secretpass y", "x [secret B][secret A] y", "in the other order");
	check(r, "x cretp y", "x [secret C] y", "a value inside another, alone");
	check(r, "x secretpass y", "x [secret A] y", "a value inside another: the outer one covers it");
	redactor_free(r);
	values_free(s);
	r = one("R", "abab");
	check(r, "xababababy", "x[secret R]y", "a value overlapping itself");
	redactor_free(r);
}

/* Binary output: NULs and high bytes around and inside the value; every other byte kept as it was. */
static void test_binary(void)
{
	static const char val[] = { 'k', '\0', '\xff', 'e', '\x80', 'y' };
	static const char text[] = { '\0', '\x01', 'k', '\0', '\xff', 'e', '\x80', 'y', '\xfe', '\0' };
	static const char want[] = "\0\x01[secret BIN]\xfe\0";
	const char *key = "BIN", *vp = val;
	size_t vlen = sizeof(val), n;
	struct secret_values *s = values(1, &key, &vp, &vlen);
	struct redactor *r = redactor_new(s);
	char *got = redact_text(r, text, sizeof(text), &n);

	ok(n == sizeof(want) - 1 && memcmp(got, want, n) == 0, "binary value in binary output");
	free(got);
	redactor_free(r);
	values_free(s);
}

static void test_short_and_none(void)
{
	const char *keys[] = { "PIN", "OK" }, *vals[] = { "123", "long enough" };
	struct secret_values *s = values(2, keys, vals, NULL);
	struct redactor *r = redactor_new(s);
	const char *const *shorts;

	is_int(redactor_short_keys(r, &shorts), 1, "one value too short to redact");
	is_str(shorts[0], "PIN", "its key is reported");
	check(r, "pin 123, long enough", "pin 123, [secret OK]", "the short value stays, the other goes");
	redactor_free(r);
	values_free(s);
	r = redactor_new(NULL);
	ok(!redactor_active(r), "no secrets: nothing to redact");
	check(r, "anything at all", "anything at all", "no secrets: text unchanged");
	redactor_free(r);
}

/* What the stream holds back is bounded by the longest form, whatever it is given. */
static void test_bounded(void)
{
	struct redactor *r = one("K", "0123456789abcdef");	/* longest: its 24 base64 characters, wrapped */
	struct buf out = { 0 };
	struct redact_stream *st = redact_stream_new(r, buf_write, &out);
	char chunk[1000];
	bool bounded = true;

	memset(chunk, 'z', sizeof(chunk));
	for (size_t i = 1; i <= 2000; i++) {
		redact_stream_push(st, chunk, sizeof(chunk));
		bounded = bounded && out.n + 3 * 24 >= i * sizeof(chunk);
	}
	ok(bounded, "after each of 2000 pushes of 1000 bytes, at most 72 bytes are held back");
	redact_stream_flush(st);
	is_int(out.n, 2000 * sizeof(chunk), "flush writes the rest");
	redact_stream_free(st);
	free(out.p);
	redactor_free(r);
}

/*
 * Only what may begin a value waits for more bytes: `fleetctl logs -f` shows
 * a line as soon as it is written, not when later output pushes it out.
 */
static void test_prompt(void)
{
	struct redactor *r = one("K", "hunter2-s3cret");
	struct buf out = { 0 };
	struct redact_stream *st = redact_stream_new(r, buf_write, &out);

	redact_stream_push(st, "all good\n", 9);
	is_str(out.p, "all good\n", "a line that begins no value is written at once");
	redact_stream_push(st, "token=hunter2", 13);
	is_str(out.p, "all good\ntoken=", "a start of the value waits");
	redact_stream_push(st, "-s3cret done\n", 13);
	is_str(out.p, "all good\ntoken=[secret K] done\n", "and becomes the marker once the value is complete");
	redact_stream_push(st, "url=%68%75", 10);
	is_str(out.p, "all good\ntoken=[secret K] done\nurl=", "a start of its URL form waits (%%68%%75 is \"hu\")");
	redact_stream_push(st, "%6", 2);
	is_str(out.p, "all good\ntoken=[secret K] done\nurl=", "half an escape that may go on waits");
	redact_stream_push(st, "Ex\n", 3);
	is_str(out.p, "all good\ntoken=[secret K] done\nurl=%68%75%6Ex\n",
	       "an escape that leaves the value (%%6E is not n) is written with all before it");
	redact_stream_push(st, "aHVudGVy", 8);	/* base64 of "hunter" */
	ok(out.n == strlen("all good\ntoken=[secret K] done\nurl=%68%75%6Ex\n"), "a start of its base64 form waits");
	redact_stream_push(st, "!\n", 2);
	ok(out.p && strcmp(out.p + out.n - 10, "aHVudGVy!\n") == 0, "written once the form is left");
	redact_stream_flush(st);
	redact_stream_free(st);
	free(out.p);
	/* a run that printed nothing: flushed and freed without a byte (no buffer was ever made) */
	st = redact_stream_new(r, buf_write, &out);
	out = (struct buf){ 0 };
	redact_stream_flush(st);
	redact_stream_free(st);
	ok(out.n == 0, "a stream given nothing flushes nothing");
	redactor_free(r);
}

/* A text cut at a size limit may end in the start of a value: what could be is dropped. */
static void test_cut(void)
{
	struct redactor *r = one("K", "hunter2-s3cret");
	char text[300], *got;

	memset(text, 'x', 200);
	snprintf(text + 200, sizeof(text) - 200, "%s", "token=hunter2-s3");	/* the limit fell inside the value */
	got = redact_text_cut(r, text, strlen(text), NULL);
	ok(!strstr(got, "hunter2"), "cut: the start of the value is not shown");
	ok(strlen(got) > 100 && strncmp(got, text, 100) == 0, "cut: what comes well before the end is kept");
	ok(strlen(got) > 6 && strcmp(got + strlen(got) - 6, " [cut]") == 0, "cut: and it says it was cut");
	free(got);
	redactor_free(r);
	r = redactor_new(NULL);
	got = redact_text_cut(r, "no secrets", 10, NULL);
	is_str(got, "no secrets", "cut, without secrets: unchanged");
	free(got);
	redactor_free(r);
}

int main(void)
{
	test_cut();
	test_plain();
	test_base64();
	test_base64_wrapped();
	test_url();
	test_chunks();
	test_overlap();
	test_binary();
	test_short_and_none();
	test_bounded();
	test_prompt();
	return tap_done();
}
