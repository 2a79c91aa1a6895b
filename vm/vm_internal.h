/*
 * vm_internal: what the files of the VM backend share, included by nothing
 * outside vm/. The backend's state (struct vm_backend), one struct vm per
 * agent it has dealt with since fleetd started, and what each file offers
 * the others:
 *   backend.c    the verbs start/stop/state/exec, init and the ops table;
 *                the struct vm registry, paths and small file helpers
 *   provision.c  provision/destroy: keys, disks, the seed, domain/network XML; a remote create on a worker
 *   channel.c    the control channel: connect, retry, wait_ready; KVM watchdog
 *   console.c    reading the console log and keeping it within its cap
 *   upgrade.c    each agent's image record: legacy adoption, boot prep, upgrade
 *   snapshots.c  libvirt snapshots on a worker thread
 *   events.c     libvirt's domain events, reported upward; orphan domains
 *   egress.c     NAT guests' firewall rules and --egress-allow lists
 *   memdisk.c    the memory store's own disk: made on a worker, grown with the quota
 *   doctor.c     libvirtd and KVM as `fleetctl doctor` reports them
 *   disk_backup.c  backup --with-disks and its restore (public: disk_backup.h)
 *   hosts.c      one libvirt connection per hypervisor host (#15); the host ops
 *   remote_disks.c  an agent's disks on another host: the fleet pool, images uploaded once
 *   remote_console.c  a remote guest's serial console streamed into its console log here
 *   remote_boot.c  before a remote agent's boot: its boot image there, its memory disk's size
 *   move.c       fleetctl move: an agent's disks, domain and snapshots to another host, on a worker
 *   remote_nat.c --network nat on another host: fleet's libvirt network there, a network filter per agent
 * All of it runs on fleetd's loop thread, bar snapshots.c's, move.c's, memdisk.c's, disk_backup.c's and
 * provision.c's (a remote create's), remote_boot.c's and egress.c's name refresh (a remote NAT agent's filter) workers (which
 * touch only their jobs) and virt.c's libvirt event thread.
 */
#ifndef FLEET_VM_INTERNAL_H
#define FLEET_VM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "backend/backend.h"
#include "common/util.h"
#include "model/agent.h"
#include "vm/virt.h"

#define DOMAIN_PREFIX "fleet-"
#define CHANNEL_NAME "org.fleet.ctl"
/* The guest's health service (agentd/health_server.h, HEALTH_SERVER_PORT: the same number). */
#define GUEST_HEALTH_PORT 877
#define NETWORK_NAME "fleet-nat"
#define AGENTD_IN_GUEST "/usr/bin/agentd"
#define CONSOLE_LOG "console.log"
#define BACKUP_PAUSED "backup-paused"	/* its guest paused for a backup copy (disk_backup.c) */
#define MEMDISK "memory.qcow2"	/* the memory store's disk, the guest's vdc (memdisk.c) */
#define VM_POOL "fleet"		/* the storage pool on a host other than local (remote_disks.c) */
/* NAT on a host other than local (remote_nat.c): fleet's network there, its bridge, each agent's filter. */
#define REMOTE_NAT_NETWORK "fleet-rnat"
#define REMOTE_NAT_BRIDGE "fleetrbr0"
#define REMOTE_NAT_FILTER_PREFIX "fleet-agent-"

struct fleetd;
struct event;
struct ssh_session;
struct egress_refresh;
struct vm_host;
struct vm_remote_console;

struct waiter {
	backend_done_fn done;
	void *userdata;
};

struct vm {
	char *name;			/* agent name */
	struct vm_backend *b;
	struct ssh_session *ssh;
	struct virt *virt;		/* its host's connection, as of its last start or stop (hosts.c) */
	unsigned channel_gen;		/* a remote guest's session: virt's generation its stream was opened on */
	bool ready;
	/* start: waiting for the control channel */
	struct waiter *waiters;
	size_t nwaiters;
	struct event *connect_timer;
	long long boot_deadline;
	long long started_at;		/* when we last started the domain (0: not by us) */
	const char *booted_type;	/* domain type it was started with */
	struct agent *boot_agent;	/* copy, to redefine the domain if KVM turns out not to work */
	/* stop: waiting for the guest to power off */
	bool stopping;			/* fleet asked it to stop: not a crash */
	struct waiter stop_waiter;
	struct event *stop_timer;
	long long stop_deadline;
	int execs;			/* execs in flight: snapshots and restores wait for none */
	bool busy;			/* a snapshot or restore is under way */
	int memdisk_mib;		/* its memory disk's size as last made, grown or read (0: unknown; a revert forgets it) */
	struct vm_remote_console *console;	/* a remote guest's console stream into its log (remote_console.c) */
	bool remote_boot_ready;		/* remote_boot.c's work for the start that waits is done */
	/*
	 * Running snapshots taken in the QEMU process that runs the guest now
	 * (libvirt id run_id): a restore of one loads it in that process
	 * (snapshots.c). Forgotten at every start and stop of the domain, a
	 * revert through libvirt and a reconnect to libvirtd.
	 */
	int run_id;
	char **run_snaps;
	size_t n_run_snaps;
	struct vm *next;
};

struct vm_backend {
	struct fleetd *f;
	const struct backend_host *host;	/* reports go up, image records come from fleet's store */
	struct virt *virt;		/* HOST_LOCAL's connection (the configured libvirt_uri) */
	struct vm_host *hosts;		/* every other host's, opened when first needed (hosts.c) */
	struct vm_host_opening *openings;	/* `host add`s whose first connect is under way (hosts.c) */
	char *state_dir;
	char *image_dir;
	const char *domain_type;	/* "kvm" or "qemu" */
	bool kvm_proven;		/* a KVM guest printed its kernel banner */
	struct event *console_timer;	/* the console logs' cap */
	bool console_swept;		/* every agent's console was capped once since fleetd started */
	struct vm *vms;
	unsigned egress_gen;		/* bumped by each vm_egress_apply, so a refresh can tell it was overtaken */
	struct egress_refresh *egress_refresh;
	unsigned jobs;			/* vm_worker_run's jobs and backup copies (disk_backup.c) not done yet */
};

/* backend.c: the registry and paths. */
struct vm_backend *vm_backend_of(struct fleetd *f);
char *vm_domain_name(const char *agent);
/* <state_dir>/vms/AGENT[/FILE], <state_dir>/keys/AGENT[/FILE], <image_dir>/FILE; caller frees. */
char *vm_path(struct vm_backend *b, const char *agent, const char *file);
char *vm_key_path(struct vm_backend *b, const char *agent, const char *file);
char *vm_image_path(struct vm_backend *b, const char *file);
/* The agent's struct vm, or NULL; vm_get() makes one if there is none. */
struct vm *vm_find(struct vm_backend *b, const char *name);
struct vm *vm_get(struct vm_backend *b, const char *name);
/* Frees v; its waiters and a stop in progress are told -ECANCELED. */
void vm_free(struct vm *v);
void vm_drop_session(struct vm *v);
/* Forget the snapshots taken in the guest's current QEMU process (struct vm's run_snaps). */
void vm_run_snaps_forget(struct vm *v);
/* The agent's dir, opened without following a symlink; an fd or -errno. */
int vm_dir_open(struct vm_backend *b, const char *agent);
/* The first line of a small file of ours (no symlink, FIFO or device is followed); -errno. */
int vm_read_line(const char *path, char **ret);
int vm_write_text(const char *path, const char *text, mode_t mode);
/*
 * worker_run for the backend's own jobs (a remote create, a move, a
 * snapshot, a memory disk), counted in b->jobs until done() ran, so the
 * shutdown knows whether a worker thread still uses b: 0 or -errno.
 */
int vm_worker_run(struct vm_backend *b, void (*work)(void *arg), void (*done)(void *arg), void *arg);
/* Run a host tool; on failure -errno (or -EIO) and *why with its first line of output. */
int vm_run_tool(const char *const argv[], const char *what, char **why);
void vm_remove_tree(const char *path);

/* hosts.c */
/*
 * The connection of host (NULL or HOST_LOCAL: b->virt), opened if it is not
 * yet (the URI from fleet's store); -errno with *why (why may be NULL).
 */
int vm_host_virt(struct vm_backend *b, const char *host, struct virt **ret, char **why);
/* The connection of host if it was opened already (never opens one), else NULL. */
struct virt *vm_host_virt_if_open(struct vm_backend *b, const char *host);
/* The connection of a's host, or NULL with *why. */
struct virt *vm_agent_virt(struct vm_backend *b, const struct agent *a, char **why);
/* At shutdown: every host's connection but b->virt closed. */
void vm_hosts_close(struct vm_backend *b);
/* The ops' host_connect, host_facts, host_forget (backend.h). */
int vm_host_connect(struct fleetd *f, const char *host, const char *uri, int timeout_s,
		    void (*done)(struct fleetd *f, void *arg, int r, const char *why), void *arg, char **why);
void vm_host_facts(struct fleetd *f, const char *host, const char *uri, struct host_facts *ret);
void vm_host_forget(struct fleetd *f, const char *host);
/* move.c: -EBUSY with *why while a move to host is under way (its record in <state_dir>/moves), else 0. */
int vm_host_busy(struct fleetd *f, const char *host, char **why);
/*
 * KVM that a host's libvirt offers but that runs no guest (channel.c's
 * watchdog): vm_host_kvm_off says whether host was found so (remembered in
 * <state_dir>/vms/virt-type@HOST until the host is added again; for local,
 * b->domain_type), vm_host_kvm_set_off records it (0 or -errno), and
 * vm_host_domain_type is what a domain there gets: "kvm" where its libvirt
 * offers KVM and it was not found unusable, else "qemu". Any thread.
 * vm_host_kvm_proven / _set_proven: a KVM guest there printed its kernel
 * banner (loop only).
 */
bool vm_host_kvm_off(struct vm_backend *b, const char *host);
int vm_host_kvm_set_off(struct vm_backend *b, const char *host);
const char *vm_host_domain_type(struct vm_backend *b, const char *host, struct virt *v);
bool vm_host_kvm_proven(struct vm_backend *b, const char *host);
void vm_host_kvm_set_proven(struct vm_backend *b, const char *host);
bool vm_host_reachable(struct fleetd *f, const char *host, char **why);

/* channel.c */
/* Call done once the guest's control channel is up (now, if it is); never inside the call. */
void vm_wait_ready(struct vm *v, backend_done_fn done, void *userdata);
/* Tell every waiter of v r and why. */
void vm_waiters_finish(struct vm *v, int r, const char *why);
/* <state_dir>/vms/virt-type: "qemu" once KVM proved unusable here. */
char *vm_virt_type_file(struct vm_backend *b);

/* doctor.c: libvirtd and KVM for `fleetctl doctor` (backend_ops.doctor) */
void vm_doctor(struct fleetd *f, struct doctor_report *r);

/* provision.c */
/* What a domain definition names (each string owned by whoever filled it). */
struct vm_domain_files {
	char *kernel, *initrd;
	char *disk;
	char *backing;		/* the disk's base, pinned; NULL: none pinned (an agent from before the image store) */
	char *seed;
	char *memdisk;		/* NULL: no memory disk (an agent made before them, on another host) */
	char *console;		/* NULL: a pty there, no file on fleetd's host */
	char *channel;		/* the control socket; NULL: libvirt picks its path on the agent's host */
	const char *domain_type;	/* "kvm" or "qemu"; NULL: b->domain_type (fleetd's own host's) */
	bool remote_nat;		/* a NAT agent on another host: REMOTE_NAT_NETWORK and its filter (remote_nat.c) */
};
void vm_domain_files_clear(struct vm_domain_files *f);
/* The domain definition naming files (uuid NULL: a new domain); caller frees. */
char *vm_domain_xml_files(struct vm_backend *b, const struct agent *a, const struct vm_domain_files *files,
			  const char *uuid);
/* On a host other than local (its disks are volumes there: remote_disks.c). */
bool vm_agent_remote(const struct agent *a);
int vm_provision(struct fleetd *f, const struct agent *a, char **why);
/* The ops' provision_start: a remote agent's disks and domain made there on a worker (v busy meanwhile). */
int vm_provision_start(struct fleetd *f, const struct agent *a, backend_done_fn done, void *userdata, char **why);
int vm_destroy(struct fleetd *f, const struct agent *a, bool force, char **why);
/* The domain definition (uuid NULL: a new domain); caller frees. */
char *vm_domain_xml(struct vm_backend *b, const struct agent *a, const struct agent_images *im, const char *uuid);
char *vm_network_xml(void);
/* Before a boot: the agent's dir root's and 0711, its disks 0600, no link at console.log; -errno with *why. */
int vm_dir_secure(struct vm_backend *b, const char *agent, char **why);

/* remote_disks.c */
/* The volume name of an agent's FILE (disk.qcow2, seed.img) in the host's pool; caller frees. */
char *vm_remote_agent_vol(const char *agent, const char *file);
/* The pool there, and image id in it, uploaded once and checked by its hash; -errno with *why. */
int vm_remote_image(struct vm_backend *b, struct virt *v, const char *id, char **why);
/*
 * The image, the agent's overlay on it, its seed and its memory disk (the
 * local files seed and memdisk; memdisk NULL: none) uploaded; blocking (a
 * worker's, at create); what it made there is deleted on failure. -errno with *why.
 */
int vm_remote_disks_make(struct vm_backend *b, struct virt *v, const struct agent *a, const char *id,
			 const char *seed, const char *memdisk, char **why);
/* fd (a regular file, opened just now: read from its start) uploaded as the agent's FILE there, replacing one; -errno with *why. */
int vm_remote_upload_fd(struct virt *v, const char *agent, const char *file, int fd, char **why);
/*
 * The definition of a's domain on v's host (uuid NULL: a new domain): its
 * disk, seed and memory disk volumes, its disk on image's base, the kernel
 * and initramfs of boot_image (NULL: image's), each uploaded there already.
 * Caller frees *ret; -errno with *why.
 */
int vm_remote_domain_xml(struct vm_backend *b, struct virt *v, const struct agent *a, const char *image,
			 const char *boot_image, const char *uuid, char **ret, char **why);
/* 0 for a local agent; for one elsewhere -EOPNOTSUPP, *why (if why) saying what is not built there. */
int vm_remote_refuse(const struct agent *a, const char *what, char **why);
/* The path there of the image's FILE (vmlinuz, initramfs.img, base.qcow2); -errno with *why. */
int vm_remote_image_path(struct virt *v, const char *id, const char *file, char **ret, char **why);
/* The agent's volumes deleted (the image's stay: other agents there boot it). */
void vm_remote_disks_remove(struct virt *v, const char *agent);
/* The paths libvirt reports for the agent's volumes and its image's; -errno with *why. */
int vm_remote_files(struct vm_backend *b, struct virt *v, const struct agent *a, const char *id,
		    struct vm_domain_files *ret, char **why);

/* move.c: fleetctl move (docs/multi-host.md "Moving an agent") */
/* The ops' move and move_finish (backend.h). */
int vm_move(struct fleetd *f, const struct agent *a, const char *host, backend_done_fn done, void *userdata,
	    char **why);
int vm_move_finish(struct fleetd *f, const struct agent *a, const char *from, char **why);
/* A move of agent cut short (its record): the copy on the host fleet does not record it on removed; -errno. */
int vm_move_recover_one(struct vm_backend *b, const char *agent);
/* At start: every move cut short by a kill, so. */
void vm_move_recover(struct vm_backend *b);

/* remote_nat.c */
/* The agent's network filter's name (REMOTE_NAT_FILTER_PREFIX + agent); caller frees. */
char *vm_remote_nat_filter(const char *agent);
/* REMOTE_NAT_NETWORK on v's host, defined (a /24 fleet chooses there) and started; its gateway and prefix. */
int vm_remote_nat_network(struct virt *v, char gw[16], int *prefix, char **why);
/* The gateway address and prefix of a network's definition (libvirt's XML, its first IPv4 <ip>); -EINVAL without one. */
int vm_remote_nat_network_ip(const char *xml, char gw[16], int *prefix);

/* disk_backup.c */
/*
 * A guest a backup copy paused and a stopped or killed fleetd never
 * resumed (its BACKUP_PAUSED record): resumed on virt. 1 resumed, 0
 * nothing to do, -errno (its host unreachable: the record stays).
 */
int vm_backup_pause_undo(struct vm_backend *b, const char *agent, struct virt *virt);
/* At start: every such guest, so. */
void vm_backup_pause_recover(struct vm_backend *b);
/*
 * The agent's filter (libvirt's nwfilter XML; caller frees) for the network
 * gw/prefix, the host's own addresses host_addrs (NULL-terminated) and the
 * list egress_allow (NULL: none; names resolved now, blocking). NULL with
 * *why when the list does not parse.
 */
char *vm_remote_nat_filter_xml(const char *agent, const char *gw, int prefix, const char *const *host_addrs,
			       const char *egress_allow, char **why);
/* The network ensured and the agent's filter defined on v's host (blocking: names resolved); -errno with *why. */
int vm_remote_nat_apply(struct virt *v, const char *agent, const char *egress_allow, char **why);
/* The agent's filter undefined there (its guest gone); the network stays for other agents. Logged, never fails. */
void vm_remote_nat_remove(struct virt *v, const char *agent);

/* console.c */
/* The newest max bytes of the agent's console; missing files read as empty; -errno (-EINVAL: not a regular file). */
int vm_console_read(struct vm_backend *b, const char *agent, size_t max, char **ret, size_t *ret_len);
int vm_console(struct fleetd *f, const struct agent *a, size_t max, char **ret, size_t *ret_len);
bool vm_console_has_kernel_banner(struct vm_backend *b, const char *agent);
/*
 * The agent's console files within vm_console_max_bytes now. agent may come
 * from libvirt: it is checked to be an agent name before it names a path.
 * Failures are logged (debug): the next check tries again.
 */
void vm_console_cap(struct vm_backend *b, const char *agent);
/* Start and stop enforcing the cap periodically. */
void vm_console_watch_start(struct vm_backend *b);
void vm_console_watch_stop(struct vm_backend *b);

/* remote_console.c */
/* A remote guest's console streamed into its console.log from now on (0 if it is already); -errno with *why. */
int vm_remote_console_open(struct vm *v, char **why);
void vm_remote_console_close(struct vm *v);
/* Opened if it is not, or no longer on v->virt's current connection; a failure is logged (debug) only. */
void vm_remote_console_ensure(struct vm *v);
/* From the console timer: every running remote agent without a stream gets one, and the cap. */
void vm_remote_consoles_tick(struct vm_backend *b);

/* remote_boot.c */
/*
 * Before a remote agent's boot (off: its domain is shut off): 0 nothing to
 * do (boot now), 1 a worker brings its domain to its boot image (uploaded
 * there once) and its memory disk to its quota's size, then calls done on
 * the loop (v busy meanwhile); -errno with *why.
 */
int vm_remote_boot_prepare(struct vm *v, const struct agent *a, bool off,
			   void (*done)(struct vm *v, int r, const char *why, void *userdata), void *userdata, char **why);
/*
 * Boot a's defined, stopped domain on its other host: started paused, its
 * console streamed here, resumed; v->booted_type, started_at and
 * boot_agent set for the KVM watchdog. 0, or -errno with *why.
 */
int vm_remote_boot(struct vm *v, const struct agent *a, char **why);

/* upgrade.c */
static inline void agent_images_clearp(struct agent_images *im)
{
	agent_images_clear(im);
}
#define _cleanup_images_ _cleanup_(agent_images_clearp)
/* The agent's image record from fleet (host->get_images); -errno, logged. */
int vm_load_images(struct vm_backend *b, const char *agent, struct agent_images *im);
/* At fleetd's start: record an image for each agent made before the image store. */
void vm_adopt_legacy_agents(struct vm_backend *b);
/* Before a boot: the overlay and the domain definition name the agent's images; -errno with *why. */
int vm_prepare_boot(struct vm_backend *b, const struct agent *a, char **why);

/* snapshots.c */
int vm_snapshot_create(struct fleetd *f, const struct agent *a, const char *snap, backend_snapshot_fn done,
		       void *userdata, char **why);
int vm_snapshot_restore(struct fleetd *f, const struct agent *a, const char *snap, backend_done_fn done,
			void *userdata, char **why);
int vm_snapshot_delete(struct fleetd *f, const struct agent *a, const char *snap, char **why);
int vm_snapshot_exists(struct fleetd *f, const struct agent *a, const char *snap);

/* events.c */
/* virt.c's event callback (userdata: the struct vm_backend). */
void vm_on_virt_event(void *userdata, const char *domain, enum virt_event_kind kind);
/* libvirt domains of ours that belong to no agent: logged, never touched. */
void vm_report_orphans(struct vm_backend *b);

/* memdisk.c */
/* The memory disk's size (MiB) for a quota, so the file system holds the quota. */
int vm_memdisk_mib(int quota_mib);
/* Build an ext4 qcow2 of mib MiB at path (blocking: a worker's); -errno with *why. */
int vm_memdisk_build(const char *path, int mib, char **why);
/* At start: the temp files of memory disk builds cut short, in every agent's directory (never a disk). */
void vm_memdisk_sweep(struct vm_backend *b);
/* 1: the agent's memory disk is there, 0: not yet, -errno: something else is. */
int vm_memdisk_exists(struct vm_backend *b, const char *agent);
/* Make it on a worker (v busy meanwhile), then done on the loop; -errno with *why if that cannot start. */
int vm_memdisk_make(struct vm *v, const struct agent *a, void (*done)(struct vm *v, int r, const char *why, void *userdata),
		    void *userdata, char **why);
/* Before a boot of a stopped agent: its disk grown back to its quota's size after a revert; -errno with *why. */
int vm_memdisk_fit(struct vm_backend *b, const struct agent *a, char **why);
/* A revert may have brought back a smaller disk: the next vm_memdisk_fit reads its size again. */
void vm_memdisk_forget(struct vm *v);
/* The ops' memory_quota_apply: grow a stopped agent's disk; a shrink is refused. */
int vm_memory_quota_apply(struct fleetd *f, const struct agent *a, int old_mib, char **why);

/* egress.c */
/* Before a NAT guest boots, and when its list changes: the firewall's base and a's list; -errno with *why. */
int vm_egress_apply(struct vm_backend *b, const struct agent *a, char **why);
/* The ops' network_apply and network_refused (backend.h). */
int vm_network_apply(struct fleetd *f, const struct agent *a, char **why);
int vm_network_refused(struct fleetd *f, const struct agent *a, long long *packets);
/* At start: every NAT agent's rules again, in case they went missing. */
void vm_egress_reconcile(struct vm_backend *b);
/* Host names in lists resolved again every 5 minutes (on a worker); stop at shutdown. */
void vm_egress_refresh_start(struct vm_backend *b);
void vm_egress_refresh_stop(struct vm_backend *b);

#endif
