/*
 * virt: fleetd's adapter to libvirt; virt.c, virt_storage.c and virt_channel.c
 * are the only files that include <libvirt/libvirt.h>. A struct virt is one connection, to one host
 * (reconnecting with backoff after a libvirtd restart or a network loss);
 * one thread runs libvirt's event loop for all of them and hands domain
 * lifecycle events to fleetd's event loop. It knows nothing about agents:
 * callers speak in domain names and XML.
 */
#ifndef FLEET_VIRT_H
#define FLEET_VIRT_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct virt;

enum virt_state { VIRT_OFF, VIRT_RUNNING, VIRT_PAUSED, VIRT_SHUTTING_DOWN, VIRT_CRASHED, VIRT_OTHER };

enum virt_event_kind {
	VIRT_EV_STARTED,
	VIRT_EV_STOPPED_SHUTDOWN,	/* the guest shut itself down */
	VIRT_EV_STOPPED_DESTROYED,	/* fleet or an operator destroyed it */
	VIRT_EV_STOPPED_CRASHED,	/* QEMU died or the guest crashed */
	VIRT_EV_STOPPED_OTHER,
	VIRT_EV_UNDEFINED,
	VIRT_EV_OTHER,
	VIRT_EV_RECONNECTED,		/* domain is NULL: libvirtd came back */
};

/* Called on fleetd's event loop thread. */
typedef void (*virt_event_fn)(void *userdata, const char *domain, enum virt_event_kind kind);

/*
 * Connect to uri and deliver lifecycle events through fn on base. A failed
 * first connection is not fatal: -errno and *why are returned, and the
 * caller may retry with virt_connect(). The first connect is made here, on
 * the caller's thread; every later one of a URI that names a host
 * (qemu+tcp://HOST/..., qemu+ssh://...) runs on a worker thread, never on
 * the loop, where a host that stopped answering would hold it for TCP's
 * connect timeout each time.
 */
int virt_open(struct event_base *base, const char *uri, virt_event_fn fn, void *userdata,
	      struct virt **ret, char **why);
/*
 * The same with the first connect on a worker too (`host add`): *ret at
 * once, then opened(arg, r, why) on the loop once, when the connect
 * answered (0, or -ENOTCONN with libvirt's words) or timeout_s passed
 * first (-ENOTCONN; the worker is left to end alone, as virt_close leaves
 * it). Never before this returns. The caller closes *ret after a failure
 * (it may from opened). -errno with *why (and no *ret) if it cannot start.
 */
typedef void (*virt_opened_fn)(void *arg, int r, const char *why);
int virt_open_async(struct event_base *base, const char *uri, virt_event_fn fn, void *userdata, int timeout_s,
		    virt_opened_fn opened, void *arg, struct virt **ret, char **why);
void virt_close(struct virt *v);
/*
 * (Re)connect now if not connected; 0 when connected. On the loop, for a
 * URI that names a host: a connect on a worker is started (if none is under
 * way) and -ENOTCONN returned at once.
 */
int virt_connect(struct virt *v, char **why);
bool virt_is_connected(struct virt *v);
/* Which connection this is: it changes with each (re)connect, and a stream of the old one is dead. */
unsigned virt_generation(struct virt *v);
/*
 * The URI connected to, and the versions libvirtd (libvirt) and its
 * hypervisor (QEMU) report, as "MAJOR.MINOR.RELEASE" (for `fleetctl doctor`).
 * 0, or -errno with *why when not connected.
 */
const char *virt_uri(struct virt *v);
int virt_versions(struct virt *v, char libvirt[32], char hypervisor[32], char **why);
/* Why the last connect failed or the connection went (libvirt's message); NULL while connected. */
const char *virt_connect_error(struct virt *v);
/* What a host says of itself, for `host ls` and placement. */
struct virt_facts {
	char libvirt[32];		/* "MAJOR.MINOR.RELEASE" */
	char qemu[32];			/* or "unknown" */
	bool kvm;			/* QEMU can use KVM there (domain capabilities) */
	long long free_memory_bytes;	/* free plus page cache and buffers (virNodeGetMemoryStats); -1 unknown */
};
/*
 * On the loop, never waiting for the host: the facts read last (at the
 * connect, or by a later read) in *ret and their age in *age_s, or -ENOENT
 * when none were read yet. *error: why the last read failed (valid until
 * the next call; NULL when it did not). A call that finds them 5 s old or
 * more (or none) while connected starts one read on a worker (one at a
 * time) and still answers with what it has: the next call sees the new
 * ones. Nothing reads them while nobody asks. A host that stopped
 * answering holds its read, not the loop, and the age grows.
 */
int virt_facts(struct virt *v, struct virt_facts *ret, long long *age_s, const char **error);
/* Whether a read of the facts is under way (a host that stopped answering holds one until the keepalive). */
bool virt_facts_refreshing(struct virt *v);
/* For how many seconds that read has been under way; -1 when none is. */
long long virt_facts_refreshing_s(struct virt *v);
/* How many reads virt_facts started since v was opened (the connect's own read not counted). */
unsigned long long virt_facts_reads(struct virt *v);
/* Whether QEMU can use KVM there (libvirt's domain capabilities for virttype kvm). */
bool virt_kvm(struct virt *v);

/* Each returns 0 or -errno with *why; -ENOENT: no such domain. */
int virt_domain_define(struct virt *v, const char *xml, char **why);
int virt_domain_start(struct virt *v, const char *name, char **why);
/* Started with its vCPUs paused (virt_domain_resume runs them): nothing it prints is missed by a console opened meanwhile. */
int virt_domain_start_paused(struct virt *v, const char *name, char **why);
int virt_domain_shutdown(struct virt *v, const char *name, char **why);
int virt_domain_destroy(struct virt *v, const char *name, char **why);
/* Undefine, removing snapshot metadata with it (the disk files are the caller's). */
int virt_domain_undefine(struct virt *v, const char *name, char **why);
int virt_domain_state(struct virt *v, const char *name, enum virt_state *ret);
/* The running domain's libvirt id, new for each QEMU process it gets; -ENOENT when it is not running. */
int virt_domain_run_id(struct virt *v, const char *name, int *ret);
/* The live XML of a domain (caller frees). */
int virt_domain_xml(struct virt *v, const char *name, char **ret_xml);
/* The domain's UUID as a 36-character string (buf of at least 37 bytes). */
int virt_domain_uuid(struct virt *v, const char *name, char *buf);
/*
 * Names of the defined domains starting with prefix (active_only: those
 * running or paused); NULL-terminated, caller frees each and the array.
 */
int virt_domain_list(struct virt *v, const char *prefix, bool active_only, char ***ret);

/* One running domain's use of the host, from libvirt's bulk domain statistics. */
struct virt_domain_usage {
	char *name;
	long long memory_bytes;		/* balloon.rss: its QEMU's resident memory (balloon.current without it); -1 unknown */
	double cpu_seconds;		/* cpu.time; -1 unknown */
};
/*
 * The usage of every running domain whose name starts with prefix, in one
 * virConnectGetAllDomainStats call: *ret (caller frees each name and the
 * array) and *n, or -errno.
 */
int virt_domain_usage_all(struct virt *v, const char *prefix, struct virt_domain_usage **ret, size_t *n);

/*
 * Define and start the network from xml unless one of that name is active
 * (one it defined and could not start is undefined again).
 */
int virt_network_ensure(struct virt *v, const char *name, const char *xml, char **why);
/* The network's definition (caller frees); -ENOENT: none of that name. */
int virt_network_xml(struct virt *v, const char *name, char **ret, char **why);
/*
 * A network filter (nwfilter) defined from xml, replacing one of its name
 * (libvirt applies it again to the guests using it), and one undefined
 * (-ENOENT: none; libvirt refuses while a guest uses it). 0 or -errno with *why.
 */
int virt_nwfilter_define(struct virt *v, const char *xml, char **why);
int virt_nwfilter_undefine(struct virt *v, const char *name, char **why);

/*
 * Internal snapshots (qcow2): of a running domain a full checkpoint (RAM and
 * disk), of a shut-off one its disks. These block for seconds: call them from
 * a worker thread. 0 or -errno with *why; -ENOENT: no such domain/snapshot.
 */
int virt_snapshot_create(struct virt *v, const char *domain, const char *snap, char **why);
int virt_snapshot_revert(struct virt *v, const char *domain, const char *snap, char **why);
int virt_snapshot_delete(struct virt *v, const char *domain, const char *snap, char **why);
/*
 * A running snapshot's checkpoint loaded into the domain's running QEMU
 * (QEMU's loadvm, through libvirt's monitor pass-through), where libvirt's
 * revert stops that QEMU and starts a new one to load it. Only when that is
 * all libvirt's revert would do: the domain runs in QEMU run run_id (its
 * libvirt id, virt_domain_run_id()) and the snapshot was taken in that same
 * process (the caller knows; the same devices), it holds the guest's RAM,
 * and the persistent definition is the one it saved. Blocks like the
 * others. 0: loaded, running; -EOPNOTSUPP with *why: it does not apply
 * (nothing was touched); -ENOENT: no such domain or snapshot; another
 * -errno with *why: loadvm failed, and the guest's state is unknown (revert
 * with virt_snapshot_revert()).
 */
int virt_snapshot_load_in_place(struct virt *v, const char *domain, const char *snap, int run_id, char **why);
/* 1 if it exists, 0 if not, -errno. */
int virt_snapshot_exists(struct virt *v, const char *domain, const char *snap);

/*
 * For fleetctl backup --with-disks (vm/disk_backup.c): pause and resume a
 * running domain (QEMU drains and flushes its block layer on a pause), a
 * snapshot's definition (caller frees), and that definition given back to
 * the same domain (same UUID) defined again, its qcow2 holding the data.
 */
int virt_domain_suspend(struct virt *v, const char *name, char **why);
int virt_domain_resume(struct virt *v, const char *name, char **why);
int virt_snapshot_xml(struct virt *v, const char *domain, const char *snap, char **ret_xml, char **why);
int virt_snapshot_redefine(struct virt *v, const char *domain, const char *xml, char **why);
/* The names of domain's snapshots, parents before children; NULL-terminated, caller frees each and the array. */
int virt_snapshot_names(struct virt *v, const char *domain, char ***ret, char **why);

/*
 * Storage (virt_storage.c), how disks reach another host (#15): a `dir` pool
 * named pool at path on v's host, defined, built and started if it is not;
 * a volume's path there and its size in bytes (the file's, not a qcow2's
 * capacity); a new raw volume of size bytes filled from fd through a
 * virStream in bounded chunks (observe sees each chunk as it goes; a failed
 * upload deletes the volume); a new qcow2 overlay of capacity bytes on the
 * qcow2 file backing; a volume deleted. Names and paths: [A-Za-z0-9/._-].
 * Each returns 0 or -errno with *why; -ENOENT: no such pool or volume;
 * -EEXIST (from libvirt): a volume of that name exists.
 */
typedef void (*virt_upload_observer)(void *userdata, const void *data, size_t len);
int virt_pool_ensure(struct virt *v, const char *pool, const char *path, char **why);
/* The bytes free in pool on v's host, as libvirt sees them after a refresh of the pool: 0 or -errno with *why. */
int virt_pool_free(struct virt *v, const char *pool, long long *ret, char **why);
int virt_vol_path(struct virt *v, const char *pool, const char *vol, char **ret, char **why);
int virt_vol_size(struct virt *v, const char *pool, const char *vol, long long *ret, char **why);
int virt_vol_upload(struct virt *v, const char *pool, const char *vol, int fd, long long size,
		    virt_upload_observer observe, void *userdata, char **why);
int virt_vol_overlay(struct virt *v, const char *pool, const char *vol, const char *backing, long long capacity,
		     char **why);
int virt_vol_delete(struct virt *v, const char *pool, const char *vol, char **why);
/*
 * A qcow2 volume's virtual size grown to capacity bytes (libvirt's qemu-img
 * resize there; never shrunk): 1 grown, 0 it was that large; -EINVAL: not
 * qcow2 to libvirt.
 */
int virt_vol_grow_qcow2(struct virt *v, const char *pool, const char *vol, long long capacity, char **why);
/* The whole volume written to fd (a new file), through a virStream in bounded chunks, holes kept; -errno with *why. */
int virt_vol_download(struct virt *v, const char *pool, const char *vol, int fd, char **why);

/*
 * The guest's virtio-serial channel named channel, streamed over v's
 * connection (virDomainOpenChannel, virt_channel.c) and joined to *fd, one
 * end of a non-blocking Unix socketpair (the caller's to close): libvirt's
 * event thread pumps the bytes between the stream and the other end, and
 * closes both once either side ends. 0, or -errno with *why.
 */
int virt_channel_open(struct virt *v, const char *domain, const char *channel, int *fd, char **why);
/*
 * The guest's serial console (virDomainOpenConsole), the same way: the bytes
 * it prints arrive on *fd (nothing fleetd writes there is sent). Not forced:
 * while someone else holds the console (virsh console) it fails. 0, or
 * -errno with *why.
 */
int virt_console_open(struct virt *v, const char *domain, int *fd, char **why);

const char *virt_state_to_string(enum virt_state s);

#endif
