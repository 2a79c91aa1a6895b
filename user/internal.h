/*
 * user/internal.h: what the files of the user backend share; nothing
 * outside user/ includes it. Who owns what:
 *   backend.c        the verbs and the ops table, init and shutdown, the
 *                    starts and stops in flight (pending ops)
 *   account.c        users, groups, homes, the uid high-water mark, the
 *                    cache of their passwd entries (pwcache.h), and the
 *                    backend's way of running a host tool
 *   keeper.c         the sandboxes of an agent: launching one, the keeper
 *                    (what makes an agent 'running'), watching and adopting
 *                    it, killing everything of an agent
 *   exec.c           commands streaming on the loop, with backpressure
 *   spare.c          a sandbox set up ahead for an agent's next command
 *   snapshot_jobs.c  snapshot create, restore and delete on workers, the trash
 * All of it runs on fleetd's loop thread, except the snapshot workers,
 * which touch only their job (see snapshot_jobs.c).
 */
#ifndef FLEET_USER_INTERNAL_H
#define FLEET_USER_INTERNAL_H

#include <stdbool.h>
#include <sys/types.h>

#include "backend/backend.h"
#include "user/launch.h"

#define USER_PREFIX "fleet-"

struct cgroup_host;
struct keeper;
struct pending_op;
struct pwcache;
struct snap_job;

/* The backend's state: NULL until the first verb or init sets it up. */
struct user_state {
	struct fleetd *f;
	struct cgroup_host *cg;
	struct keeper *keepers;		/* keeper.c: the running keepers, started or adopted */
	struct exec_handle *execs;	/* exec.c: commands in flight */
	struct pending_op *ops;		/* backend.c: starts and stops in flight */
	struct snap_job *jobs;		/* snapshot_jobs.c: creates and restores in flight, at most one per agent */
	struct snap_job *trash_job;	/* snapshot_jobs.c: the worker emptying the trash, if one runs */
	bool trash_again;		/* more was trashed while it ran */
	bool stopping;			/* user_shutdown is under way */
	backend_event_fn on_event;	/* lifecycle_on_event: a keeper that died unasked */
	char **shared_dirs;		/* other world-writable host directories, private in each sandbox */
	size_t n_shared_dirs;
	char *users_mnt;		/* <state_dir>/users when it is a mount point (account_users_mount), else NULL */
	char *netns_mnt;		/* <state_dir>/netns when it is a mount point (netns_dir_mount), else NULL */
};
extern struct user_state *us;

/* doctor.c: cgroup controllers for `fleetctl doctor` (backend_ops.doctor) */
void user_doctor(struct fleetd *f, struct doctor_report *r);

/* backend.c */
int user_ensure_init(struct fleetd *f, char **why);
/* Every verb on a provisioned agent first: its uid, no snapshot job of it running, nothing left frozen. */
int user_agent_ready(struct fleetd *f, const struct agent *a, uid_t *uid, char **why);
/* user_agent_ready without the leftover-freeze check: an exec's, which a fresh sandbox does itself (keeper.c). */
int user_agent_usable(struct fleetd *f, const struct agent *a, uid_t *uid, char **why);

/* account.c */
char *account_user_name(const char *agent);
char *account_users_dir(struct fleetd *f);
char *account_home_dir(struct fleetd *f, const char *agent);
/*
 * dir (the caller made it, root's) a mount point, a bind of itself if it is none, so
 * whatever fleetd mounts below it (a store at NAME/sub, a namespace at
 * NAME: sub NULL) is in its subtree and a sandbox can drop the other
 * agents' in one detach (init.c). What an older fleetd mounted there
 * before is carried into it, never mounted twice (what: "memory store",
 * for the log). An existing mount point is used as it is. -errno with
 * *why: it is no mount point, sandboxes keep every one.
 */
int account_own_mount(const char *dir, const char *sub, const char *what, char **why);
/* <state_dir>/users made (0711 root) and account_own_mount'ed: every memory store in its subtree. */
int account_users_mount(struct fleetd *f, char **why);
/* Is dir a mount point (the root of a mount)? */
bool account_mount_point(const char *dir);
/* A directory of fleet's in the state dir (snapshots/, memfs/): made if missing, root's, 0700 (set again if loosened); -errno with *why. */
int account_private_dir(const char *dir, char **why);
/* At start: what an interrupted write of the account files left (the uid mark's temp file). */
void account_sweep(struct fleetd *f);
/* The executable of a host tool in the sbin and bin directories; NULL if there is none. */
char *account_find_tool(const char *name);
/* Run a host tool with a fixed environment: its exit status (128+N for signal N) or -errno, *out its last words. */
int account_run_tool(const char *const *argv, char **out);
/*
 * The agent's uid if its user is fleet's; -ENOENT without one, -EPERM when fleet-NAME is someone else's.
 * Its passwd entry comes from account.c's cache (user/pwcache.h), dropped when /etc/passwd changes.
 */
int account_lookup(struct fleetd *f, const char *agent, uid_t *uid);
/* account_lookup's cache (made on first use; loop thread only), its drop (fleet changed users), its end (shutdown). */
struct pwcache *account_pwcache(void);
void account_pwcache_drop(void);
void account_pwcache_free(void);
/* Provision's checks: the name fits, no such user, group or home yet; the users dir is fleet's. */
int account_check_free(struct fleetd *f, const struct agent *a, char **why);
/* A new uid (never handed out before), the user, its group and its home; nothing is left on failure. */
int account_create(struct fleetd *f, const struct agent *a, uid_t *uid, char **why);
/* Undo account_create (a later step of provision failed). */
void account_undo(struct fleetd *f, const struct agent *a);
/* Remove what is fleet's of the agent's account (uid 0: its user is gone already); why may be NULL. */
int account_remove(struct fleetd *f, const struct agent *a, uid_t uid, char **why);

/* memfs.c: the memory store's own file system (quota in bytes) */
char *memfs_dir(struct fleetd *f);
long long memfs_quota(const struct agent *a);
/* Provision: a new image, mounted on the home's memory directory. */
int memfs_create(struct fleetd *f, const char *agent, uid_t uid, long long quota, char **why);
/* Mount the agent's image on its home's memory directory unless it is; 0 when it is. */
int memfs_mount(struct fleetd *f, const char *agent, uid_t uid, long long quota, char **why);
/* fleetd's start: memfs_mount, building the image first from the directory of an agent that has none. */
int memfs_ensure(struct fleetd *f, const char *agent, uid_t uid, long long quota, char **why);
int memfs_umount(struct fleetd *f, const char *agent, char **why);
/* fleetd's start: unmount and remove the stages and NAME.img.new a killed build left; never a NAME.img. */
void memfs_sweep(struct fleetd *f);
/* Destroy: unmount and remove the image. */
int memfs_remove(struct fleetd *f, const char *agent, char **why);
/*
 * Worker-safe (reads nothing of fleetd's): build memdir/NAME.img.new holding a copy of src_name in
 * src_dir (NULL: empty), in a mount namespace without users_dir's mount (the stores) and netns_dir's
 * (the agents' network namespaces; NULL: keep it).
 */
int memfs_build(const char *memdir, const char *users_dir, const char *netns_dir, const char *agent, uid_t uid,
		long long quota, int src_dir, const char *src_name, char **why);
/* NAME.img.new becomes NAME.img (the store must be unmounted). */
int memfs_swap_in(struct fleetd *f, const char *agent, char **why);
/* set --memory-quota: running, grow online (else -EBUSY); stopped, build it again at the new size (-ENOSPC: too full). */
int memfs_resize(struct fleetd *f, const char *agent, uid_t uid, long long old_quota, long long quota, bool running,
		 char **why);

/* keeper.c */
/* "cannot STAGE [what]: ERRNO" for a sandbox that failed; malloc'd. */
char *sandbox_report_why(const struct user_launch_report *rep, const char *what);
/* Start a sandbox of a with tmpl's argv and stdio, the agent's identity, limits and environment. */
int sandbox_launch(struct fleetd *f, const struct agent *a, uid_t uid, const struct user_launch_spec *tmpl,
		   const char *const *extra_env, struct user_launch_proc *proc, char **why);
/* sandbox_launch for a command: the agent's spare takes it when it can (spare.c), and a new spare is asked for. */
int sandbox_launch_command(struct fleetd *f, const struct agent *a, uid_t uid, const struct user_launch_spec *tmpl,
			   const char *const *extra_env, struct user_launch_proc *proc, char **why);
/* Launch the keeper of a and wait for its READY; it is then watched. */
int keeper_launch(struct fleetd *f, const struct agent *a, uid_t uid, char **why);
/* Reap the keeper of agent if it has exited; true while it is alive. */
bool keeper_alive(const char *agent);
/* Watch the keeper an earlier fleetd started for agent, if one runs and none is watched yet. */
void keeper_adopt(struct fleetd *f, const char *agent);
/* A clean stop: SIGTERM to the keeper, whose exit is then no failure. */
void keeper_term(const char *agent);
/* Forget every keeper (they outlive fleetd). */
void keepers_forget(void);
/* Does any process of the agent live (keeper, command, or anything in its cgroup or with its uid)? */
bool user_agent_busy(const char *agent, uid_t uid);
/* The same without counting commands: what a stop waits for. */
bool user_agent_procs_left(const char *agent, uid_t uid);
/* SIGKILL every process of the agent and wait until they are gone. */
int user_kill_everything(const char *agent, uid_t uid);

/* spare.c: a sandbox set up ahead for an agent's next command */
/* Hand the command of spec to the agent's spare: 0 and *proc as user_launch's, -ENOENT if none can take it. */
int spare_take(const char *agent, const struct user_launch_spec *spec, struct user_launch_proc *proc);
/*
 * Have a spare set up from spec (its argv, envp, files and stdio aside) for the agent's next command:
 * once the command just started ends (spare_now) or has run SPARE_DEFER_MS, so its start has the host to itself.
 */
void spare_want(struct fleetd *f, const char *agent, const struct user_launch_spec *spec);
/* The agent's command ended: make its wanted spare now, if one waits for that. */
void spare_now(const char *agent);
/* Kill and reap the agent's spare, if it has one (anything of the agent stops or changes). */
void spare_drop(const char *agent);
/* Kill and reap every spare, and those being made once made (a store is unmounted while users/ is no mount point: each has a copy). */
void spares_drop_all(void);
/* Its pid while one waits, else 0: no process of the agent's. */
pid_t spare_pid(const char *agent);
void spares_shutdown(void);

/* exec.c */
bool user_exec_active(const char *agent);
/* SIGKILL (or SIGTERM) every command of the agent; a killed one reads its output to the end. */
void user_exec_kill_agent(const char *agent);
void user_exec_term_agent(const char *agent);
/* Kill every command and report it done (fleetd stops). */
void user_execs_shutdown(void);
int user_exec(struct fleetd *f, const struct agent *a, const struct exec_request *req,
	      const struct exec_callbacks *cb, struct exec_handle **ret, char **why);
void user_exec_cancel(struct exec_handle *h);
void user_exec_pause(struct exec_handle *h, bool paused);

/* netns.c: a --network nat agent's namespace, veth pair and firewall rules */
struct netns_addrs {
	char iface[16];		/* the host end, flh<SLOT> */
	char host[16];		/* its address, the agent's gateway */
	char agent[16];		/* eth0's address in the agent's namespace */
	char host6[46];		/* the same in IPv6 (user_nat_subnet6), or "" without IPv6 */
	char agent6[46];
};
char *netns_dir(struct fleetd *f);
char *netns_path(struct fleetd *f, const char *agent);
/* The /30 of uid in user_nat_subnet and its /126 of user_nat_subnet6; -ENOSPC (and *why) when uid is past an end. */
int netns_addrs(struct fleetd *f, uid_t uid, struct netns_addrs *ret, char **why);
bool netns_present(struct fleetd *f, const char *agent);
/*
 * <state_dir>/netns made (0700 root) and account_own_mount'ed: every
 * agent's namespace mount in its subtree, so a sandbox drops the other
 * agents' in one detach (init.c). -errno with *why: sandboxes keep them all.
 */
int netns_dir_mount(struct fleetd *f, char **why);
/* Make whatever of a's network is missing and (re)apply its firewall rules; nothing for --network none. */
int netns_ensure(struct fleetd *f, const struct agent *a, uid_t uid, char **why);
/* Remove the agent's network (uid 0: its user is gone, only the namespace file goes); why may be NULL. */
int netns_remove(struct fleetd *f, const char *agent, uid_t uid, char **why);
/* Resolve the host names of every egress list again every 5 minutes (on a worker); stop at shutdown. */
void netns_refresh_start(struct fleetd *f, const struct backend_host *host);
void netns_refresh_stop(void);

/* dns.c: the resolv.conf text a NAT agent's sandbox shows (malloc'd; never fails) */
char *user_resolv_conf(struct fleetd *f);

/* snapshot_jobs.c */
bool user_job_busy(const char *agent, char **why);
void user_thaw_leftover(const char *agent);
void user_snapshots_sweep(struct fleetd *f);
void user_snapshots_forget(struct fleetd *f, const char *agent);
void user_jobs_shutdown(void);
int user_snapshot_create(struct fleetd *f, const struct agent *a, const char *snap, backend_snapshot_fn done,
			 void *userdata, char **why);
int user_snapshot_restore(struct fleetd *f, const struct agent *a, const char *snap, backend_done_fn done,
			  void *userdata, char **why);
int user_snapshot_delete(struct fleetd *f, const struct agent *a, const char *snap, char **why);
int user_snapshot_exists(struct fleetd *f, const struct agent *a, const char *snap);

#endif
