/*
 * backend: the seam between fleetd and an isolation backend. Everything above
 * it (API, run queue, scheduler) calls these verbs and never asks which
 * backend it holds; everything below it (libvirt + SSH, Unix users) is
 * reached only through them.
 *
 * Conventions for every implementation:
 * - Functions that can fail return 0 or a negative errno. Where a user
 *   needs to know why, *why gets a malloc'd message that names no secret
 *   (the caller frees it and prefixes "agent 'NAME': ").
 * - Nothing half-done: a failed provision removes what it created.
 * - Slow work (booting a VM, a clean shutdown, running a command) does not
 *   block the event loop: start, stop and exec are asynchronous and report
 *   through callbacks on fleetd->base, never before they have returned (a
 *   backend whose work is instant defers the callback, e.g. with
 *   event_base_once and a zero timeout). Short synchronous steps (useradd,
 *   defining a domain, creating an overlay) are fine in provision/destroy.
 */
#ifndef FLEET_BACKEND_H
#define FLEET_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "model/agent.h"
#include "model/snapshot.h"
#include "model/doctor.h"
#include "model/host.h"

struct fleetd;

/* One secret given to an exec as a file (exec_request.files). */
struct exec_file {
	const char *name;		/* a secret's key ([A-Za-z_][A-Za-z0-9_]*): a safe file name */
	const unsigned char *data;
	size_t len;
};

/* One command to run in an agent's environment. */
struct exec_request {
	const char *const *argv;	/* argv[0] is looked up in the environment's PATH */
	const char *const *env;		/* extra NAME=VALUE pairs (FLEET_*, the agent's secrets); NULL-terminated or NULL */
	const char *stdin_data;		/* whole stdin, may be NULL */
	size_t stdin_len;
	bool root;			/* run as the environment's root (vm only); else as the agent user */
	int timeout_s;			/* 0: none; on expiry every process of the exec is killed */
	/*
	 * argv is the backend's own health_default: a backend may answer it
	 * by a shorter way to the same check (the vm one: the guest's health
	 * service, agentd/health_server.h), with the same results.
	 */
	bool health;
	/*
	 * The agent's secrets as files on a tmpfs that exists inside the
	 * environment for this exec only, named by FLEET_SECRETS_DIR: never on
	 * a disk, gone when the exec ends. A backend that cannot refuses the
	 * exec with -EOPNOTSUPP.
	 */
	const struct exec_file *files;
	size_t n_files;
};

enum exec_stream { EXEC_STDOUT = 1, EXEC_STDERR = 2 };

/* Result of a finished exec. */
struct exec_result {
	int exit_code;		/* >= 0 when the command exited */
	int signal;		/* > 0 when it was killed by a signal */
	bool timed_out;
	int error;		/* < 0 (negative errno) when it could not be run at all; then why says so */
	const char *why;
	/*
	 * The environment's shell exited before starting the command (a vm
	 * guest whose /bin/sh is gone, say): exit_code and stderr are its
	 * SSH server's ("Exit (root) from ...: Child failed"), not the command's.
	 */
	bool not_started;
};

struct exec_callbacks {
	/* Output as it comes; data is only valid during the call. */
	void (*output)(void *userdata, enum exec_stream stream, const char *data, size_t len);
	/* Called exactly once, after the last output; the exec handle is freed after it returns. */
	void (*done)(void *userdata, const struct exec_result *result);
	void *userdata;
};

struct exec_handle;

/*
 * Completion of an asynchronous start or stop: r is 0 or a negative errno,
 * why a message (or NULL) valid only during the call. Called exactly once.
 */
typedef void (*backend_done_fn)(void *userdata, int r, const char *why);

/* What a finished snapshot is. */
struct snapshot_result {
	int error;		/* 0, or a negative errno; then why says so */
	const char *why;
	enum snapshot_kind kind;	/* full (RAM + disk of a running guest), disk, or dir (a user agent's home) */
	long long size_bytes;	/* what it occupies, as well as the backend can tell; -1 if unknown */
};
typedef void (*backend_snapshot_fn)(void *userdata, const struct snapshot_result *res);

/*
 * What a backend reports upward on its own (not as the answer to a verb):
 * the backend is given a backend_event_fn at init (in struct backend_host)
 * and calls it on the loop thread. The lifecycle owner (lifecycle.c)
 * decides what follows (state, restart policy); a backend never writes an
 * agent's state itself.
 */
enum backend_event_kind {
	BACKEND_EV_STARTED,	/* the environment runs (maybe started outside fleet) */
	BACKEND_EV_STOPPED,	/* it stopped; asked: because fleet stopped it */
	BACKEND_EV_GONE,	/* it was removed outside fleet */
	BACKEND_EV_RESYNC,	/* the backend lost track for a while (libvirt reconnect): re-read every agent */
};

struct backend_event {
	enum backend_event_kind kind;
	enum backend_kind backend;
	const char *agent;	/* NULL for BACKEND_EV_RESYNC; valid only during the call */
	bool asked;		/* STOPPED: fleet asked for it (stop, restore, remove) */
	bool clean;		/* STOPPED: the environment shut itself down cleanly (not a crash) */
	const char *detail;	/* for the log, or NULL */
};
typedef void (*backend_event_fn)(struct fleetd *f, const struct backend_event *ev);

/*
 * What a backend may ask of fleet, given at init: where it reports (above)
 * and what fleet keeps for it. The store sits above the seam; a backend
 * never includes it, it calls these (implemented in core/backend_host.c). All run
 * on the loop thread and return 0 or a negative errno.
 */
struct backend_host {
	backend_event_fn on_event;
	/* An agent's image record (a VM agent's guest images); -ENOENT if there is no such agent. */
	int (*get_images)(struct fleetd *f, const char *agent, struct agent_images *ret);
	int (*set_images)(struct fleetd *f, const char *agent, const struct agent_images *im);
	/* Every agent of one backend kind, by name; a NULL-terminated list the caller frees with agent_list_free(). */
	int (*list_agents)(struct fleetd *f, enum backend_kind kind, struct agent ***ret);
	/*
	 * The libvirt URI of a host an agent is placed on (struct agent.host):
	 * *ret (caller frees) is NULL for HOST_LOCAL (the configured one);
	 * -ENOENT if there is no such host.
	 */
	int (*host_uri)(struct fleetd *f, const char *host, char **ret);
};

/* What an environment uses of the host (backend_ops.usage). */
struct agent_usage {
	bool known;
	long long memory_bytes;		/* -1 unknown */
	double cpu_seconds;		/* -1 unknown */
};

struct backend_ops {
	const char *name;	/* "vm", "user" */

	/*
	 * What the backend is and can do, answered here rather than by
	 * `if (backend == VM)` above the seam.
	 */
	const char *env_word;			/* what its environment is called in log lines: "guest", "sandbox" */
	const char *const *health_default;	/* argv of the health check of an agent without its own */
	bool has_network;			/* can give an agent a network (--network nat) */
	/* agentd's path inside the environment (the memory store runs it). */
	const char *agentd;

	/*
	 * Check the host can serve this backend; -errno and *why when not.
	 * host (see above) outlives the backend; NULL in a unit test that
	 * drives a backend needing none of it (the user backend).
	 */
	int (*init)(struct fleetd *f, const struct backend_host *host, char **why);
	void (*shutdown)(struct fleetd *f);

	/* Create the environment of a new agent (a->state is AGENT_PROVISIONING), all of it in the call. */
	int (*provision)(struct fleetd *f, const struct agent *a, char **why);
	/*
	 * (optional) The same, its slow part off the loop (a VM on another
	 * host: the image and its disks uploaded there): 1, and done() reports
	 * on the loop once the environment is made (r 0) or failed (r -errno,
	 * why; what it made removed); or 0 (made already) or -errno (failed,
	 * *why) at once, and done() is not called. Meanwhile the agent is busy
	 * (destroy answers -EBUSY). NULL: provision is quick enough.
	 */
	int (*provision_start)(struct fleetd *f, const struct agent *a, backend_done_fn done, void *userdata,
			       char **why);
	/* Remove the environment and everything it owns; force: even while running. */
	int (*destroy)(struct fleetd *f, const struct agent *a, bool force, char **why);

	/*
	 * Start the environment; done() reports when it is running (a VM: booted
	 * and reachable over its control channel). A negative return means it
	 * failed at once (*why set) and done() is not called. done() with
	 * -ETIMEDOUT means it started but never became reachable: it does not
	 * boot (health_boot_failed() acts on that).
	 */
	int (*start)(struct fleetd *f, const struct agent *a, backend_done_fn done, void *userdata, char **why);
	/* Clean stop within timeout_s, then forced; every process of the agent is gone when done() runs. */
	int (*stop)(struct fleetd *f, const struct agent *a, int timeout_s, backend_done_fn done, void *userdata,
		    char **why);
	/*
	 * What the environment is now: AGENT_STOPPED or AGENT_RUNNING, or
	 * -ENOENT if it is gone (then *why, if why is not NULL, says what is
	 * gone: a user agent's user or home, a VM's domain).
	 */
	int (*state)(struct fleetd *f, const struct agent *a, enum agent_state *ret, char **why);

	/*
	 * Start req in a's environment; output and completion arrive through
	 * cb on the event loop, never before exec() has returned. req, a and
	 * their strings are only valid during the call: copy what you keep.
	 * *ret lets the caller cancel (client went away).
	 */
	int (*exec)(struct fleetd *f, const struct agent *a, const struct exec_request *req,
		    const struct exec_callbacks *cb, struct exec_handle **ret, char **why);
	/* The environment's console output, at most max bytes from its end (optional; NULL if none). */
	int (*console)(struct fleetd *f, const struct agent *a, size_t max, char **ret, size_t *ret_len);

	/*
	 * Snapshots. snap is a valid snapshot name (names.h) not yet used for
	 * this agent. create and restore are asynchronous like start; both
	 * refuse with -EBUSY while an exec of the agent is in flight. A
	 * snapshot must be consistent (a VM: libvirt's checkpoint; a user
	 * agent: its processes frozen while its home is copied) and live where
	 * the agent cannot read or write it. restore brings back exactly the
	 * snapshot's state (a running VM snapshot restores running processes)
	 * and replaces the current state atomically: a failed restore leaves
	 * the agent as it was. delete is synchronous; -ENOENT if there is no
	 * such snapshot. exists: 1, 0, or -errno (for reconciliation at start).
	 */
	int (*snapshot_create)(struct fleetd *f, const struct agent *a, const char *snap,
			       backend_snapshot_fn done, void *userdata, char **why);
	int (*snapshot_restore)(struct fleetd *f, const struct agent *a, const char *snap,
				backend_done_fn done, void *userdata, char **why);
	int (*snapshot_delete)(struct fleetd *f, const struct agent *a, const char *snap, char **why);
	int (*snapshot_exists)(struct fleetd *f, const struct agent *a, const char *snap);

	/* Kill everything the exec started; done() is still called once, later. */
	void (*exec_cancel)(struct exec_handle *h);
	/*
	 * Flow control of an exec's output (the reader is slow): paused, the
	 * backend stops reading the command's stdout and stderr, so at most a
	 * pipe or an SSH channel window of it waits on the host, the command
	 * blocks in write(), and output() is called no more (bar what one read
	 * already took). done() comes after the last output, so it waits too.
	 * A cancelled, timed-out or otherwise killed exec ignores the pause, so
	 * that it always ends: what it still prints until the kill lands (a
	 * VM: a second SSH channel away) is read regardless. Must not be
	 * called after done().
	 */
	void (*exec_pause)(struct exec_handle *h, bool paused);

	/*
	 * Network policy (optional; only where has_network): apply a's
	 * network settings now (its egress_allow changed), 0 or -errno with
	 * *why; and how many packets a's egress allow list has refused so
	 * far, -ENOENT when it has none.
	 */
	int (*network_apply)(struct fleetd *f, const struct agent *a, char **why);
	int (*network_refused)(struct fleetd *f, const struct agent *a, long long *packets);
	/*
	 * `set --network` (optional; without it the backend refuses the
	 * change): give the stopped agent a the network a->network says (make
	 * or remove its namespace, link and rules) before it is stored; 0 or
	 * -errno with *why (-EBUSY: something of the agent runs).
	 */
	int (*network_change)(struct fleetd *f, const struct agent *a, char **why);

	/*
	 * Memory quota (optional; where the store is a file system of its own):
	 * make a's store hold a->memory_quota_mib (it held old_mib) before the
	 * new value is stored; 0 or -errno with *why (-EBUSY: refused).
	 */
	int (*memory_quota_apply)(struct fleetd *f, const struct agent *a, int old_mib, char **why);

	/*
	 * Resource use (optional; for GET /metrics): of each of agents[0..n)
	 * (all of this backend), the host memory its environment holds now and
	 * the CPU time it has used, into ret[i]; ret[i].known false for one
	 * that has none (not running). 0 or -errno (then nothing is known).
	 */
	int (*usage)(struct fleetd *f, struct agent *const *agents, size_t n, struct agent_usage *ret);

	/*
	 * `fleetctl doctor` (optional): check what this backend needs of the
	 * host (libvirtd, KVM, the guest image; cgroup controllers) and append
	 * one finding per fact to r, each with its fix. Quick and read-only.
	 */
	void (*doctor)(struct fleetd *f, struct doctor_report *r);

	/*
	 * Hypervisor hosts (optional; the VM backend, #15). The backend owns one
	 * connection per host, named by host (uri NULL: HOST_LOCAL, the
	 * configured one). host_connect opens it off the loop: 0, then
	 * done(f, arg, r, why) on the loop once it answered (0: kept; -ENOTCONN
	 * with *why the transport's own message, nothing kept) or timeout_s
	 * passed (-ENOTCONN), or the backend shut down first (-ECANCELED); or
	 * -errno with *why at once (-EEXIST: a connect of that host is under
	 * way already), done never called. host_facts says what the host said
	 * last (never waiting for it: a call that finds them a few seconds old
	 * starts a read on a worker, for the next call to see), opening its
	 * connection if none is open (a failed one is retried in the
	 * background, with backoff); never fails: an unreachable host is a
	 * fact. host_forget closes it (host rm).
	 */
	int (*host_connect)(struct fleetd *f, const char *host, const char *uri, int timeout_s,
			    void (*done)(struct fleetd *f, void *arg, int r, const char *why), void *arg, char **why);
	void (*host_facts)(struct fleetd *f, const char *host, const char *uri, struct host_facts *ret);
	void (*host_forget)(struct fleetd *f, const char *host);
	/*
	 * (optional) 0 when nothing under way needs host (so host rm may
	 * forget it), -EBUSY with *why (caller frees) while something does:
	 * a move to it, whose agent is placed there only once it is done.
	 */
	int (*host_busy)(struct fleetd *f, const char *host, char **why);
	/*
	 * (optional) false, with *why (libvirt's reason; caller frees), while
	 * host's connection is known lost; true otherwise, a host not connected
	 * yet included. Asks the host nothing: cheap enough for every `show`.
	 */
	bool (*host_reachable)(struct fleetd *f, const char *host, char **why);
	/*
	 * (optional) fleetctl move: copy the stopped agent a (its disks, its
	 * domain, its snapshots) to host, leaving its copy on a->host as it
	 * is; done() reports, on the loop, once the copy there is whole (then
	 * the caller records the new host and calls move_finish) or failed
	 * (nothing stays there). A negative return: refused at once (*why).
	 * move_finish removes the old copy from host from, a now naming its
	 * new host; -errno with *why leaves it for the backend's next start.
	 */
	int (*move)(struct fleetd *f, const struct agent *a, const char *host, backend_done_fn done, void *userdata,
		    char **why);
	int (*move_finish)(struct fleetd *f, const struct agent *a, const char *from, char **why);
};

#endif
