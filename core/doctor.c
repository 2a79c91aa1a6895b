/*
 * core/doctor.c: GET /v1/doctor's findings (`fleetctl doctor`). Each fact is
 * checked by the layer that owns it: the backends' own (libvirtd, KVM,
 * cgroups) through backend_ops.doctor, the guest image through the image
 * store (vm/images.h), fleet's nftables table through backend/firewall.h,
 * the webhook listener here in core; the state dir's space and the clock
 * are the host's, read here. Read-only and quick: nothing is repaired.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/timex.h>
#include <unistd.h>

#include "backend/firewall.h"
#include "common/util.h"
#include "core/backends.h"
#include "core/doctor.h"
#include "core/hosts.h"
#include "core/listener.h"
#include "core/memory.h"
#include "model/fleetd.h"
#include "model/host.h"
#include "store/db.h"
#include "vm/images.h"

/* Free space and inodes: FAIL below 2% or these floors, WARN below 10% or these. */
#define SPACE_FAIL_BYTES (16LL << 20)
#define SPACE_WARN_BYTES (512LL << 20)
#define INODES_FAIL 1000
#define INODES_WARN 10000

static enum doctor_status level(unsigned long long avail, unsigned long long total, unsigned long long fail_floor,
				unsigned long long warn_floor)
{
	if (avail < fail_floor || avail * 50 < total)
		return DOCTOR_FAIL;
	if (avail < warn_floor || avail * 10 < total)
		return DOCTOR_WARN;
	return DOCTOR_OK;
}

static void check_state_dir(struct fleetd *f, struct doctor_report *r)
{
	const char *dir = config_get(&f->cfg, CFG_STATE_DIR);
	unsigned long long avail, total;
	enum doctor_status s;
	struct statvfs sv;

	if (statvfs(dir, &sv) < 0) {
		doctor_add(r, "state-dir", DOCTOR_FAIL, "check the state dir's file system (mount, permissions)",
			   "cannot read the file system of %s: %s", dir, strerror(errno));
		return;
	}
	avail = (unsigned long long)sv.f_bavail * sv.f_frsize;
	total = (unsigned long long)sv.f_blocks * sv.f_frsize;
	s = level(avail, total, SPACE_FAIL_BYTES, SPACE_WARN_BYTES);
	doctor_add(r, "state-dir-space", s,
		   s == DOCTOR_OK ? NULL : "free space there (old snapshots: 'fleetctl snapshot rm', unused images: "
					   "'fleetctl image rm'), or move state_dir to a larger file system",
		   "%s: %llu MiB free of %llu MiB", dir, avail >> 20, total >> 20);
	if (sv.f_files == 0) {	/* a file system without an inode count (btrfs) */
		doctor_add(r, "state-dir-inodes", DOCTOR_OK, NULL, "%s: no fixed inode count", dir);
		return;
	}
	s = level(sv.f_favail, sv.f_files, INODES_FAIL, INODES_WARN);
	doctor_add(r, "state-dir-inodes", s,
		   s == DOCTOR_OK ? NULL : "remove files there, or move state_dir to a file system with more inodes",
		   "%s: %llu inodes free of %llu", dir, (unsigned long long)sv.f_favail,
		   (unsigned long long)sv.f_files);
}

/* systemd-timesyncd's mark of a synchronised clock (touched at each sync, since systemd 250). */
#define TIMESYNCD_SYNCHRONIZED "/run/systemd/timesync/synchronized"

static void check_clock(struct doctor_report *r)
{
	struct timex tx = { .modes = 0 };
	int state = adjtimex(&tx), err = state < 0 ? errno : 0;

	if (state < 0 && err == EPERM && access(TIMESYNCD_SYNCHRONIZED, F_OK) == 0)
		doctor_add(r, "clock", DOCTOR_OK, NULL,
			   "synchronised (systemd-timesyncd says so; the kernel's own state is not readable under "
			   "the unit's ProtectClock=yes)");
	else if (state < 0 && err == EPERM)
		doctor_add(r, "clock", DOCTOR_WARN, "check the host's time service: timedatectl status",
			   "cannot tell whether the clock is synchronised: fleetd's unit has ProtectClock=yes, under "
			   "which systemd denies even reading the kernel's clock state, and no systemd-timesyncd "
			   "says it is");
	else if (state < 0)
		doctor_add(r, "clock", DOCTOR_WARN, "check the host's time service (timedatectl status)",
			   "cannot read the kernel's clock state: %s", strerror(err));
	else if (state == TIME_ERROR)
		doctor_add(r, "clock", DOCTOR_WARN,
			   "enable time synchronisation: timedatectl set-ntp true (systemd-timesyncd or chrony)",
			   "the clock is not synchronised: cron slots drift, and signed webhooks with timestamps "
			   "(slack, standard) are refused when it is off by minutes");
	else
		doctor_add(r, "clock", DOCTOR_OK, NULL, "synchronised (estimated error %ld us)", tx.esterror);
}

static void check_listener(struct fleetd *f, struct doctor_report *r)
{
	struct listener_status ls;

	listener_status(f, &ls);
	switch (ls.state) {
	case LISTENER_OFF:
		doctor_add(r, "listener", DOCTOR_WARN,
			   "set hooks_listen in fleetd.conf (e.g. 127.0.0.1:8470) and restart fleetd, if agents are to "
			   "get webhooks",
			   "the webhook listener is off (hooks_listen = none): no webhook reaches any agent");
		break;
	case LISTENER_UP:
		doctor_add(r, "listener", DOCTOR_OK, NULL, "the webhook listener is up on %s (pid %ld)",
			   ls.listen ? ls.listen : "?", (long)ls.pid);
		break;
	case LISTENER_STARTING:
		doctor_add(r, "listener", DOCTOR_WARN, "run doctor again in a moment",
			   "the webhook listener on %s is starting", ls.listen ? ls.listen : "?");
		break;
	case LISTENER_DOWN:
		doctor_add(r, "listener", DOCTOR_FAIL,
			   "read fleetd's log (journalctl -u fleetd) for why fleet-hooksd exits; fleetd restarts it",
			   "the webhook listener on %s is %s after %ld restart(s)", ls.listen ? ls.listen : "?",
			   listener_state_to_string(ls.state), ls.restarts);
		break;
	}
}

static void check_backends(struct fleetd *f, struct agent **agents, size_t n, struct doctor_report *r)
{
	for (int k = 0; k < BACKEND__COUNT; k++) {
		enum backend_kind kind = (enum backend_kind)k;
		const char *name = backend_kind_to_string(kind), *why = NULL;
		const struct backend_ops *ops;
		char check[32];
		size_t users = 0;

		if (!backend_built_in(kind))
			continue;
		for (size_t i = 0; i < n; i++)
			users += agents[i]->backend == kind;
		snprintf(check, sizeof(check), "backend-%s", name);
		if (!(ops = backend_get(f, kind, &why))) {
			doctor_add(r, check, users ? DOCTOR_FAIL : DOCTOR_WARN,
				   "fix what it names, then restart fleetd",
				   "the %s backend is unavailable (%zu agent(s) use it): %s", name, users,
				   why ? why : "unknown");
			continue;
		}
		doctor_add(r, check, DOCTOR_OK, NULL, "the %s backend is available (%zu agent(s))", name, users);
		if (ops->doctor)
			ops->doctor(f, r);
	}
}

/* The image a new VM agent would be made from, and whether its agentd is this fleet's. */
static void check_guest_image(struct fleetd *f, struct doctor_report *r)
{
	const char *state = config_get(&f->cfg, CFG_STATE_DIR), *why_off = NULL;
	_cleanup_free_ char *dir = images_image_dir(state, config_get(&f->cfg, CFG_IMAGE_DIR));
	_cleanup_free_ char *want = NULL, *agentd = NULL, *why = NULL, *fix = NULL;
	char have[IMAGE_ID_LEN + 1];
	int e;

	if (!backend_get(f, BACKEND_VM, &why_off))
		return;	/* the backend's own line says why; no image is of use without it */
	fix = xasprintf("build it: images/build-image.sh --out %s (images/README.md)", dir);
	if (image_dir_inspect(dir, &want, &why) < 0) {
		doctor_add(r, "guest-image", DOCTOR_FAIL, fix, "no complete guest image: %s", why);
		return;
	}
	if (!(agentd = memory_host_agentd())) {
		doctor_add(r, "guest-image", DOCTOR_WARN, "install agentd beside fleetd (make install)",
			   "guest image in %s; no agentd on the host to compare it with", dir);
		return;
	}
	if ((e = image_file_sha256(agentd, have)) < 0) {
		doctor_add(r, "guest-image", DOCTOR_WARN, "check that file", "cannot read %s: %s", agentd,
			   strerror(-e));
		return;
	}
	if (!want || strcmp(want, have) != 0) {
		free(fix);
		fix = xasprintf("rebuild it: images/build-image.sh --out %s; then 'fleetctl upgrade NAME' for each VM "
				"agent", dir);
		doctor_add(r, "guest-image", DOCTOR_WARN, fix,
			   "the guest image in %s has agentd %.12s, this fleet's (%s) is %.12s", dir,
			   want ? want : "(unnamed)", agentd, have);
		return;
	}
	doctor_add(r, "guest-image", DOCTOR_OK, NULL, "guest image in %s, its agentd is this fleet's (%.12s)", dir,
		   have);
}

static void check_firewall(struct agent **agents, size_t n, struct doctor_report *r)
{
	size_t nat = 0;

	/* A VM agent on another host has its rules in a network filter there (docs/multi-host.md), none here. */
	for (size_t i = 0; i < n; i++)
		nat += agents[i]->network == NETWORK_NAT &&
		       (!agents[i]->host || strcmp(agents[i]->host, HOST_LOCAL) == 0);
	if (nat == 0) {
		doctor_add(r, "firewall", DOCTOR_OK, NULL,
			   "no agent has --network nat here: fleet needs no firewall rules");
		return;
	}
	if (firewall_base_present())
		doctor_add(r, "firewall", DOCTOR_OK, NULL, "table inet " FIREWALL_TABLE " present (%zu NAT agent(s))",
			   nat);
	else
		doctor_add(r, "firewall", DOCTOR_FAIL,
			   "restart fleetd (it puts its rules back at start); until then keep NAT agents stopped",
			   "table inet " FIREWALL_TABLE " or its chains are missing: %zu NAT agent(s) may reach the host, "
			   "each other and the metadata address", nat);
}

/* Each host added with `host add` (local is the backend's own "libvirt" check): reachable or why not. */
static void check_hosts(struct fleetd *f, struct doctor_report *r)
{
	struct host *v = NULL;
	size_t n = 0;

	if (hosts_list(f, true, &v, &n) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *check = xasprintf("host-%s", v[i].name);

		if (strcmp(v[i].name, HOST_LOCAL) == 0)
			continue;
		if (v[i].facts.reachable)
			doctor_add(r, check, DOCTOR_OK, NULL, "host %s reachable at %s (libvirt %s, %s, %d agent(s))%s",
				   v[i].name, v[i].uri, v[i].facts.libvirt, v[i].facts.kvm ? "KVM" : "TCG", v[i].agents,
				   v[i].draining ? ", draining" : "");
		else
			doctor_add(r, check, v[i].agents ? DOCTOR_FAIL : DOCTOR_WARN,
				   "check that host's libvirtd and the way there (SSH keys, TLS certificates); fleetd "
				   "reconnects by itself, or 'fleetctl host rm' an empty host no longer wanted",
				   "host %s (%s) unreachable: %s; %d agent(s) placed there", v[i].name, v[i].uri,
				   v[i].facts.error ? v[i].facts.error : "not connected", v[i].agents);
	}
	host_list_free(v, n);
}

int doctor_run(struct fleetd *f, struct doctor_report *r, char **why)
{
	struct agent **agents = NULL;
	size_t n = 0;
	int e;

	if ((e = db_agent_list(f->db, &agents, &n)) < 0) {
		*why = xasprintf("cannot list agents: %s", strerror(-e));
		return e;
	}
	check_backends(f, agents, n, r);
	check_guest_image(f, r);
	check_firewall(agents, n, r);
	check_state_dir(f, r);
	check_clock(r);
	check_listener(f, r);
	check_hosts(f, r);
	agent_list_free(agents);
	return 0;
}
