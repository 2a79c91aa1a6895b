/*
 * shell: see shell.h. libc only. The LINE is split into the words it would
 * be if ssh_quote() made it (split_quoted), and taken only when quoting
 * those words again gives back exactly what came: then the words are what
 * /bin/sh would have made of it, with no expansion, glob or operator in
 * play. Not wordexp(3): its tilde expansion links getpwnam_r, whose NSS
 * must not be in a static agentd (common/users.h); the round trip makes
 * this small inverse of ssh_quote() as strict as the quoting itself.
 */
#include "agentd/shell.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* What fleetd's line starts with (vm/ssh_quote.c): the pid, then the exec. */
static const char line_head[] = "echo $$ >&2; exec ";

bool shell_invoked(int argc, char **argv)
{
	return (argc == 3 && strcmp(argv[1], "-c") == 0) || (argc >= 1 && argv[0] && argv[0][0] == '-');
}

bool shell_is_self(const char *path)
{
	struct stat a, b;

	return path && stat(path, &a) == 0 && stat("/proc/self/exe", &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

/* The bytes ssh_quote() leaves unquoted: none of them means anything to /bin/sh. */
static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./,:+@%-";

/* Append word to out at *len (the caller made room) quoted as ssh_quote() does. */
static void quote_append(char *out, size_t *len, const char *word)
{
	if (*word && word[strspn(word, safe)] == '\0') {
		memcpy(out + *len, word, strlen(word));
		*len += strlen(word);
		return;
	}
	out[(*len)++] = '\'';
	for (const char *p = word; *p; p++) {
		if (*p == '\'') {
			memcpy(out + *len, "'\\''", 4);
			*len += 4;
		} else {
			out[(*len)++] = *p;
		}
	}
	out[(*len)++] = '\'';
}

/* Is rest exactly words[0..n) quoted as ssh_quote() does and joined by single spaces? */
static bool canonical(const char *rest, char **words, size_t n)
{
	size_t room = 1, len = 0;
	char *out;
	bool same;

	for (size_t k = 0; k < n; k++)
		room += 4 * strlen(words[k]) + 3;	/* at worst every byte a ' */
	if (!(out = malloc(room)))
		return false;
	for (size_t k = 0; k < n; k++) {
		if (k)
			out[len++] = ' ';
		quote_append(out, &len, words[k]);
	}
	out[len] = '\0';
	same = strcmp(out, rest) == 0;
	free(out);
	return same;
}

/* SHELL_FALLBACK with the same arguments: what root's shell was. */
static int fallback(const char *line)
{
	if (setenv("SHELL", SHELL_FALLBACK, 1) < 0)
		return 126;
	if (line)
		execl(SHELL_FALLBACK, "sh", "-c", line, (char *)NULL);
	else
		execl(SHELL_FALLBACK, "-sh", (char *)NULL);
	fprintf(stderr, "agentd: cannot run %s: %s\n", SHELL_FALLBACK, strerror(errno));
	return errno == ENOENT ? 127 : 126;
}

/*
 * rest split as /bin/sh splits a line of ssh_quote()d words joined by
 * spaces: a safe byte stands for itself, '...' for what is inside, \' for
 * a quote, a space ends a word. Anything else (an operator, $, a glob, an
 * open quote) is not such a line: false, and the line is the shell's.
 * *words_ret (NULL-terminated, *n_ret words) points into *buf_ret; both
 * the caller's.
 */
static bool split_quoted(const char *rest, char ***words_ret, size_t *n_ret, char **buf_ret)
{
	size_t len = strlen(rest), room = 2, n = 0;
	char *buf, *o, **words;
	const char *p = rest;

	for (const char *c = rest; *c; c++)
		room += *c == ' ';
	buf = malloc(len + 1);
	words = calloc(room, sizeof(*words));
	if (!buf || !words)
		goto bad;
	o = buf;
	while (*p) {
		words[n++] = o;
		while (*p && *p != ' ') {
			if (*p == '\'') {
				const char *end = strchr(p + 1, '\'');

				if (!end)
					goto bad;
				memcpy(o, p + 1, (size_t)(end - p - 1));
				o += end - p - 1;
				p = end + 1;
			} else if (p[0] == '\\' && p[1] == '\'') {
				*o++ = '\'';
				p += 2;
			} else if (strchr(safe, *p)) {
				*o++ = *p++;
			} else {
				goto bad;
			}
		}
		*o++ = '\0';
		if (*p == ' ' && !*++p)
			goto bad;	/* a trailing space: not ssh_quote()'s */
	}
	*words_ret = words;
	*n_ret = n;
	*buf_ret = buf;
	return true;
bad:
	free(words);
	free(buf);
	return false;
}

int shell_main(int argc, char **argv, int (*run_as)(int argc, char **argv))
{
	const char *line, *rest;
	char **words, *buf;
	size_t n;
	int r;

	if (argc != 3 || strcmp(argv[1], "-c") != 0)
		return fallback(NULL);
	line = argv[2];
	if (strncmp(line, line_head, sizeof(line_head) - 1) != 0)
		return fallback(line);
	rest = line + sizeof(line_head) - 1;
	if (!split_quoted(rest, &words, &n, &buf))
		return fallback(line);
	if (n < 3 || strcmp(words[1], "run-as") != 0 || !canonical(rest, words, n) || !shell_is_self(words[0])) {
		free(words);
		free(buf);
		return fallback(line);
	}
	/* What `echo $$ >&2` printed: this process becomes the command, as the shell's did. */
	dprintf(STDERR_FILENO, "%ld\n", (long)getpid());
	/* run_as keeps pointers into words until it execs; it returns only on failure. */
	r = run_as((int)n - 1, words + 1);
	free(words);
	free(buf);
	return r;
}
