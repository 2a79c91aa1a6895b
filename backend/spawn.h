/*
 * spawn: the one runner of host tools for the whole daemon (qemu-img,
 * mke2fs, dropbearkey for VMs; useradd, userdel, rm for user agents): run
 * one to completion and capture what it printed. It blocks the caller until
 * the tool exits: for short steps of provisioning and removal, or on a
 * worker thread (it is safe on any thread).
 *
 * spawn_start runs a long-lived child (the webhook listener) with given fds
 * instead, and does not wait for it.
 *
 * The child is a clone child with a pidfd (no SIGCHLD, so no waitpid(-1)
 * anywhere in fleetd can take its status), makes only system calls between
 * the clone and execve, gets stdin from /dev/null, default signal
 * dispositions and an empty signal mask, and no fd but 0-2.
 */
#ifndef FLEET_SPAWN_H
#define FLEET_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* How a tool is run. All zero: spawn_run's way. */
struct spawn_opts {
	const char *const *envp;	/* its whole environment; NULL: fleetd's own */
	const char *const *search;	/* NULL-terminated directories to find argv[0] in (when it has no '/'); NULL: $PATH */
	size_t output_max;		/* bytes of output kept; 0: 64 KiB */
	bool keep_tail;			/* longer output keeps its end (a tool says why it failed last), not its start */
};

/*
 * Run argv with o. Returns the exit status (0..255), 128+N when signal N
 * killed it, or -errno when it could not be run (-ENOENT: not found). When
 * output is not NULL and the tool ran, it receives stdout and stderr
 * together (caller frees).
 */
int spawn_tool(const char *const argv[], const struct spawn_opts *o, char **output);

/*
 * Run argv (argv[0] looked up in $PATH) with fleetd's environment. Returns
 * the exit status (0..255), or -errno if it could not be started or was
 * killed (-EINTR). A tool that is not found or cannot be executed exits 127
 * and says so in the output. When output is not NULL it receives stdout and
 * stderr together (at most 64 KiB; caller frees).
 */
int spawn_run(const char *const argv[], char **output);

/*
 * A long-running child (the webhook listener): argv[0] is a path; fds[i]
 * becomes the child's fd i (n_fds at most SPAWN_FDS_MAX; every other fd is
 * closed), envp its whole environment. It does not wait: 0 with *pid and
 * *pidfd (readable once the child exited; caller closes it after
 * spawn_wait), or -errno; -ENOSYS on a kernel without clone3 (a child
 * without a pidfd could be reaped by someone else's waitpid). Same child
 * set-up as spawn_tool's; an exec failure exits 127 with a line on fd 2.
 */
#define SPAWN_FDS_MAX 8
int spawn_start(const char *const argv[], const char *const *envp, const int *fds, size_t n_fds, pid_t *pid,
		int *pidfd);
/*
 * Wait for the clone3 child of pidfd (spawn_start's, or user/launch's), or
 * with nohang only reap it if it is done: 0 and its wait status (as
 * waitpid's), -EAGAIN (nohang) while it runs, or -errno.
 */
int spawn_wait(int pidfd, bool nohang, int *status);
/*
 * Send sig to the process of pidfd: pidfd_send_signal(2), or where that is
 * missing (ENOSYS: valgrind's memcheck up to 3.19, which the soak runs
 * fleetd under) kill(2) of the pid the pidfd's fdinfo names, while it names
 * one (the process has not exited). 0 or -errno.
 */
int spawn_signal(int pidfd, int sig);
/*
 * A child that nobody's waitpid(-1) can reap (exit signal 0), with a pidfd
 * in *pidfd: clone3(2), or clone(2) where clone3 is missing (ENOSYS:
 * valgrind). As fork(2): the pid in the parent, 0 in the child, -1 and errno.
 */
pid_t spawn_clone(int *pidfd);

/* The first executable dirs[i]/name, malloc'd; NULL if there is none. */
char *spawn_which(const char *name, const char *const *dirs);

#endif
