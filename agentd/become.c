/* become: see become.h. libc only. */
#include "agentd/become.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentd/shell.h"

int become_lookup(const char *user, struct user *u, gid_t **groups, size_t *ngroups)
{
	int r = user_by_name(USERS_PASSWD, user, u);

	if (r == -ENOENT) {
		fprintf(stderr, "agentd: run-as: no user '%s' in " USERS_PASSWD "\n", user);
		return 126;
	}
	if (r < 0) {
		fprintf(stderr, "agentd: run-as %s: cannot read " USERS_PASSWD ": %s\n", user, strerror(-r));
		return 126;
	}
	r = user_groups(USERS_GROUP, u->pw.pw_name, u->pw.pw_gid, groups, ngroups);
	if (r < 0) {
		fprintf(stderr, "agentd: run-as %s: cannot read " USERS_GROUP ": %s\n", user, strerror(-r));
		user_free(u);
		return 126;
	}
	return 0;
}

/* The user's shell as the command should see it: root's is agentd itself (shell.h), not for commands. */
static const char *login_shell(const struct passwd *pw)
{
	if (!pw->pw_shell || !*pw->pw_shell || shell_is_self(pw->pw_shell))
		return SHELL_FALLBACK;
	return pw->pw_shell;
}

int become_user(const char *user, const struct passwd *pw, const gid_t *groups, size_t ngroups)
{
	char path[512];

	/* The groups a login gives (/etc/group's), as initgroups(3) would: users.h. */
	if (setgroups(ngroups, groups) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0) {
		fprintf(stderr, "agentd: run-as %s: cannot drop privileges: %s\n", user, strerror(errno));
		return 126;
	}
	if (pw->pw_uid != 0 && setuid(0) == 0) {
		fprintf(stderr, "agentd: run-as %s: privileges could be regained; refusing\n", user);
		return 126;
	}
	if (chdir(pw->pw_dir) < 0 && chdir("/") < 0)
		return 126;
	/* What the agent installs for itself lives in /usr/local/bin and ~/.local/bin. */
	if (pw->pw_uid == 0)
		snprintf(path, sizeof(path), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	else
		snprintf(path, sizeof(path), "%s/.local/bin:/usr/local/bin:/usr/bin:/bin", pw->pw_dir);
	if (clearenv() != 0 || setenv("HOME", pw->pw_dir, 1) < 0 || setenv("USER", pw->pw_name, 1) < 0 ||
	    setenv("LOGNAME", pw->pw_name, 1) < 0 || setenv("SHELL", login_shell(pw), 1) < 0 ||
	    setenv("PATH", path, 1) < 0)
		return 126;
	return 0;
}
