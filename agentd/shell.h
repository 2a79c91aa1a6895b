/*
 * shell: agentd as the guest root's login shell, so an exec as the agent
 * starts two programs (agentd, the command) rather than three (a shell,
 * agentd, the command). dropbear runs the login shell as `agentd -c LINE`
 * (a command) or as `-agentd` (an interactive login).
 */
#ifndef FLEET_AGENTD_SHELL_H
#define FLEET_AGENTD_SHELL_H

#include <stdbool.h>

/* The shell anything else gets: what root's login shell was before. */
#define SHELL_FALLBACK "/bin/sh"

/* Was agentd started as a login shell (argv as dropbear makes it)? */
bool shell_invoked(int argc, char **argv);

/*
 * Run as that shell. A LINE exactly as fleetd's ssh_command_line() makes
 * it for agentd ("echo $$ >&2; exec AGENTD run-as ..." with AGENTD this
 * very program, each word quoted as ssh_quote() does) is done here: the
 * pid line on stderr, then run_as(words after AGENTD), in this process, so
 * the command is the process dropbear started. Any other LINE, and an
 * interactive login, go to SHELL_FALLBACK unchanged (with SHELL set to
 * it). Returns only on failure, with an exit status.
 */
int shell_main(int argc, char **argv, int (*run_as)(int argc, char **argv));

/* Is path this program itself (same file as /proc/self/exe)? */
bool shell_is_self(const char *path);

#endif
