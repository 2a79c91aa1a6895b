/*
 * test_user_account_lock: shadow's tools refuse at once ("cannot lock
 * /etc/group; try again later", exit 10) while another of them holds
 * /etc/group.lock; account_create tries again with a backoff. In a private
 * mount namespace with an overlay on /etc (etc_overlay.h: the host's files
 * and locks are never touched), the lock is held as shadow holds it (a file
 * with a live pid, made by link()):
 *   - by a process that lets it go only after it saw groupadd fail on it
 *     (groupadd's own temp file /etc/group.PID removed, by inotify): the
 *     user is made;
 *   - for good: create fails, saying the file stayed locked, and leaves no
 *     user or group behind.
 * Agent names start with "ual" so they collide with no other test's.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "model/agent.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "user/internal.h"
#include "../tap.h"
#include "etc_overlay.h"

static struct fleetd F;

/* /etc/group.lock as shadow's do_lock_file makes it: a temp file with the pid, linked to the lock's name. */
static int hold_lock(pid_t pid)
{
	_cleanup_free_ char *tmp = xasprintf("/etc/ual-lock.%ld", (long)getpid()), *text = xasprintf("%ld", (long)pid);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600), r = 0;

	if (fd < 0 || write_all(fd, text, strlen(text)) < 0)
		r = -1;
	if (fd >= 0)
		close(fd);
	if (r == 0 && link(tmp, "/etc/group.lock") < 0)
		r = -1;
	unlink(tmp);
	return r;
}

/* Is name groupadd's temp file of a lock attempt, "group.<pid>"? */
static bool lock_attempt(const char *name)
{
	if (strncmp(name, "group.", 6) != 0 || !name[6])
		return false;
	for (const char *p = name + 6; *p; p++)
		if (*p < '0' || *p > '9')
			return false;
	return true;
}

/*
 * The holder: takes the lock, says so on ready, and releases it once an
 * attempt on it failed (the attempt's temp file removed). Exits 0 then, 1
 * if it could not watch or lock.
 */
static void holder(int ready)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	int in = inotify_init1(IN_CLOEXEC);

	if (in < 0 || inotify_add_watch(in, "/etc", IN_DELETE) < 0 || hold_lock(getpid()) < 0)
		_exit(1);
	(void)!write(ready, "r", 1);
	for (;;) {
		ssize_t n = read(in, buf, sizeof(buf));

		if (n <= 0)
			_exit(1);
		for (char *p = buf; p < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)p;

			if (ev->len && lock_attempt(ev->name)) {
				unlink("/etc/group.lock");
				_exit(0);
			}
			p += sizeof(*ev) + ev->len;
		}
	}
}

static struct agent *mk_agent(const char *name)
{
	struct agent *a = xcalloc(1, sizeof(*a));

	a->name = xstrdup(name);
	a->backend = BACKEND_USER;
	return a;
}

int main(void)
{
	static const char *const tools[] = { "useradd", "groupadd", NULL };
	struct etc_overlay eo;
	const char *skip;
	struct agent *a;
	struct passwd *pw;
	char *why = NULL, c;
	int pipefd[2], st, r;
	uid_t uid = 0;
	long min;
	pid_t pid;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if ((skip = etc_overlay_enter(&eo, "ual", 4150000, tools)))
		tap_skip_all(skip);
	if (etc_overlay_config(&eo, &F.cfg) < 0)
		return 1;
	min = eo.uid_min;

	/* 1. Held until groupadd has failed on it once, then released: create succeeds. */
	a = mk_agent("ualfree");
	ok(pipe(pipefd) == 0, "a pipe");
	if ((pid = fork()) == 0) {
		close(pipefd[0]);
		holder(pipefd[1]);
	}
	close(pipefd[1]);
	ok(pid > 0 && read(pipefd[0], &c, 1) == 1, "the holder has /etc/group.lock");
	close(pipefd[0]);
	is_int(account_check_free(&F, a, &why), 0, "ualfree is free (%s)", why ? why : "no error");
	r = account_create(&F, a, &uid, &why);
	is_int(r, 0, "create succeeds once the lock is released (%s)", why ? why : "no error");
	ok(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	   "the holder released it only after an attempt on it failed");
	pw = getpwnam("fleet-ualfree");
	ok(pw && pw->pw_uid == uid && (long)uid >= min && (long)uid <= min + 99, "its user is there, uid %ld",
	   (long)uid);
	ok(getgrnam("fleet-ualfree") != NULL, "and its group");
	free(why);
	why = NULL;
	if (r == 0)
		is_int(account_remove(&F, a, uid, &why), 0, "removed (%s)", why ? why : "no error");
	agent_free(a);

	/* 2. Held for good (by a live pid: ours): create fails, clearly, and leaves nothing. */
	a = mk_agent("ualheld");
	free(why);
	why = NULL;
	ok(hold_lock(getpid()) == 0, "/etc/group.lock held for good");
	r = account_create(&F, a, &uid, &why);
	ok(r < 0, "create fails (%d)", r);
	ok(why && strstr(why, "cannot lock /etc/group") && strstr(why, "still locked after"),
	   "saying the group file stayed locked: %s", why ? why : "(no message)");
	ok(!getpwnam("fleet-ualheld") && !getgrnam("fleet-ualheld"), "no user or group is left");
	{
		_cleanup_free_ char *home = xasprintf("%s/users/ualheld", eo.state_dir);
		struct stat sb;

		ok(lstat(home, &sb) < 0 && errno == ENOENT, "no home is left");
	}
	unlink("/etc/group.lock");
	free(why);
	agent_free(a);

	etc_overlay_leave(&eo);
	return tap_done();
}
