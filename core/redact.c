/* redact: see redact.h. */
#include "core/redact.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/util.h"
#include "core/secrets.h"

enum form {
	FORM_BYTES,	/* exactly these bytes */
	FORM_URL,	/* the value percent-encoded, byte by byte as the encoder chose */
	FORM_B64,	/* these base64 characters, a line break allowed between two */
};

struct pattern {
	unsigned char *bytes;
	size_t len;
	uint8_t key;		/* index into keys */
	uint8_t form;
};

struct redactor {
	char **keys;		/* the keys of the values redacted */
	size_t n_keys;
	char **short_keys;	/* values too short to redact */
	size_t n_short;
	struct pattern *pats;
	size_t n_pats;
	size_t maxspan;		/* the most bytes one match can cover */
	/* Patterns by the first byte a match can start with (a URL form: also '%' or '+'). */
	uint32_t *by_first[256];
	size_t n_first[256];
	char **markers;		/* "[secret KEY]" per key */
};

struct redact_stream {
	const struct redactor *r;
	redact_write_fn out;
	void *userdata;
	unsigned char *buf;	/* bytes not yet written */
	uint8_t *mask;		/* per byte of buf: 1 + the key of a match covering it, or 0 */
	size_t n, cap;
	size_t scanned;		/* matches starting before buf + scanned are all marked */
	bool in_run;		/* the last byte written was covered: its run goes on */
	size_t written_run;	/* base64 characters the written bytes end with (at most B64_WRAP_MIN) */
	uint8_t named[(SECRET_KEYS_MAX + 7) / 8];	/* keys whose marker this run has shown */
};

/*
 * A line break inside a base64 form counts only after this many base64
 * characters on its line: encoders wrap at 64 or 76 columns, and a short
 * line ending in what begins a form ("...good\n") is then decided at once.
 */
#define B64_WRAP_MIN 16

/* The most bytes pushed through at once: the stream's buffer stays at maxspan + this. */
#define PUSH_STEP (64u << 10)

static void wipe_free(void *p, size_t len)
{
	if (p) {
		explicit_bzero(p, len);
		free(p);
	}
}

static void add_pattern(struct redactor *r, size_t *cap, uint8_t key, enum form form, const void *bytes,
			size_t len)
{
	struct pattern *p;

	if (len == 0)
		return;
	for (size_t i = 0; i < r->n_pats; i++)	/* one form can equal another (no padding, no escapes) */
		if (r->pats[i].form == form && r->pats[i].len == len && memcmp(r->pats[i].bytes, bytes, len) == 0)
			return;
	if (r->n_pats == *cap) {
		*cap = *cap ? *cap * 2 : 16;
		r->pats = xrealloc(r->pats, *cap * sizeof(*r->pats));
	}
	p = &r->pats[r->n_pats++];
	p->bytes = xmalloc(len);
	memcpy(p->bytes, bytes, len);
	p->len = len;
	p->key = key;
	p->form = (uint8_t)form;
}

/* base64 (url: base64url) of a zero bytes then value; the padded text, malloc'd. */
static char *encode_at(const unsigned char *value, size_t len, size_t a, bool url)
{
	size_t n = a + len;
	unsigned char *buf = xcalloc(1, n);
	char *enc;

	memcpy(buf + a, value, len);
	enc = base64_encode(buf, n);
	wipe_free(buf, n);
	if (url)
		for (char *c = enc; *c; c++)
			*c = *c == '+' ? '-' : *c == '/' ? '_' : *c;
	return enc;
}

static void add_base64(struct redactor *r, size_t *cap, uint8_t key, const unsigned char *value, size_t len,
		       bool url)
{
	char *full = encode_at(value, len, 0, url);
	size_t flen = strlen(full), unpadded = flen;

	add_pattern(r, cap, key, FORM_B64, full, flen);
	while (unpadded > 0 && full[unpadded - 1] == '=')
		unpadded--;
	add_pattern(r, cap, key, FORM_B64, full, unpadded);
	wipe_free(full, flen);
	/*
	 * Inside a longer text the value starts at bit 8a of a 3-byte group:
	 * character k (bits 6k..6k+5) is the value's alone when it starts at
	 * or after bit 8a and ends by the value's last bit.
	 */
	for (size_t a = 0; a < 3; a++) {
		char *enc = encode_at(value, len, a, url);
		size_t elen = strlen(enc), from = (8 * a + 5) / 6, to = (8 * a + 8 * len) / 6;

		if (to > from)
			add_pattern(r, cap, key, FORM_B64, enc + from, to - from);
		wipe_free(enc, elen);
	}
}

static size_t form_span(const struct pattern *p)
{
	return p->form == FORM_BYTES ? p->len : 3 * p->len;	/* %XX per byte; a CRLF after a character */
}

static void index_pattern(struct redactor *r, uint32_t i, const uint8_t firsts[3], size_t nf)
{
	for (size_t k = 0; k < nf; k++) {
		uint8_t c = firsts[k];
		bool dup = false;

		for (size_t j = 0; j < k; j++)
			dup = dup || firsts[j] == c;
		if (dup)
			continue;
		r->by_first[c] = xrealloc(r->by_first[c], (r->n_first[c] + 1) * sizeof(uint32_t));
		r->by_first[c][r->n_first[c]++] = i;
	}
}

struct redactor *redactor_new(const struct secret_values *s)
{
	struct redactor *r = xcalloc(1, sizeof(*r));
	size_t cap = 0;

	for (size_t i = 0; s && i < s->n && i < SECRET_KEYS_MAX; i++) {
		const struct secret_value *v = &s->v[i];
		uint8_t key;

		if (v->len < REDACT_MIN_LEN) {
			r->short_keys = xrealloc(r->short_keys, (r->n_short + 1) * sizeof(char *));
			r->short_keys[r->n_short++] = xstrdup(v->key);
			continue;
		}
		key = (uint8_t)r->n_keys;
		r->keys = xrealloc(r->keys, (r->n_keys + 1) * sizeof(char *));
		r->markers = xrealloc(r->markers, (r->n_keys + 1) * sizeof(char *));
		r->keys[r->n_keys] = xstrdup(v->key);
		r->markers[r->n_keys] = xasprintf("[secret %s]", v->key);
		r->n_keys++;
		add_pattern(r, &cap, key, FORM_BYTES, v->value, v->len);
		add_pattern(r, &cap, key, FORM_URL, v->value, v->len);
		add_base64(r, &cap, key, v->value, v->len, false);
		add_base64(r, &cap, key, v->value, v->len, true);
	}
	for (size_t i = 0; i < r->n_pats; i++) {
		const struct pattern *p = &r->pats[i];
		uint8_t firsts[3] = { p->bytes[0] };
		size_t nf = 1;

		if (p->form == FORM_URL) {
			firsts[nf++] = '%';
			if (p->bytes[0] == ' ')
				firsts[nf++] = '+';
			if (p->bytes[0] == '%')
				nf = 1, firsts[0] = '%';	/* '%' itself only as %25 */
		}
		index_pattern(r, (uint32_t)i, firsts, nf);
		if (form_span(p) > r->maxspan)
			r->maxspan = form_span(p);
	}
	return r;
}

void redactor_free(struct redactor *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_pats; i++)
		wipe_free(r->pats[i].bytes, r->pats[i].len);
	free(r->pats);
	for (size_t i = 0; i < 256; i++)
		free(r->by_first[i]);
	for (size_t i = 0; i < r->n_keys; i++) {
		free(r->keys[i]);
		free(r->markers[i]);
	}
	free(r->keys);
	free(r->markers);
	for (size_t i = 0; i < r->n_short; i++)
		free(r->short_keys[i]);
	free(r->short_keys);
	free(r);
}

size_t redactor_short_keys(const struct redactor *r, const char *const **ret_keys)
{
	if (ret_keys)
		*ret_keys = (const char *const *)r->short_keys;
	return r->n_short;
}

int redactor_active(const struct redactor *r)
{
	return r && r->n_pats > 0;
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool is_b64_char(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/' ||
	       c == '=' || c == '-' || c == '_';
}

/*
 * The length of p's match at t (n bytes there), or 0. t is preceded by
 * run_before base64 characters on its line (see B64_WRAP_MIN). When the n bytes end
 * before p is decided (they are a start of one of its forms), 0 and *more
 * is set: more bytes may still make a match.
 */
static size_t match(const struct pattern *p, const unsigned char *t, size_t n, size_t run_before, bool *more)
{
	size_t i = 0, line = 0;	/* where t's part of the current line starts */

	switch (p->form) {
	case FORM_BYTES: {
		size_t k = n < p->len ? n : p->len;

		if (memcmp(t, p->bytes, k) != 0)
			return 0;
		if (k < p->len)
			*more = true;
		return k < p->len ? 0 : p->len;
	}
	case FORM_URL:
		for (size_t j = 0; j < p->len; j++) {
			unsigned char b = p->bytes[j];

			if (i >= n) {
				*more = true;
				return 0;
			}
			if (t[i] == '%') {	/* an escape, always: a literal '%' is no URL form */
				if ((i + 1 < n && hexval(t[i + 1]) != b >> 4) || (i + 2 < n && hexval(t[i + 2]) != (b & 15)))
					return 0;
				if (i + 2 >= n) {
					*more = true;
					return 0;
				}
				i += 3;
			} else if (b != '%' && (t[i] == b || (b == ' ' && t[i] == '+'))) {
				i++;
			} else {
				return 0;
			}
		}
		return i;
	case FORM_B64:
		for (size_t j = 0; j < p->len; j++) {
			bool wrap = j > 0 && (line ? i - line : run_before + i) >= B64_WRAP_MIN;

			if (wrap && i < n && t[i] == '\r')
				i++;
			if (wrap && i < n && t[i] == '\n')
				line = ++i;
			if (i >= n) {
				*more = true;
				return 0;
			}
			if (t[i] != p->bytes[j])
				return 0;
			i++;
		}
		return i;
	}
	return 0;
}

struct redact_stream *redact_stream_new(const struct redactor *r, redact_write_fn out, void *userdata)
{
	struct redact_stream *s = xcalloc(1, sizeof(*s));

	s->r = r;
	s->out = out;
	s->userdata = userdata;
	return s;
}

/*
 * Mark every match that starts at buf + at. Unless final (the stream ends
 * here), false and nothing marked when the bytes from at on are too few to
 * decide: they begin a form that more bytes may complete.
 */
static bool scan_at(struct redact_stream *s, size_t at, bool final)
{
	const struct redactor *r = s->r;
	unsigned char c = s->buf[at];
	size_t run = 0;
	bool more = false;

	while (run < B64_WRAP_MIN && run < at && is_b64_char(s->buf[at - run - 1]))
		run++;
	if (run == at)
		run = run + s->written_run < B64_WRAP_MIN ? run + s->written_run : B64_WRAP_MIN;
	for (size_t k = 0; k < r->n_first[c] && !final && !more; k++)
		match(&r->pats[r->by_first[c][k]], s->buf + at, s->n - at, run, &more);
	if (more)
		return false;
	for (size_t k = 0; k < r->n_first[c]; k++) {
		const struct pattern *p = &r->pats[r->by_first[c][k]];
		size_t m = match(p, s->buf + at, s->n - at, run, &more);

		for (size_t i = at; i < at + m; i++)
			if (!s->mask[i])
				s->mask[i] = (uint8_t)(p->key + 1);
	}
	return true;
}

/* Write buf[0, upto) (every match that can cover it is marked) and drop it from buf. */
static void emit(struct redact_stream *s, size_t upto)
{
	size_t i = 0;

	while (i < upto) {
		size_t j = i;

		if (!s->mask[i]) {
			while (j < upto && !s->mask[j])
				j++;
			if (s->in_run) {
				s->in_run = false;
				memset(s->named, 0, sizeof(s->named));
			}
			s->out(s->userdata, (const char *)s->buf + i, j - i);
			i = j;
			continue;
		}
		for (; j < upto && s->mask[j]; j++) {
			unsigned key = s->mask[j] - 1u;

			if (!(s->named[key / 8] & (1u << (key % 8)))) {
				s->named[key / 8] |= (uint8_t)(1u << (key % 8));
				s->out(s->userdata, s->r->markers[key], strlen(s->r->markers[key]));
			}
		}
		s->in_run = true;
		i = j;
	}
	for (i = upto; i > 0 && upto - i < B64_WRAP_MIN && is_b64_char(s->buf[i - 1]); i--)
		;
	if (i == 0)
		s->written_run = upto + s->written_run < B64_WRAP_MIN ? upto + s->written_run : B64_WRAP_MIN;
	else
		s->written_run = upto - i;
	if (!s->buf)
		return;	/* nothing was ever pushed (a flush of a silent run) */
	explicit_bzero(s->buf, upto);
	memmove(s->buf, s->buf + upto, s->n - upto);
	memmove(s->mask, s->mask + upto, s->n - upto);
	s->n -= upto;
	s->scanned -= upto;
}

static void push_step(struct redact_stream *s, const unsigned char *data, size_t len)
{
	if (s->n + len > s->cap) {
		size_t cap = s->n + len;
		unsigned char *nb = xmalloc(cap);

		if (s->n)	/* the first push: no buffer yet (memcpy from NULL is undefined even for 0 bytes) */
			memcpy(nb, s->buf, s->n);
		wipe_free(s->buf, s->cap);	/* never leave a copy behind in freed memory */
		s->buf = nb;
		s->mask = xrealloc(s->mask, cap);
		s->cap = cap;
	}
	memcpy(s->buf + s->n, data, len);
	memset(s->mask + s->n, 0, len);
	s->n += len;
	/*
	 * A match starting at i is decided once buf holds the longest form from
	 * i on, or earlier, once the bytes from i on begin no form at all: so a
	 * line of output ending in what starts no value is written at once
	 * (`fleetctl logs -f` does not lag), and only a possible start waits.
	 */
	while (s->scanned < s->n && scan_at(s, s->scanned, false))	/* always true with span bytes there */
		s->scanned++;
	emit(s, s->scanned);
}

void redact_stream_push(struct redact_stream *s, const void *data, size_t len)
{
	const unsigned char *d = data;

	if (!redactor_active(s->r)) {
		if (len)
			s->out(s->userdata, data, len);
		return;
	}
	while (len > 0) {
		size_t step = len < PUSH_STEP ? len : PUSH_STEP;

		push_step(s, d, step);
		d += step;
		len -= step;
	}
}

void redact_stream_flush(struct redact_stream *s)
{
	if (!redactor_active(s->r))
		return;
	while (s->scanned < s->n)	/* the end: what fits before it is all there is */
		scan_at(s, s->scanned++, true);
	emit(s, s->n);
	s->in_run = false;
	memset(s->named, 0, sizeof(s->named));
}

void redact_stream_free(struct redact_stream *s)
{
	if (!s)
		return;
	wipe_free(s->buf, s->cap);
	free(s->mask);
	free(s);
}

struct text_out {
	char *buf;
	size_t n, cap;
};

static void text_write(void *userdata, const char *data, size_t len)
{
	struct text_out *t = userdata;

	if (t->n + len + 1 > t->cap) {
		t->cap = (t->n + len + 1) * 2;
		t->buf = xrealloc(t->buf, t->cap);
	}
	memcpy(t->buf + t->n, data, len);
	t->n += len;
}

static char *text_redact(const struct redactor *r, const void *text, size_t len, bool cut, size_t *ret_len)
{
	static const char cut_note[] = " [cut]";
	struct text_out t = { xmalloc(len + 1), 0, len + 1 };
	struct redact_stream *s = redact_stream_new(r, text_write, &t);

	redact_stream_push(s, text, len);
	if (!cut)
		redact_stream_flush(s);
	else if (redactor_active(r))
		text_write(&t, cut_note, sizeof(cut_note) - 1);	/* what was held back goes unseen */
	redact_stream_free(s);
	t.buf[t.n] = '\0';
	if (ret_len)
		*ret_len = t.n;
	return t.buf;
}

char *redact_text(const struct redactor *r, const void *text, size_t len, size_t *ret_len)
{
	return text_redact(r, text, len, false, ret_len);
}

char *redact_text_cut(const struct redactor *r, const void *text, size_t len, size_t *ret_len)
{
	return text_redact(r, text, len, true, ret_len);
}
