/*
 * ssh_quote: see ssh_quote.h. libc only.
 */
#include "vm/ssh_quote.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "common/names.h"
#include "common/util.h"

char *ssh_quote(const char *s)
{
	static const char safe[] =
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./,:+@%-";
	size_t n = 3;
	char *out, *o;

	if (*s && s[strspn(s, safe)] == '\0')
		return xstrdup(s);
	/* single quotes keep everything but ' itself, which becomes '\'' */
	for (const char *p = s; *p; p++)
		n += *p == '\'' ? 4 : 1;
	o = out = xmalloc(n);
	*o++ = '\'';
	for (const char *p = s; *p; p++) {
		if (*p == '\'') {
			memcpy(o, "'\\''", 4);
			o += 4;
		} else {
			*o++ = *p;
		}
	}
	*o++ = '\'';
	*o = '\0';
	return out;
}

static void append_word(char **line, size_t *len, const char *word)
{
	_cleanup_free_ char *q = ssh_quote(word);
	size_t n = strlen(q);

	*line = xrealloc(*line, *len + n + 2);
	(*line)[(*len)++] = ' ';
	memcpy(*line + *len, q, n + 1);
	*len += n;
}

int ssh_command_line(const char *agentd, const char *user, const char *const *argv, const char *const *env,
		     bool files, char **ret)
{
	/*
	 * The shell prints its pid, then becomes the command itself (through
	 * agentd run-as, or setsid and env, none of which forks here): so the
	 * exit status and signal dropbear reports are the command's, and
	 * every process it starts shares its session and process group, which
	 * `kill -9 -PID` ends. With agentd nothing of env comes before the
	 * privilege drop: the caller's LD_PRELOAD must not reach root's agentd.
	 */
	char *line;
	size_t len;

	if (!argv || !argv[0] || !argv[0][0] || strchr(argv[0], '=') || (agentd && (!user || !*user)) ||
	    (files && !agentd))
		return -EINVAL;
	for (size_t i = 0; env && env[i]; i++)
		if (!env_entry_valid(env[i]))
			return -EINVAL;
	line = xstrdup("echo $$ >&2; exec");
	len = strlen(line);
	if (agentd) {
		append_word(&line, &len, agentd);
		append_word(&line, &len, "run-as");
		append_word(&line, &len, user);
		/* The values travel on stdin (ssh_env_frame), never on a command line. */
		if (env && env[0])
			append_word(&line, &len, "--env-stdin");
		if (files)
			append_word(&line, &len, "--files-stdin");
		append_word(&line, &len, "--");
	} else {
		append_word(&line, &len, "setsid");
		append_word(&line, &len, "--");
		if (env && env[0]) {
			append_word(&line, &len, "env");
			append_word(&line, &len, "--");
			for (size_t i = 0; env[i]; i++)
				append_word(&line, &len, env[i]);
		}
	}
	for (size_t i = 0; argv[i]; i++)
		append_word(&line, &len, argv[i]);
	if (len > SSH_COMMAND_MAX) {
		explicit_bzero(line, len);	/* env may hold secrets */
		free(line);
		return -E2BIG;
	}
	*ret = line;
	return 0;
}

int ssh_env_frame(const char *const *env, char **ret, size_t *len)
{
	size_t n = 0, off;
	char head[32], *buf;
	int h;

	for (size_t i = 0; env && env[i]; i++) {
		if (!env_entry_valid(env[i]))
			return -EINVAL;
		n += strlen(env[i]) + 1;
	}
	h = snprintf(head, sizeof(head), "FLEET-ENV %zu\n", n);
	buf = xmalloc((size_t)h + n);
	memcpy(buf, head, (size_t)h);
	off = (size_t)h;
	for (size_t i = 0; env && env[i]; i++) {
		size_t l = strlen(env[i]) + 1;

		memcpy(buf + off, env[i], l);
		off += l;
	}
	*ret = buf;
	*len = off;
	return 0;
}

/* NAME=x is a valid entry exactly when NAME is a valid name. */
static bool file_name_valid(const char *name)
{
	char entry[160];

	return strlen(name) < sizeof(entry) - 2 && snprintf(entry, sizeof(entry), "%s=", name) > 0 &&
	       env_entry_valid(entry);
}

int ssh_files_frame(const struct exec_file *files, size_t n, char **ret, size_t *len)
{
	size_t body = 0, off;
	char head[40], *buf;
	int h;

	for (size_t i = 0; i < n; i++) {
		if (!file_name_valid(files[i].name))
			return -EINVAL;
		body += strlen(files[i].name) + 1 + 21 + files[i].len;
	}
	buf = xmalloc(sizeof(head) + body);
	off = sizeof(head);	/* the head goes in front once the body's length is known */
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(files[i].name) + 1;

		memcpy(buf + off, files[i].name, l);
		off += l;
		off += (size_t)sprintf(buf + off, "%zu", files[i].len) + 1;
		if (files[i].len)
			memcpy(buf + off, files[i].data, files[i].len);
		off += files[i].len;
	}
	body = off - sizeof(head);
	h = snprintf(head, sizeof(head), "FLEET-FILES %zu\n", body);
	memmove(buf + sizeof(head) - (size_t)h, head, (size_t)h);
	memmove(buf, buf + sizeof(head) - (size_t)h, (size_t)h + body);
	*ret = buf;
	*len = (size_t)h + body;
	return 0;
}
