/*
 * shell: see shell.h. libc only; the LINE is split by wordexp(3) (no
 * command substitution), and taken only when quoting its words again gives
 * back exactly what came: then the words are what /bin/sh would have made
 * of it, with no expansion, glob or operator in play.
 */
#include "agentd/shell.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wordexp.h>

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

/* Append word to out at *len (the caller made room) quoted as ssh_quote() does. */
static void quote_append(char *out, size_t *len, const char *word)
{
	static const char safe[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./,:+@%-";

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

int shell_main(int argc, char **argv, int (*run_as)(int argc, char **argv))
{
	const char *line, *rest;
	wordexp_t we;

	if (argc != 3 || strcmp(argv[1], "-c") != 0)
		return fallback(NULL);
	line = argv[2];
	if (strncmp(line, line_head, sizeof(line_head) - 1) != 0)
		return fallback(line);
	rest = line + sizeof(line_head) - 1;
	if (wordexp(rest, &we, WRDE_NOCMD | WRDE_UNDEF) != 0)
		return fallback(line);
	if (we.we_wordc < 3 || strcmp(we.we_wordv[1], "run-as") != 0 || !canonical(rest, we.we_wordv, we.we_wordc) ||
	    !shell_is_self(we.we_wordv[0])) {
		wordfree(&we);
		return fallback(line);
	}
	/* What `echo $$ >&2` printed: this process becomes the command, as the shell's did. */
	dprintf(STDERR_FILENO, "%ld\n", (long)getpid());
	/* we's words stay: run_as keeps pointers into them until it execs. */
	return run_as((int)we.we_wordc - 1, we.we_wordv + 1);
}
