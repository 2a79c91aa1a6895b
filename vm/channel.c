/*
 * channel: reaching a guest's control channel. After a start (or when an
 * exec or a restore needs a session fleetd does not hold yet) it connects
 * the guest's ctl.sock (a guest on another host: its channel streamed over
 * that host's libvirt connection, virt_channel_open), runs the SSH handshake (ssh.c) against the pinned
 * host key, and retries every CONNECT_RETRY_MS until the guest answers or
 * vm_boot_timeout passes; then it calls the waiters. It also watches the
 * first KVM boot: KVM that exists but does not run guests sends this host
 * to TCG for good (kvm_watchdog()).
 */
#include <errno.h>
#include <event2/event.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "model/fleetd.h"
#include "common/log.h"
#include "vm/ssh.h"
#include "common/util.h"
#include "vm/virt.h"
#include "vm/vm_internal.h"

#define CONNECT_RETRY_MS 500
#define KVM_WATCHDOG_S 20		/* a KVM guest that prints no kernel line by then: KVM does not work here */

void vm_waiters_finish(struct vm *v, int r, const char *why)
{
	struct waiter *w = TAKE_PTR(v->waiters);
	size_t n = v->nwaiters;

	v->nwaiters = 0;
	if (v->connect_timer)
		evtimer_del(v->connect_timer);
	for (size_t i = 0; i < n; i++)
		w[i].done(w[i].userdata, r, why);
	free(w);
}

static void session_ready(void *userdata)
{
	struct vm *v = userdata;

	v->ready = true;
	/* A KVM guest that answers proves KVM on its host (not on another one's). */
	if (v->booted_type && strcmp(v->booted_type, "kvm") == 0 && v->boot_agent)
		vm_host_kvm_set_proven(v->b, v->boot_agent->host);
	log_info("agent '%s': control channel ready", v->name);
	vm_waiters_finish(v, 0, NULL);
}

static void schedule_connect(struct vm *v);

static void session_failed(void *userdata, int error, const char *why)
{
	struct vm *v = userdata;
	bool mismatch = why && strstr(why, "host key");

	if (v->ready && error == -ETIMEDOUT)	/* a session that was up and went silent: a frozen guest */
		log_warning("agent '%s': control channel lost: %s", v->name, why ? why : strerror(-error));
	else
		log_debug("agent '%s': control channel: %s", v->name, why ? why : strerror(-error));
	vm_drop_session(v);
	/* A wrong host key is never retried: that guest is not who it claims to be. */
	if (mismatch) {
		log_error("agent '%s': refusing the guest: %s", v->name, why);
		vm_waiters_finish(v, -EPERM, why);
		return;
	}
	if (v->nwaiters > 0)
		schedule_connect(v);
}

/* How long a guest has to answer after a start (vm_boot_timeout; TCG boots in ~10 s). */
static int boot_timeout_s(const struct vm *v)
{
	return (int)config_get_long(&v->b->f->cfg, CFG_VM_BOOT_TIMEOUT);
}

/* Connect the control socket and start an SSH session on it; -errno. */
static int session_start(struct vm *v, int timeout_s, char **why)
{
	struct vm_backend *b = v->b;
	_cleanup_free_ char *sock = vm_path(b, v->name, "ctl.sock");
	_cleanup_free_ char *key = vm_key_path(b, v->name, "client");
	_cleanup_free_ char *fp_path = vm_key_path(b, v->name, "host.fingerprint");
	_cleanup_free_ char *fp = NULL;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	/* The session is root's; agentd run-as drops each exec to the agent user (or not, for --root). */
	struct ssh_session_config cfg = { .user = "root", .key_path = key, .connect_timeout_s = timeout_s,
					  .keepalive_s = 15, .agentd = AGENTD_IN_GUEST, .exec_user = "agent" };
	struct ssh_session_callbacks cb = { session_ready, session_failed, v };
	int fd, r;

	if ((r = vm_read_line(fp_path, &fp)) < 0) {
		*why = xasprintf("cannot read the pinned host key fingerprint %s: %s", fp_path, strerror(-r));
		return r;
	}
	cfg.host_fingerprint = fp;
	/* A guest on another host: its channel streamed over that host's libvirt connection, the same SSH in it. */
	if (v->virt && v->virt != b->virt) {
		_cleanup_free_ char *dom = vm_domain_name(v->name);

		if ((r = virt_channel_open(v->virt, dom, CHANNEL_NAME, &fd, why)) < 0)
			return r;
		v->channel_gen = virt_generation(v->virt);
		vm_remote_console_ensure(v);	/* a restart or reconnect lost its console stream too */
		return ssh_session_new(b->f->base, fd, &cfg, &cb, &v->ssh, why);
	}
	if (strlen(sock) >= sizeof(sa.sun_path)) {
		*why = xasprintf("control socket path too long: %s", sock);
		return -ENAMETOOLONG;
	}
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
		r = -errno;
		close(fd);
		*why = xasprintf("cannot connect to the control channel %s: %s", sock, strerror(-r));
		return r;
	}
	return ssh_session_new(b->f->base, fd, &cfg, &cb, &v->ssh, why);
}

static bool kvm_watchdog(struct vm *v);

static void on_connect_timer(evutil_socket_t fd, short what, void *arg)
{
	struct vm *v = arg;
	_cleanup_free_ char *why = NULL;

	if (kvm_watchdog(v))
		return;

	if (v->ready) {
		vm_waiters_finish(v, 0, NULL);
		return;
	}
	if (v->ssh)
		return;		/* a handshake is under way; session_ready or _failed acts */
	if (now_usec() > v->boot_deadline) {
		_cleanup_free_ char *msg = xasprintf("the guest did not answer on its control channel within %d s "
						     "(see 'fleetctl console %s')", boot_timeout_s(v), v->name);
		vm_waiters_finish(v, -ETIMEDOUT, msg);
		return;
	}
	/* Short handshake timeout while booting: an early banner may be lost. */
	if (session_start(v, 4, &why) < 0) {
		log_debug("agent '%s': %s", v->name, why ? why : "control channel not there yet");
		schedule_connect(v);
	}
}

/* Run on_connect_timer() after ms milliseconds (0: on the next loop turn). */
static void connect_after(struct vm *v, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	if (!v->connect_timer)
		v->connect_timer = evtimer_new(v->b->f->base, on_connect_timer, v);
	evtimer_add(v->connect_timer, &tv);
}

static void schedule_connect(struct vm *v)
{
	connect_after(v, CONNECT_RETRY_MS);
}

/* Call done once the guest's control channel is up (now, if it is). */
void vm_wait_ready(struct vm *v, backend_done_fn done, void *userdata)
{
	v->waiters = xrealloc(v->waiters, (v->nwaiters + 1) * sizeof(*v->waiters));
	v->waiters[v->nwaiters++] = (struct waiter){ done, userdata };
	if (v->ready || !v->ssh) {
		/*
		 * Deferred (done() must not run inside the caller), but not
		 * delayed: without a session the first try goes out at once, as
		 * the guest is often up already (an exec after a snapshot or a
		 * fleetd restart, a restore); retries follow every
		 * CONNECT_RETRY_MS.
		 */
		v->boot_deadline = now_usec() + boot_timeout_s(v) * 1000000LL;
		connect_after(v, 0);
	}
}

/* --- KVM that exists but does not run guests ---------------------------------------- */

char *vm_virt_type_file(struct vm_backend *b)
{
	return xasprintf("%s/vms/virt-type", b->state_dir);
}

/* The host a KVM watchdog's log line speaks of: "host NAME" or "this host"; caller frees. */
static char *host_label(const struct agent *a)
{
	return vm_agent_remote(a) ? xasprintf("host %s", a->host) : xstrdup("this host");
}

/* Its domain defined again as TCG and booted: 0, or -errno with *why. */
static int reboot_as_tcg(struct vm *v, struct virt *virt, const char *dom, const char *uuid, char **why)
{
	struct vm_backend *b = v->b;
	const struct agent *a = v->boot_agent;
	_cleanup_images_ struct agent_images im = { 0 };
	_cleanup_free_ char *xml = NULL;
	int r;

	if (!vm_agent_remote(a)) {
		(void)vm_load_images(b, v->name, &im);
		xml = vm_domain_xml(b, a, &im, uuid);	/* b->domain_type is qemu by now */
		if ((r = virt_domain_define(virt, xml, why)) < 0 || (r = virt_domain_start(virt, dom, why)) < 0)
			return r;
		v->booted_type = "qemu";
		v->started_at = now_usec();
		return 0;
	}
	if (vm_load_images(b, v->name, &im) < 0 || !im.image) {
		*why = xstrdup("cannot read the agent's image record to redefine its domain under TCG");
		return -EIO;
	}
	/* The domain type comes from vm_host_domain_type: qemu there by now. */
	if ((r = vm_remote_domain_xml(b, virt, a, im.image, im.boot_image, uuid, &xml, why)) < 0 ||
	    (r = virt_domain_define(virt, xml, why)) < 0)
		return r;
	return vm_remote_boot(v, a, why);	/* sets booted_type and started_at */
}

/*
 * /dev/kvm can answer its ioctls and still not run a guest (seen with nested
 * virtualization: the kernel never leaves its decompressor). When the first
 * KVM guest on a host (fleetd's own or another) prints no kernel banner
 * within KVM_WATCHDOG_S, that host goes to TCG for good (vm_host_kvm_set_off:
 * vms/virt-type, or vms/virt-type@HOST), the domain is redefined as TCG and
 * booted again; guests started as KVM there before the switch follow at once.
 * Returns true when it took over the boot.
 */
static bool kvm_watchdog(struct vm *v)
{
	struct vm_backend *b = v->b;
	const struct agent *a = v->boot_agent;
	_cleanup_free_ char *dom = vm_domain_name(v->name), *why = NULL, *where = NULL;
	struct virt *virt;
	char uuid[40];

	if (!v->booted_type || strcmp(v->booted_type, "kvm") != 0 || !v->started_at || !a)
		return false;
	if (!vm_host_kvm_off(b, a->host)) {
		if (vm_host_kvm_proven(b, a->host) || now_usec() - v->started_at < KVM_WATCHDOG_S * 1000000LL)
			return false;
		if (vm_console_has_kernel_banner(b, v->name)) {
			vm_host_kvm_set_proven(b, a->host);
			return false;
		}
		where = host_label(a);
		log_warning("vm backend: agent '%s' printed no kernel line %d s after a KVM start on %s: KVM does not "
			    "run guests there; switching that host to TCG (domain type qemu)", v->name, KVM_WATCHDOG_S,
			    where);
		if (vm_host_kvm_set_off(b, a->host) < 0)
			log_warning("vm backend: cannot remember the switch of %s to TCG", where);
	} else {
		where = host_label(a);
		log_info("agent '%s': rebooting under TCG like the rest of %s", v->name, where);
	}
	vm_drop_session(v);
	if (!(virt = vm_agent_virt(b, a, &why))) {
		vm_waiters_finish(v, -EIO, why ? why : "its host's connection is gone");
		return true;
	}
	v->stopping = true;	/* our destroy, not a crash */
	(void)virt_domain_destroy(virt, dom, NULL);
	if (virt_domain_uuid(virt, dom, uuid) < 0) {
		vm_waiters_finish(v, -EIO, "cannot read the domain's UUID to redefine it");
		return true;
	}
	if (reboot_as_tcg(v, virt, dom, uuid, &why) < 0) {
		vm_waiters_finish(v, -EIO, why ? why : "cannot boot the guest under TCG");
		return true;
	}
	v->stopping = false;
	v->boot_deadline = now_usec() + boot_timeout_s(v) * 1000000LL;
	schedule_connect(v);
	return true;
}
