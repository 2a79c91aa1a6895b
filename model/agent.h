/*
 * agent: the in-memory shape of an agent record and the name tables of its
 * enums. Plain data; no I/O.
 */
#ifndef FLEET_AGENT_H
#define FLEET_AGENT_H

#include <stdbool.h>
#include <stdint.h>

enum backend_kind { BACKEND_VM, BACKEND_USER, BACKEND__COUNT };

/*
 * defined: recorded, environment not provisioned (no backend could do it).
 * stopped/running: provisioned environment, as its backend reports it.
 * bad: health checks failed and no rollback brought it back.
 * removing: a remove is under way (written before the backend destroys, so
 *   a kill -9 leaves an intent that lifecycle_reconcile() finishes).
 * missing: the record is there but the environment is gone (a user agent's
 *   Unix user or home, a VM's domain); state_detail says what. Only rm helps.
 */
enum agent_state {
	AGENT_DEFINED,
	AGENT_PROVISIONING,
	AGENT_STOPPED,
	AGENT_RUNNING,
	AGENT_BAD,
	AGENT_REMOVING,
	AGENT_MISSING,
	AGENT_STATE__COUNT,
};

enum network_kind { NETWORK_NONE, NETWORK_NAT, NETWORK__COUNT };

/* What fleet does when an environment stops without being asked to. */
enum restart_policy { RESTART_ON_FAILURE, RESTART_ALWAYS, RESTART_NEVER, RESTART__COUNT };

/* When fleet takes snapshots by itself (retention applies to all of them). */
enum snapshot_policy { SNAPSHOT_POLICY_NONE, SNAPSHOT_POLICY_BEFORE_RUN, SNAPSHOT_POLICY_CRON, SNAPSHOT_POLICY__COUNT };

struct agent {
	int64_t id;
	char *name;
	enum backend_kind backend;
	enum agent_state state;
	char *state_detail;	/* why the state is what it is (missing: what is gone), or NULL */
	int memory_mib;
	int vcpus;
	int disk_gib;
	enum network_kind network;
	char *egress_allow;	/* nat only: the hosts and CIDRs it may reach (model/egress.h), NULL: anything outside */
	enum restart_policy restart;
	char *command;		/* what `agentd run` starts; may be NULL */
	int64_t created_at;	/* unix seconds */
	int64_t updated_at;
	/* health (health.c) */
	char *health_command;	/* NULL: the backend's default */
	int health_interval_s;	/* 0: no periodic checks */
	bool auto_rollback;	/* restore the newest good snapshot when a check fails */
	int health;		/* -1 unknown, 0 unhealthy, 1 healthy */
	int64_t health_at;
	char *health_detail;
	char *last_rollback;	/* what the last automatic rollback did, or NULL */
	/* snapshots (snapshots.c, sched.c) */
	enum snapshot_policy snapshot_policy;
	char *snapshot_schedule;	/* cron spec when the policy is cron, else NULL */
	int snapshot_keep;	/* keep the newest N (plus pinned and the newest good); 0: keep all */
	char *restoring;	/* a restore to this snapshot is under way, or NULL */
	/* the run queue (core/runs.c) */
	int run_timeout_s;	/* a run still going after this is killed (timed-out) */
	int max_queued;		/* queuing one more run than this many waiting is refused */
	int retry_interrupted;	/* times a run cut off by fleetd stopping is queued again */
	/* the memory store (core/memory.c, docs/memory.md) */
	int memory_quota_mib;	/* what ~/memory may hold; 0 in a zeroed record: the default */
	bool secret_files;	/* runs get the secrets as files on a tmpfs (FLEET_SECRETS_DIR), not variables */
	/* after a host reboot (core/autostart.c) */
	bool autostart;		/* started when fleetd first starts after the host booted */
	int boot_priority;	/* higher first; equal ones by name */
	/* the hypervisor host a VM agent is placed on (core/hosts.c); NULL for user agents */
	char *host;
};

#define HEALTH_INTERVAL_DEFAULT 60
#define HEALTH_INTERVAL_MAX 86400

/* Limits shared by the API and fleetctl's help text. */
#define AGENT_MEMORY_MIN 64
#define AGENT_MEMORY_MAX 65536
#define AGENT_MEMORY_DEFAULT 256
#define AGENT_VCPUS_MAX 64
#define AGENT_DISK_MAX 1024
#define AGENT_DISK_DEFAULT 2
#define AGENT_COMMAND_MAX 4096
#define SNAPSHOT_KEEP_MAX 1000
#define RUN_TIMEOUT_DEFAULT 3600
#define RUN_TIMEOUT_MAX (7 * 86400)
#define MAX_QUEUED_DEFAULT 100
#define MAX_QUEUED_MAX 100000
#define RETRY_INTERRUPTED_MAX 100
#define MEMORY_QUOTA_DEFAULT 64
#define BOOT_PRIORITY_MIN (-1000)
#define BOOT_PRIORITY_MAX 1000
#define MEMORY_QUOTA_MAX 256	/* MiB: a store is notes and small databases, and crosses fleetd in one piece */

void agent_free(struct agent *a);
/* A deep copy. */
struct agent *agent_copy(const struct agent *a);
static inline void agent_freep(struct agent **a) { agent_free(*a); }
/* Frees each agent of a NULL-terminated list, then the list; NULL is fine. */
void agent_list_free(struct agent **list);

/*
 * A VM agent's guest images (store ids, vm/images.h), each NULL when none is
 * recorded: image backs its disk, boot_image gives its kernel and
 * initramfs, old_images (ids separated by spaces) are boot images it had
 * before, which its snapshots' saved domain definitions may still name.
 * The store keeps it; the VM backend reaches it through struct backend_host.
 */
struct agent_images {
	char *image;
	char *boot_image;
	char *old_images;
};
/* Frees the strings and zeroes *im. */
void agent_images_clear(struct agent_images *im);

const char *backend_kind_to_string(enum backend_kind k);
int backend_kind_from_string(const char *s);	/* -EINVAL if unknown */
const char *agent_state_to_string(enum agent_state s);
int agent_state_from_string(const char *s);
const char *network_kind_to_string(enum network_kind k);
int network_kind_from_string(const char *s);
const char *restart_policy_to_string(enum restart_policy p);
int restart_policy_from_string(const char *s);
const char *snapshot_policy_to_string(enum snapshot_policy p);
int snapshot_policy_from_string(const char *s);

#endif
