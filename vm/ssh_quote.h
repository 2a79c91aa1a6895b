/*
 * ssh_quote: the command line fleetd sends on an SSH exec channel, built
 * with libc alone: POSIX shell quoting of each word and the wrapper that
 * prints the shell's pid, starts its own session and (with agentd) drops
 * privileges before any of the caller's environment is set.
 */
#ifndef FLEET_SSH_QUOTE_H
#define FLEET_SSH_QUOTE_H

#include <stdbool.h>
#include <stddef.h>

/* Longest command line sent; dropbear refuses more than 9000 bytes. */
#define SSH_COMMAND_MAX 8192

/* Quote s as one word for a POSIX shell (single quotes unless plainly safe). */
char *ssh_quote(const char *s);

/*
 * The command line that runs argv with the extra env in its own session
 * (so a timeout can kill every process it started) and first writes the
 * shell's pid as one line on stderr, which ssh_exec strips. With agentd
 * (its path in the guest), agentd starts the session, drops to user,
 * clears the environment and sets env only after the drop, so nothing in
 * env reaches a process running as root unless user is root. env (which
 * holds an agent's secrets) is never on this line, where any process in
 * the guest could read it in /proc: the caller sends ssh_env_frame(env)
 * as the first bytes of stdin, which agentd reads before the command runs:
 *   echo $$ >&2; exec AGENTD run-as USER --env-stdin -- 'argv0' 'argv1'...
 * Without (agentd NULL; user unused: test servers only, no guest runs this)
 * the login user runs it directly, env on the line:
 *   echo $$ >&2; exec setsid -- env -- 'NAME=VALUE'... 'argv0' 'argv1'...
 * -EINVAL for an empty argv, an argv[0] containing '=', an env entry
 * that is not NAME=VALUE with a shell-name NAME, or agentd without user;
 * -E2BIG past SSH_COMMAND_MAX.
 */
int ssh_command_line(const char *agentd, const char *user, const char *const *argv, const char *const *env,
		     bool files, char **ret);

/*
 * What agentd run-as --env-stdin reads first from stdin: "FLEET-ENV N\n",
 * then the N bytes of env's entries, each ending in a NUL. *ret (caller
 * wipes and frees) and *len; -EINVAL for an entry that is not NAME=VALUE.
 */
int ssh_env_frame(const char *const *env, char **ret, size_t *len);

struct exec_file;

/*
 * What agentd run-as --files-stdin reads from stdin after the environment
 * frame (files true above): "FLEET-FILES N\n", then N bytes of records,
 * each NAME, a NUL, the data's length in decimal, a NUL, the data. agentd
 * writes them on a tmpfs of its own mount namespace (never the guest's
 * disk). *ret (caller wipes and frees) and *len; -EINVAL for a name that
 * is not an environment variable name.
 */
int ssh_files_frame(const struct exec_file *files, size_t n, char **ret, size_t *len);

#endif
