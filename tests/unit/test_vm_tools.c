/*
 * test_vm_tools: how the VM backend runs host tools (vm_run_tool over
 * backend/spawn.c) and what it says when one fails, including when the tool
 * cannot be started at all (no file descriptors left).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/tap.h"
#include "vm/vm_internal.h"
#include "common/util.h"

/* vm_run_tool(argv) in a child with at most nofile descriptors; its return in *r, its why in buf. */
static int run_limited(const char *const argv[], rlim_t nofile, int *r, char *buf, size_t size)
{
	int p[2], status;
	pid_t pid;
	ssize_t n;

	if (pipe(p) < 0)
		return -errno;
	if ((pid = fork()) == 0) {
		struct rlimit rl = { nofile, nofile };
		char *why = NULL;
		int rr;

		close(p[0]);
		if (dup2(p[1], 3) < 0)
			_exit(99);
		if (p[1] != 3)
			close(p[1]);
		closefrom(4);
		setrlimit(RLIMIT_NOFILE, &rl);
		rr = vm_run_tool(argv, "the tool", &why);
		dprintf(3, "%d %s", rr, why ? why : "");
		_exit(0);
	}
	close(p[1]);
	n = read(p[0], buf, size - 1);
	close(p[0]);
	buf[n > 0 ? n : 0] = '\0';
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -ECHILD;		/* it crashed */
	*r = atoi(buf);
	return 0;
}

int main(void)
{
	const char *const t[] = { "true", NULL }, *const f[] = { "false", NULL };
	const char *const say[] = { "sh", "-c", "echo 'bad disk size' >&2; exit 3", NULL };
	const char *const none[] = { "no-such-tool-fleet", NULL };
	char *why = NULL;
	char buf[512];
	int r = 0;

	is_int(vm_run_tool(t, "true", &why), 0, "a tool that succeeds: 0");
	ok(!why, "and no why");
	is_int(vm_run_tool(f, "false", &why), -EIO, "a tool that fails: -EIO");
	is_str(why, "false failed: no message", "why names the step");
	free(why), why = NULL;
	is_int(vm_run_tool(say, "qemu-img create", &why), -EIO, "a tool that fails with a message");
	is_str(why, "qemu-img create failed: bad disk size", "why carries its first line");
	free(why), why = NULL;
	is_int(vm_run_tool(none, "mke2fs", &why), -EIO, "a tool that is not installed");
	is_str(why, "mke2fs failed: tool not installed", "why says so");
	free(why), why = NULL;

	/* 4 descriptors: 0-2 and the test's pipe; the tool's own pipe cannot be made. */
	is_int(run_limited(t, 4, &r, buf, sizeof(buf)), 0, "a tool that cannot be started does not crash fleetd");
	is_int(r, -EMFILE, "it returns the errno (%s)", buf);
	ok(strstr(buf, "the tool failed: ") != NULL, "and why names the step (%s)", buf);
	return tap_done();
}
