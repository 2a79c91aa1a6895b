/*
 * become: drop from root to a user as a login would, for run-as (an exec)
 * and for the health service's checks (health_server.h): the user and its
 * groups from the files (users.h), then groups, gid, uid, the home as the
 * working directory and a clean, fixed environment.
 */
#ifndef FLEET_AGENTD_BECOME_H
#define FLEET_AGENTD_BECOME_H

#include <pwd.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/users.h"

/*
 * Look user up in /etc/passwd and its groups in /etc/group. 0, or 126
 * after printing why on stderr (an unknown user, an unreadable file).
 * *u and *groups are the caller's (user_free, free).
 */
int become_lookup(const char *user, struct user *u, gid_t **groups, size_t *ngroups);

/*
 * As root still, become pw (with groups): setgroups, setgid, setuid (and
 * refuse if root could be regained), chdir to the home (else /), and an
 * environment of HOME, USER, LOGNAME, SHELL and PATH only, replacing
 * whatever was there. 0, or 126 after printing why on stderr.
 */
int become_user(const char *user, const struct passwd *pw, const gid_t *groups, size_t ngroups);

#endif
