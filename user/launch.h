/*
 * user_launch: the one way a process of a user agent comes to life. Given a
 * launch spec it starts a sandbox: a new PID, mount, IPC and network
 * namespace whose init ("fleet-init", root, does nothing but reap) joins the
 * agent's cgroups, brings up lo (the only interface), mounts a fresh /proc,
 * private /tmp, /var/tmp and /dev/shm, and a fresh root-owned /run holding
 * only a 1777 /run/lock (so no host daemon's socket is reachable), keeps no
 * memory store but the agent's own (spec.users_dir) and no agent's network
 * namespace mount (spec.netns_dir), and starts the payload
 * with no groups, the agent's uid/gid,
 * PR_SET_NO_NEW_PRIVS, umask 077, rlimits, exactly the given environment
 * and no inherited fd but stdin/stdout/stderr. When the payload exits the
 * init exits, and the kernel kills whatever the payload left behind in the
 * namespace (double forks included); SIGKILL to the init does the same.
 *
 * It is a pure function of the spec (and of where fleet-init is): it reads
 * no config, no database and no global state, so tests drive it directly.
 * The init is the program fleet-init (user/init.c), exec'd by a child that
 * shares fleetd's memory until then (CLONE_VM | CLONE_VFORK: fleetd's heap
 * is never copied or made copy-on-write); that child only places fds and
 * makes system calls. The spec goes to fleet-init as JSON in a memfd.
 */
#ifndef FLEET_USER_LAUNCH_H
#define FLEET_USER_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend/backend.h"

/* Where a sandbox given secret files has them: its own /run is a fresh tmpfs already. */
#define USER_SECRETS_DIR "/run/secrets"

/* At most this many cgroup.procs files per launch. */
#define USER_LAUNCH_MAX_CGROUPS 16

/*
 * fleetd's own agentd, bound read-only into every sandbox (its fresh /run
 * is root's), so a sandbox never depends on where fleetd's files live on
 * the host: a build tree under /tmp is hidden by the private /tmp.
 */
#define USER_AGENTD_DIR "/run/fleet/bin"
#define USER_AGENTD_PATH USER_AGENTD_DIR "/agentd"

/* The only search path an agent gets: `agentd` is this fleet's. */
#define USER_LAUNCH_PATH USER_AGENTD_DIR ":/usr/local/bin:/usr/bin:/bin"

struct user_launch_spec {
	uid_t uid;
	gid_t gid;
	const char *home;		/* working directory of the payload */
	const char *const *argv;	/* argv[0] searched in USER_LAUNCH_PATH; NULL: no payload, the init idles until SIGTERM */
	const char *const *envp;	/* the whole environment (see user_launch_env) */
	int stdin_fd;			/* -1: /dev/null */
	int stdout_fd;			/* -1: /dev/null */
	int stderr_fd;			/* -1: /dev/null */
	const int *cgroup_fds;		/* cgroup.procs files to join (write "0") */
	size_t n_cgroup_fds;
	long rlimit_nproc;		/* 0: leave as is */
	long rlimit_nofile;		/* 0: leave as is */
	long tmp_size_mib;		/* size of each private tmpfs; 0: 64 */
	const char *const *shared_dirs;	/* more world-writable host directories: each gets a fresh 1777 tmpfs */
	size_t n_shared_dirs;
	bool die_with_parent;		/* SIGKILL the sandbox when the launching thread dies */
	const char *netns_path;		/* a network namespace to join (the agent's NAT network); NULL: a new one, only lo */
	const char *resolv_conf;	/* what /etc/resolv.conf shows in the sandbox; NULL: the host's */
	/* Files (0400, the agent's) on a tmpfs (0700, the agent's) at USER_SECRETS_DIR, this sandbox's only. */
	const struct exec_file *files;
	size_t n_files;
	const char *init_path;		/* fleet-init to run; NULL: user_launch_init_path() */
	const char *agentd_path;	/* host agentd shown at USER_AGENTD_PATH; NULL: user_launch_agentd_path() */
	/*
	 * fleetd's <state_dir>/users, a mount of its own holding every agent's
	 * memory store below it: the sandbox detaches it whole and keeps only
	 * home and what is mounted below home (its own store). NULL, a home not
	 * below it, or no mount point there in the sandbox: every mount stays.
	 */
	const char *users_dir;
	/*
	 * fleetd's <state_dir>/netns, a mount of its own holding every NAT
	 * agent's namespace mount below it: the sandbox (in its own namespace by
	 * then, netns_path) detaches it whole, a bare copy put back. NULL, or no
	 * mount point there in the sandbox: every mount stays.
	 */
	const char *netns_dir;
	/*
	 * A spare: the sandbox is set up (cgroups, namespaces, mounts, rlimits)
	 * and then waits, with no payload, for user_launch_hand() to give it
	 * one command (argv, envp, files, stdio), which it runs as if launched
	 * with them. Set: argv, files and the stdio fds are ignored here.
	 */
	bool spare;
};

/* A launched sandbox; the caller owns both fds. */
struct user_launch_proc {
	pid_t pid;	/* the init, in the caller's PID namespace */
	int pidfd;	/* readable once the init exited; it is a clone child: wait with __WALL */
	int report_fd;	/* read end: struct user_launch_report records, EOF once the init is gone */
	int ctl_fd;	/* a spare's: where user_launch_hand() sends its command; -1 for others */
};

enum user_launch_stage {
	LAUNCH_STAGE_CGROUP, LAUNCH_STAGE_MOUNT, LAUNCH_STAGE_PROC, LAUNCH_STAGE_TMP,
	LAUNCH_STAGE_RLIMIT, LAUNCH_STAGE_FORK, LAUNCH_STAGE_FDS, LAUNCH_STAGE_GROUPS,
	LAUNCH_STAGE_GID, LAUNCH_STAGE_UID, LAUNCH_STAGE_NO_NEW_PRIVS, LAUNCH_STAGE_CHDIR,
	LAUNCH_STAGE_EXEC, LAUNCH_STAGE_NET, LAUNCH_STAGE_RUN, LAUNCH_STAGE_SECRETS, LAUNCH_STAGE_DNS,
	LAUNCH_STAGE_AGENTD, LAUNCH_STAGE_INIT, LAUNCH_STAGE_STORES, LAUNCH_STAGE_NETNS,
	LAUNCH_STAGE__COUNT,
};

/* READY: the sandbox is set up (the payload, if any, is forked); FAILED: it could not be; EXITED: the payload ended. */
enum user_launch_report_kind { LAUNCH_REPORT_FAILED = 1, LAUNCH_REPORT_EXITED = 2, LAUNCH_REPORT_READY = 3 };

/* What the sandbox tells its launcher, one fixed-size record per write. */
struct user_launch_report {
	int32_t kind;	/* enum user_launch_report_kind */
	int32_t stage;	/* FAILED: enum user_launch_stage */
	int32_t value;	/* FAILED: errno; EXITED: the payload's wait status */
};

const char *user_launch_stage_to_string(enum user_launch_stage s);

/*
 * Build the environment of an agent process: extra (NAME=VALUE entries with
 * a valid NAME; others are refused with -EINVAL), then HOME, USER, PATH and
 * FLEET_AGENT, which extra cannot override. NULL-terminated; free with
 * user_launch_env_free.
 */
int user_launch_env(const char *agent, const char *user, const char *home,
		    const char *const *extra, char ***ret);
void user_launch_env_free(char **env);

/*
 * fleet-init beside fleetd (or, for a unit test, in the build tree's
 * daemon/), else at FLEET_INIT_PATH; NULL if none is there.
 */
const char *user_launch_init_path(void);

/*
 * fleetd's agentd, found as fleet-init is (else at FLEET_AGENTD_PATH);
 * NULL if none: sandboxes then have no agentd. Found once; the first call
 * belongs on fleetd's main thread (user_init makes it).
 */
const char *user_launch_agentd_path(void);

/* Start the sandbox described by spec; -errno if it could not be created (-ENOEXEC: no fleet-init). */
int user_launch(const struct user_launch_spec *spec, struct user_launch_proc *ret);

/*
 * Return once every user_launch clone begun before the call has let go of
 * its copy of fleetd's fd table (at its execve; until then it holds every
 * file any thread of fleetd had open at the clone). For a thread that
 * closed its last fd on a file system and is about to unmount it. Any thread.
 */
void user_launch_clones_wait(void);

/*
 * Give a spare (proc.ctl_fd of a launch with spec.spare) its one command:
 * spec's argv, envp, files and stdin/stdout/stderr (-1: /dev/null); the rest
 * of spec is the spare's already. Returns 0 once the spare has it (close
 * ctl_fd then: a spare whose ctl_fd is closed unused just exits), -EPIPE if
 * the spare is gone, -EINVAL for a string that is not UTF-8. From then on
 * the spare reports and ends like any launch with that payload.
 */
int user_launch_hand(int ctl_fd, const struct user_launch_spec *spec);
/*
 * The hand-over's message (init.c's await_command): '{' and the rest of the
 * payload's spec as JSON, up to this size, else 'c' and the spec in the
 * first fd (a memfd). In the message, a memfd's three system calls on each
 * side and a page fault are gone from a command's start.
 */
#define USER_LAUNCH_HAND_INLINE_MAX (32 * 1024)

/*
 * What a spare set up from spec is made of (identity, home, limits, mounts,
 * network, cgroup count): a spare may serve a command only when its key is
 * the command's spec's key. Free with free().
 */
char *user_launch_key(const struct user_launch_spec *spec);

/*
 * Fork a bare child as a clone child (no SIGCHLD, so nobody's waitpid(-1)
 * can steal it) and return its pid, with a pidfd in *pidfd. In the child it
 * returns 0; the child may only make system calls and must _exit.
 */
pid_t user_launch_fork(int *pidfd);
/* Such a child is waited for through its pidfd with spawn_wait() (backend/spawn.h). */

/* True when a live (non-zombie) process has uid as its real, effective, saved or fs uid. */
bool user_launch_uid_alive(uid_t uid);
/*
 * Kill every process of uid: a helper with that uid runs kill(-1, SIGKILL),
 * repeated until /proc shows none. Returns the passes taken (1: there was
 * nothing to kill), -ETIMEDOUT or -errno.
 */
int user_launch_kill_uid(uid_t uid, int timeout_ms);

#endif
