/*
 * backend_vm: agents as libvirt VMs. Each agent gets a persistent domain
 * "fleet-NAME" booted straight into the shared guest kernel, with a qcow2
 * overlay on the shared base image, a small seed disk carrying its SSH keys,
 * and a virtio-serial control channel whose host end is a Unix socket.
 * fleetd reaches the guest only through that channel: one SSH session per
 * running guest (ssh.c), one channel per exec. State comes from libvirt
 * (virt.c), never from guesses. This file never includes libvirt or libssh2.
 *
 * Files per agent:
 *   <state_dir>/vms/NAME/   0711 root: disk.qcow2, seed.img (0600), console.log[.N] (virtlogd's),
 *                           ctl.sock (libvirtd makes it for QEMU)
 * Guest images: the agent's disk is an overlay on the base.qcow2 of an image
 * in the content-addressed store (images.h), and it boots the kernel and
 * initramfs of a store image; never the files in image_dir, which a rebuild
 * replaces.
 *   <state_dir>/keys/NAME/  client (OpenSSH), host (dropbear), host.fingerprint; 0700 root
 */
#include "vm/backend.h"

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include "model/fleetd.h"
#include "vm/images.h"
#include "common/log.h"
#include "backend/spawn.h"
#include "vm/ssh.h"
#include "common/util.h"
#include "vm/virt.h"
#include "backend/worker.h"

#define DOMAIN_PREFIX "fleet-"
#define CHANNEL_NAME "org.fleet.ctl"
#define NETWORK_NAME "fleet-nat"
#define CONNECT_RETRY_MS 500
#define AGENTD_IN_GUEST "/usr/bin/agentd"
#define KVM_WATCHDOG_S 20		/* a KVM guest that prints no kernel line by then: KVM does not work here */
#define DISK_FULL_BYTES (4LL << 20)	/* less free than this where a disk lives: the host disk is full */

struct vm;

struct waiter {
	backend_done_fn done;
	void *userdata;
};

struct vm {
	char *name;			/* agent name */
	struct vm_backend *b;
	struct ssh_session *ssh;
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
	struct vm *next;
};

struct vm_backend {
	struct fleetd *f;
	const struct backend_host *host;	/* reports go up, image records come from fleet's store */
	struct virt *virt;
	char *state_dir;
	char *image_dir;
	const char *domain_type;	/* "kvm" or "qemu" */
	bool kvm_proven;		/* a KVM guest printed its kernel banner */
	struct event *console_timer;	/* the console logs' cap */
	struct vm *vms;
};

static struct vm_backend *backend(struct fleetd *f)
{
	return f->backend_state[BACKEND_VM];
}

static char *domain_name(const char *agent)
{
	return xasprintf(DOMAIN_PREFIX "%s", agent);
}

static char *vm_path(struct vm_backend *b, const char *agent, const char *file)
{
	return file ? xasprintf("%s/vms/%s/%s", b->state_dir, agent, file) : xasprintf("%s/vms/%s", b->state_dir, agent);
}

static char *key_path(struct vm_backend *b, const char *agent, const char *file)
{
	return file ? xasprintf("%s/keys/%s/%s", b->state_dir, agent, file) : xasprintf("%s/keys/%s", b->state_dir, agent);
}

static char *image_path(struct vm_backend *b, const char *file)
{
	return xasprintf("%s/%s", b->image_dir, file);
}

static struct vm *vm_find(struct vm_backend *b, const char *name)
{
	for (struct vm *v = b->vms; v; v = v->next)
		if (strcmp(v->name, name) == 0)
			return v;
	return NULL;
}

static struct vm *vm_get(struct vm_backend *b, const char *name)
{
	struct vm *v = vm_find(b, name);

	if (v)
		return v;
	v = xcalloc(1, sizeof(*v));
	v->name = xstrdup(name);
	v->b = b;
	v->next = b->vms;
	b->vms = v;
	return v;
}

static void vm_drop_session(struct vm *v)
{
	struct ssh_session *s = TAKE_PTR(v->ssh);

	v->ready = false;
	ssh_session_free(s);
}

static void waiters_finish(struct vm *v, int r, const char *why)
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

static void vm_free(struct vm *v)
{
	struct vm **pp;

	for (pp = &v->b->vms; *pp && *pp != v; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = v->next;
	vm_drop_session(v);
	waiters_finish(v, -ECANCELED, "the environment went away (removed, or fleetd is stopping)");
	if (v->stop_waiter.done)
		v->stop_waiter.done(v->stop_waiter.userdata, -ECANCELED, "the environment went away (removed, or fleetd is stopping)");
	if (v->connect_timer)
		event_free(v->connect_timer);
	if (v->stop_timer)
		event_free(v->stop_timer);
	agent_free(v->boot_agent);
	free(v->name);
	free(v);
}

/* --- the control channel ----------------------------------------------------- */

/* The first line of a small file of ours; no symlink, FIFO or device is followed. */
static int read_file(const char *path, char **ret)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	struct stat st;
	char buf[512];
	ssize_t n;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -EIO;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	*ret = xstrdup(buf);
	return 0;
}

static void session_ready(void *userdata)
{
	struct vm *v = userdata;

	v->ready = true;
	if (strcmp(v->b->domain_type, "kvm") == 0)
		v->b->kvm_proven = true;
	log_info("agent '%s': control channel ready", v->name);
	waiters_finish(v, 0, NULL);
}

static void schedule_connect(struct vm *v);

static void session_failed(void *userdata, int error, const char *why)
{
	struct vm *v = userdata;
	bool mismatch = why && strstr(why, "host key");

	log_debug("agent '%s': control channel: %s", v->name, why ? why : strerror(-error));
	vm_drop_session(v);
	/* A wrong host key is never retried: that guest is not who it claims to be. */
	if (mismatch) {
		log_error("agent '%s': refusing the guest: %s", v->name, why);
		waiters_finish(v, -EPERM, why);
		return;
	}
	if (v->nwaiters > 0)
		schedule_connect(v);
}

/* Connect the control socket and start an SSH session on it; -errno. */
/* How long a guest has to answer after a start (vm_boot_timeout; TCG boots in ~10 s). */
static int boot_timeout_s(const struct vm *v)
{
	return (int)config_get_long(&v->b->f->cfg, CFG_VM_BOOT_TIMEOUT);
}

static int session_start(struct vm *v, int timeout_s, char **why)
{
	struct vm_backend *b = v->b;
	_cleanup_free_ char *sock = vm_path(b, v->name, "ctl.sock");
	_cleanup_free_ char *key = key_path(b, v->name, "client");
	_cleanup_free_ char *fp_path = key_path(b, v->name, "host.fingerprint");
	_cleanup_free_ char *fp = NULL;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	/* The session is root's; agentd run-as drops each exec to the agent user (or not, for --root). */
	struct ssh_session_config cfg = { .user = "root", .key_path = key, .connect_timeout_s = timeout_s,
					  .keepalive_s = 15, .agentd = AGENTD_IN_GUEST, .exec_user = "agent" };
	struct ssh_session_callbacks cb = { session_ready, session_failed, v };
	int fd, r;

	if ((r = read_file(fp_path, &fp)) < 0) {
		*why = xasprintf("cannot read the pinned host key fingerprint %s: %s", fp_path, strerror(-r));
		return r;
	}
	cfg.host_fingerprint = fp;
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
		waiters_finish(v, 0, NULL);
		return;
	}
	if (v->ssh)
		return;		/* a handshake is under way; session_ready or _failed acts */
	if (now_usec() > v->boot_deadline) {
		_cleanup_free_ char *msg = xasprintf("the guest did not answer on its control channel within %d s "
						     "(see 'fleetctl console %s')", boot_timeout_s(v), v->name);
		waiters_finish(v, -ETIMEDOUT, msg);
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
static void wait_ready(struct vm *v, backend_done_fn done, void *userdata)
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

/* --- provisioning ------------------------------------------------------------- */

static int run_tool(const char *const argv[], const char *what, char **why)
{
	_cleanup_free_ char *out = NULL;
	int r = spawn_run(argv, &out);

	if (r == 0)
		return 0;
	out[strcspn(out, "\n")] = '\0';
	*why = xasprintf("%s failed: %s", what, r == 127 ? "tool not installed" : *out ? out : "no message");
	return r < 0 ? r : -EIO;
}

static int write_text(const char *path, const char *text, mode_t mode)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);

	if (fd < 0)
		return -errno;
	return write_all(fd, text, strlen(text));
}

/* The seed disk: the guest copies these into place at every boot (see images/README.md). */
static int make_seed(struct vm_backend *b, const struct agent *a, const char *client_pub, char **why)
{
	_cleanup_free_ char *stage = key_path(b, a->name, "seed");
	_cleanup_free_ char *host = key_path(b, a->name, "host");
	_cleanup_free_ char *seed = vm_path(b, a->name, "seed.img");
	_cleanup_free_ char *tmp = xasprintf("%s.tmp", seed);
	_cleanup_free_ char *f_host = xasprintf("%s/dropbear_ed25519_host_key", stage);
	_cleanup_free_ char *f_root = xasprintf("%s/authorized_keys_root", stage);
	_cleanup_free_ char *f_agent = xasprintf("%s/authorized_keys_agent", stage);
	_cleanup_free_ char *f_name = xasprintf("%s/hostname", stage);
	_cleanup_free_ char *line = xasprintf("%s\n", client_pub);
	_cleanup_free_ char *hostname = xasprintf("%s\n", a->name);
	const char *cp[] = { "cp", "--", host, f_host, NULL };
	const char *mk[] = { "mke2fs", "-q", "-F", "-t", "ext2", "-L", "fleet-seed", "-m", "0", "-E", "root_owner=0:0",
			     "-d", stage, tmp, "2M", NULL };
	const char *rm[] = { "rm", "-rf", "--", stage, NULL };
	int r;

	if (mkdir(stage, 0700) < 0 && errno != EEXIST)
		return -errno;
	if ((r = run_tool(cp, "copying the host key", why)) < 0 ||
	    (r = write_text(f_root, line, 0600)) < 0 || (r = write_text(f_agent, line, 0600)) < 0 ||
	    (r = write_text(f_name, hostname, 0644)) < 0 || (r = run_tool(mk, "mke2fs for the seed disk", why)) < 0) {
		if (r < 0 && !*why)
			*why = xasprintf("cannot write the seed disk: %s", strerror(-r));
		(void)spawn_run(rm, NULL);
		unlink(tmp);
		return r;
	}
	(void)spawn_run(rm, NULL);
	if (rename(tmp, seed) < 0)
		return -errno;
	return 0;
}

/*
 * The domain definition; uuid (or NULL for a new domain) keeps a redefinition
 * the same domain. The kernel and initramfs are those of the agent's boot
 * image; the disk's backing chain is pinned to its image's base.qcow2, so
 * libvirt never probes it from the qcow2 header (an agent from before the
 * image store, not yet moved to it, keeps image_dir's files).
 */
static char *domain_xml(struct vm_backend *b, const struct agent *a, const struct agent_images *im, const char *uuid)
{
	_cleanup_free_ char *dom = domain_name(a->name);
	_cleanup_free_ char *kernel = NULL, *initrd = NULL, *backing = NULL, *base = NULL;
	_cleanup_free_ char *disk = vm_path(b, a->name, "disk.qcow2"), *seed = vm_path(b, a->name, "seed.img");
	_cleanup_free_ char *console = vm_path(b, a->name, "console.log");
	_cleanup_free_ char *sock = vm_path(b, a->name, "ctl.sock");
	_cleanup_free_ char *nic = NULL, *uuid_el = uuid ? xasprintf("  <uuid>%s</uuid>\n", uuid) : NULL;

	if (im->boot_image) {
		kernel = image_store_path(b->state_dir, im->boot_image, "vmlinuz");
		initrd = image_store_path(b->state_dir, im->boot_image, "initramfs.img");
	} else {
		kernel = image_path(b, "vmlinuz");
		initrd = image_path(b, "initramfs.img");
	}
	if (im->image) {
		base = image_store_path(b->state_dir, im->image, "base.qcow2");
		backing = xasprintf("      <backingStore type='file'>\n"
				    "        <format type='qcow2'/>\n"
				    "        <source file='%s'/>\n"
				    "        <backingStore/>\n"
				    "      </backingStore>\n", base);
	}
	if (a->network == NETWORK_NAT)
		nic = xasprintf("    <interface type='network'>\n"
				"      <source network='" NETWORK_NAME "'/>\n"
				"      <model type='virtio'/>\n"
				"      <port isolated='yes'/>\n"
				"    </interface>\n");
	/* Agent names are [a-z][a-z0-9-]*, paths are ours: nothing here needs XML escaping. */
	return xasprintf(
		"<domain type='%s'>\n"
		"  <name>%s</name>\n"
		"%s"
		"  <title>fleet agent %s</title>\n"
		"  <metadata>\n"
		"    <fleet:agent xmlns:fleet='https://fleet.invalid/xmlns/agent/1'>\n"
		"      <fleet:name>%s</fleet:name>\n"
		"      <fleet:owner>fleetd</fleet:owner>\n"
		"    </fleet:agent>\n"
		"  </metadata>\n"
		"  <memory unit='MiB'>%d</memory>\n"
		"  <vcpu>%d</vcpu>\n"
		"  <os>\n"
		"    <type arch='x86_64' machine='pc'>hvm</type>\n"
		"    <kernel>%s</kernel>\n"
		"    <initrd>%s</initrd>\n"
		"    <cmdline>console=ttyS0 root=/dev/vda rw</cmdline>\n"
		"  </os>\n"
		"  <features><acpi/></features>\n"
		"  <on_poweroff>destroy</on_poweroff>\n"
		"  <on_reboot>restart</on_reboot>\n"
		"  <on_crash>destroy</on_crash>\n"
		"  <devices>\n"
		"    <disk type='file' device='disk'>\n"
		"      <driver name='qemu' type='qcow2'/>\n"
		"      <source file='%s'/>\n"
		"%s"
		"      <target dev='vda' bus='virtio'/>\n"
		"    </disk>\n"
		"    <disk type='file' device='disk'>\n"
		"      <driver name='qemu' type='raw'/>\n"
		"      <source file='%s'/>\n"
		"      <target dev='vdb' bus='virtio'/>\n"
		"      <readonly/>\n"
		"    </disk>\n"
		"    <serial type='file'>\n"
		"      <source path='%s' append='on'/>\n"
		"      <target port='0'/>\n"
		"    </serial>\n"
		"    <console type='file'>\n"
		"      <source path='%s' append='on'/>\n"
		"      <target type='serial' port='0'/>\n"
		"    </console>\n"
		"    <channel type='unix'>\n"
		"      <source mode='bind' path='%s'/>\n"
		"      <target type='virtio' name='" CHANNEL_NAME "'/>\n"
		"    </channel>\n"
		"%s"
		"    <memballoon model='none'/>\n"
		"  </devices>\n"
		"</domain>\n",
		b->domain_type, dom, uuid_el ? uuid_el : "", a->name, a->name, a->memory_mib, a->vcpus, kernel, initrd, disk,
		backing ? backing : "", seed,
		console, console, sock, nic ? nic : "");
}

static char *network_xml(void)
{
	/* Guests reach the outside through NAT but never each other (isolated ports). */
	return xasprintf("<network>\n"
			 "  <name>" NETWORK_NAME "</name>\n"
			 "  <forward mode='nat'/>\n"
			 "  <bridge name='fleetbr0' stp='off'/>\n"
			 "  <port isolated='yes'/>\n"
			 "  <ip address='192.168.223.1' netmask='255.255.255.0'>\n"
			 "    <dhcp><range start='192.168.223.10' end='192.168.223.250'/></dhcp>\n"
			 "  </ip>\n"
			 "</network>\n");
}

static void remove_tree(const char *path)
{
	const char *rm[] = { "rm", "-rf", "--", path, NULL };
	(void)spawn_run(rm, NULL);
}

/* --- guest images ---------------------------------------------------------------- */

static void agent_images_clearp(struct agent_images *im)
{
	agent_images_clear(im);
}
#define _cleanup_images_ _cleanup_(agent_images_clearp)

static uint64_t be64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

/*
 * The backing file a qcow2 file's header names; -ENOENT if none, -EINVAL if
 * it is no qcow2. The header is written by qemu-img and QEMU, not by the guest.
 */
static int qcow2_backing_file(const char *path, char **ret)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	unsigned char h[20];
	uint64_t off;
	uint32_t len;
	char *name;
	ssize_t n;

	if (fd < 0)
		return -errno;
	if ((n = pread(fd, h, sizeof(h), 0)) < 0)
		return -errno;
	if (n != (ssize_t)sizeof(h) || memcmp(h, "QFI\xfb", 4) != 0)
		return -EINVAL;
	off = be64(h + 8);
	len = (uint32_t)h[16] << 24 | (uint32_t)h[17] << 16 | (uint32_t)h[18] << 8 | h[19];
	if (off == 0 || len == 0)
		return -ENOENT;
	if (len > 1023 || off > (1u << 20))
		return -EINVAL;		/* qcow2 allows at most 1023 bytes, within the first cluster */
	name = xmalloc(len + 1);
	if ((n = pread(fd, name, len, (off_t)off)) != (ssize_t)len) {
		free(name);
		return n < 0 ? -errno : -EINVAL;
	}
	name[len] = '\0';
	*ret = name;
	return 0;
}

static int load_images(struct vm_backend *b, const char *agent, struct agent_images *im)
{
	int r = b->host->get_images(b->f, agent, im);

	if (r < 0)
		log_warning("agent '%s': cannot read its guest images from the database: %s", agent, strerror(-r));
	return r;
}

/*
 * An agent created before the image store has an overlay on
 * <image_dir>/base.qcow2 and no image recorded. Record the image now in
 * image_dir as both its images (importing it), unless that base was
 * replaced after the disk was made: then its disk already reads another
 * base than it was made on, and no record would be true (-ESTALE). -ENOENT:
 * not such an agent. Its overlay and domain move to the store copy at its
 * next start (prepare_boot()): a running QEMU holds the file open.
 */
static int adopt_legacy(struct vm_backend *b, const struct agent *a, struct agent_images *im, char **why)
{
	_cleanup_free_ char *disk = vm_path(b, a->name, "disk.qcow2"), *legacy = image_path(b, "base.qcow2");
	_cleanup_free_ char *backing = NULL;
	char id[IMAGE_ID_LEN + 1];
	struct statx dx, bx;
	int r;

	if (qcow2_backing_file(disk, &backing) < 0 || strcmp(backing, legacy) != 0)
		return -ENOENT;
	if (statx(AT_FDCWD, disk, AT_SYMLINK_NOFOLLOW, STATX_BTIME, &dx) == 0 && (dx.stx_mask & STATX_BTIME) &&
	    statx(AT_FDCWD, legacy, 0, STATX_MTIME, &bx) == 0 && bx.stx_mtime.tv_sec > dx.stx_btime.tv_sec) {
		*why = xasprintf("its disk was made before %s was last replaced (rebuilt?): it no longer reads the "
				 "base it was made on, and fleet cannot tell which image that was", legacy);
		return -ESTALE;
	}
	if ((r = image_import(b->state_dir, b->image_dir, id, why)) < 0)
		return r;
	agent_images_clear(im);
	im->image = xstrdup(id);
	im->boot_image = xstrdup(id);
	if ((r = b->host->set_images(b->f, a->name, im)) < 0) {
		*why = xasprintf("cannot record its image: %s", strerror(-r));
		return r;
	}
	log_notice("agent '%s': created before the image store; its image is now sha256:%.12s (copied from %s)",
		   a->name, id, b->image_dir);
	return 0;
}

/* At fleetd's start: adopt every agent from before the image store (see adopt_legacy()). */
static void adopt_legacy_agents(struct vm_backend *b)
{
	struct agent **list = NULL;

	if (b->host->list_agents(b->f, BACKEND_VM, &list) < 0)
		return;
	for (size_t i = 0; list[i]; i++) {
		_cleanup_images_ struct agent_images im = { 0 };
		_cleanup_free_ char *why = NULL;
		int r;

		if (list[i]->state == AGENT_DEFINED || list[i]->state == AGENT_PROVISIONING ||
		    b->host->get_images(b->f, list[i]->name, &im) < 0 || im.image)
			continue;
		if ((r = adopt_legacy(b, list[i], &im, &why)) < 0 && r != -ENOENT)
			log_error("agent '%s': cannot move it to the image store: %s", list[i]->name,
				  why ? why : strerror(-r));
	}
	agent_list_free(list);
}

/*
 * Before a boot: the overlay names its image's store base (an adopted
 * agent's overlay is moved there: the same bytes, so only its header
 * changes), and the domain definition names its images and this host's
 * domain type (else it is redefined: an adopted agent, a revert to a
 * snapshot taken before an upgrade, a switch from KVM to TCG).
 */
static int prepare_boot(struct vm_backend *b, const struct agent *a, char **why)
{
	_cleanup_free_ char *dom = domain_name(a->name), *cur = NULL, *xml = NULL, *kernel = NULL, *base = NULL;
	_cleanup_free_ char *disk = vm_path(b, a->name, "disk.qcow2"), *backing = NULL, *legacy = NULL;
	_cleanup_images_ struct agent_images im = { 0 };
	char uuid[40];
	int r;

	if (load_images(b, a->name, &im) < 0)
		return 0;	/* boot as defined */
	if (!im.image && (r = adopt_legacy(b, a, &im, why)) < 0) {
		if (r != -ENOENT)
			log_warning("agent '%s': %s", a->name, *why ? *why : strerror(-r));
		free(*why);
		*why = NULL;
	}
	if (im.image) {
		base = image_store_path(b->state_dir, im.image, "base.qcow2");
		legacy = image_path(b, "base.qcow2");
		if ((r = qcow2_backing_file(disk, &backing)) < 0) {
			*why = xasprintf("cannot read the backing file of %s: %s", disk, strerror(-r));
			return r;
		}
		if (strcmp(backing, base) != 0) {
			const char *rebase[] = { "qemu-img", "rebase", "-q", "-u", "-f", "qcow2", "-F", "qcow2",
						 "-b", base, disk, NULL };

			if (strcmp(backing, legacy) != 0) {
				*why = xasprintf("its disk %s is backed by %s, not by its image's %s; fleet will not "
						 "guess which is right", disk, backing, base);
				return -EIO;
			}
			if ((r = run_tool(rebase, "qemu-img rebase -u", why)) < 0)
				return r;
			log_notice("agent '%s': its disk is now backed by the image store's copy %s", a->name, base);
		}
	}
	if (virt_domain_xml(b->virt, dom, &cur) < 0 || virt_domain_uuid(b->virt, dom, uuid) < 0)
		return 0;	/* the start reports what is wrong */
	{
		_cleanup_free_ char *k = im.boot_image ? image_store_path(b->state_dir, im.boot_image, "vmlinuz")
						       : image_path(b, "vmlinuz");
		kernel = xasprintf("<kernel>%s</kernel>", k);
		if (base) {
			char *src = xasprintf("<source file='%s'/>", base);
			free(base);
			base = src;
		}
	}
	if (strstr(cur, kernel) && (!base || strstr(cur, base)) &&
	    !(strcmp(b->domain_type, "qemu") == 0 && strstr(cur, "<domain type='kvm'")))
		return 0;
	xml = domain_xml(b, a, &im, uuid);
	log_info("agent '%s': redefining domain %s (its images, domain type %s)", a->name, dom, b->domain_type);
	return virt_domain_define(b->virt, xml, why);
}

int vm_upgrade(struct fleetd *f, const struct agent *a, char **ret_from, char **ret_to, char **why)
{
	struct vm_backend *b = backend(f);
	_cleanup_free_ char *dom = NULL, *xml = NULL, *old = NULL;
	_cleanup_images_ struct agent_images im = { 0 };
	struct agent_images next = { 0 };
	char id[IMAGE_ID_LEN + 1], uuid[40];
	struct vm *v;
	int r;

	if (!b) {
		*why = xstrdup("the vm backend is not available");
		return -ENODEV;
	}
	if ((v = vm_find(b, a->name)) && v->busy) {
		*why = xstrdup("a snapshot or restore is under way; try again when it is done");
		return -EBUSY;
	}
	if ((r = b->host->get_images(f, a->name, &im)) < 0) {
		*why = xasprintf("cannot read its images: %s", strerror(-r));
		return r;
	}
	if (!im.image && (r = adopt_legacy(b, a, &im, why)) < 0) {
		if (r == -ENOENT)
			*why = xstrdup("the base image of its disk is unknown (its overlay is not on the image store)");
		return r == -ENOENT ? -EINVAL : r;
	}
	if ((r = image_import(b->state_dir, b->image_dir, id, why)) < 0)
		return r;
	*ret_from = xstrdup(im.boot_image ? im.boot_image : im.image);
	*ret_to = xstrdup(id);
	if (im.boot_image && strcmp(im.boot_image, id) == 0)
		return 0;	/* boots it already */
	/* Its snapshots' saved definitions may name the boot image it leaves: keep that in use. */
	old = im.old_images ? xstrdup(im.old_images) : xstrdup("");
	if (im.boot_image && strcmp(im.boot_image, im.image) != 0 && !strstr(old, im.boot_image)) {
		char *t = xasprintf("%s%s%s", old, *old ? " " : "", im.boot_image);
		free(old);
		old = t;
	}
	next = (struct agent_images){ .image = im.image, .boot_image = id, .old_images = *old ? old : NULL };
	dom = domain_name(a->name);
	if ((r = virt_domain_uuid(b->virt, dom, uuid)) < 0) {
		*why = xasprintf("cannot read the UUID of domain %s", dom);
		return r;
	}
	/* For a running domain this is its next boot's definition. */
	xml = domain_xml(b, a, &next, uuid);
	if ((r = virt_domain_define(b->virt, xml, why)) < 0)
		return r;
	if ((r = b->host->set_images(f, a->name, &next)) < 0) {
		*why = xasprintf("cannot record its new boot image: %s", strerror(-r));
		return r;
	}
	log_notice("agent '%s': boots image sha256:%.12s from its next start on (was sha256:%.12s)", a->name, id,
		   *ret_from);
	return 0;
}

static int vm_provision(struct fleetd *f, const struct agent *a, char **why)
{
	struct vm_backend *b = backend(f);
	_cleanup_free_ char *dom = domain_name(a->name);
	_cleanup_free_ char *dir = vm_path(b, a->name, NULL), *keys = key_path(b, a->name, NULL);
	_cleanup_free_ char *client = key_path(b, a->name, "client"), *host = key_path(b, a->name, "host");
	_cleanup_free_ char *fp_file = key_path(b, a->name, "host.fingerprint");
	_cleanup_free_ char *disk = vm_path(b, a->name, "disk.qcow2"), *base = NULL;
	_cleanup_free_ char *seed = vm_path(b, a->name, "seed.img");
	_cleanup_free_ char *size = xasprintf("%dG", a->disk_gib);
	_cleanup_free_ char *client_pub = NULL, *host_fp = NULL, *fp_line = NULL, *xml = NULL;
	char id[IMAGE_ID_LEN + 1];
	struct agent_images im = { .image = id, .boot_image = id };
	enum virt_state st;
	int r;

	/* Its own copy of the image as built: a later rebuild in image_dir leaves this agent alone. */
	if ((r = image_import(b->state_dir, b->image_dir, id, why)) < 0)
		return r;
	base = image_store_path(b->state_dir, id, "base.qcow2");
	const char *img[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", base, disk, size, NULL };
	if ((r = virt_connect(b->virt, why)) < 0) {
		char *inner = *why;
		*why = xasprintf("cannot reach libvirt (is libvirtd running?): %s", inner ? inner : "");
		free(inner);
		return -EHOSTDOWN;
	}
	if (virt_domain_state(b->virt, dom, &st) == 0) {
		*why = xasprintf("a libvirt domain named %s already exists; fleet will not take it over", dom);
		return -EEXIST;
	}
	if (access(dir, F_OK) == 0 || access(keys, F_OK) == 0) {
		*why = xasprintf("%s or %s already exists (left by an earlier fleetd?); remove it first", dir, keys);
		return -EEXIST;
	}
	/*
	 * chmod too: under fleetd's umask 0077 mkdir alone would leave QEMU
	 * outside. dir stays root's: QEMU only opens files libvirt names, and
	 * libvirtd (root) creates the control socket and virtlogd (root) the
	 * console log there, so no symlink or FIFO of QEMU's can wait where
	 * fleetd reads.
	 */
	if ((r = mkdir_p(dir, 0711)) < 0 || (r = mkdir_p(keys, 0700)) < 0 ||
	    (chmod(dir, 0711) < 0 && (r = -errno)) || (chmod(keys, 0700) < 0 && (r = -errno))) {
		*why = xasprintf("cannot create %s: %s", dir, strerror(-r));
		goto fail;
	}
	if ((r = ssh_keygen(client, SSH_KEY_OPENSSH, "fleetd", &client_pub, NULL)) < 0 ||
	    (r = ssh_keygen(host, SSH_KEY_DROPBEAR, a->name, NULL, &host_fp)) < 0) {
		*why = xasprintf("cannot generate SSH keys: %s", strerror(-r));
		goto fail;
	}
	fp_line = xasprintf("%s\n", host_fp);
	if ((r = write_text(fp_file, fp_line, 0600)) < 0) {
		*why = xasprintf("cannot write %s: %s", fp_file, strerror(-r));
		goto fail;
	}
	if ((r = run_tool(img, "qemu-img create", why)) < 0 || (r = make_seed(b, a, client_pub, why)) < 0)
		goto fail;
	/* Not left to the tools' modes: the disk holds the agent's files, the seed its host key. */
	if ((chmod(disk, 0600) < 0 || chmod(seed, 0600) < 0) && (r = -errno)) {
		*why = xasprintf("cannot chmod the disks in %s: %s", dir, strerror(-r));
		goto fail;
	}
	if (a->network == NETWORK_NAT) {
		_cleanup_free_ char *net = network_xml();
		if ((r = virt_network_ensure(b->virt, NETWORK_NAME, net, why)) < 0)
			goto fail;
	}
	if ((r = b->host->set_images(f, a->name, &im)) < 0) {
		*why = xasprintf("cannot record its image: %s", strerror(-r));
		goto fail;
	}
	xml = domain_xml(b, a, &im, NULL);
	if ((r = virt_domain_define(b->virt, xml, why)) < 0)
		goto fail;
	log_info("agent '%s': provisioned domain %s (%s, %d MiB, %d vcpus, %d GiB disk, network %s, image sha256:%.12s)",
		 a->name, dom, b->domain_type, a->memory_mib, a->vcpus, a->disk_gib, network_kind_to_string(a->network),
		 id);
	return 0;
fail:
	/* Nothing half-created: no orphan overlay, keys or domain. */
	remove_tree(dir);
	remove_tree(keys);
	return r < 0 ? r : -EIO;
}

static int vm_destroy(struct fleetd *f, const struct agent *a, bool force, char **why)
{
	struct vm_backend *b = backend(f);
	_cleanup_free_ char *dom = domain_name(a->name);
	_cleanup_free_ char *dir = vm_path(b, a->name, NULL), *keys = key_path(b, a->name, NULL);
	struct vm *v = vm_find(b, a->name);
	enum virt_state st;
	int r;

	if (v && v->busy) {
		*why = xstrdup("a snapshot or restore is under way; try again when it is done");
		return -EBUSY;
	}
	r = virt_domain_state(b->virt, dom, &st);
	if (r == 0 && st != VIRT_OFF) {
		if (!force) {
			*why = xasprintf("domain %s is %s; stop it first or use --force", dom, virt_state_to_string(st));
			return -EBUSY;
		}
		if (v)
			v->stopping = true;
		if ((r = virt_domain_destroy(b->virt, dom, why)) < 0 && r != -EINVAL)
			return r;
	}
	if (r == 0 || r == -EINVAL) {
		if ((r = virt_domain_undefine(b->virt, dom, why)) < 0 && r != -ENOENT)
			return r;
	} else if (r != -ENOENT) {
		*why = xasprintf("cannot reach libvirt to remove domain %s", dom);
		return r;
	}
	if (v)
		vm_free(v);
	remove_tree(dir);
	remove_tree(keys);
	log_info("agent '%s': removed domain %s, its disk and its keys", a->name, dom);
	return 0;
}

/* --- the console log ------------------------------------------------------------- */

/*
 * virtlogd (root) writes the serial console to vms/NAME/console.log and
 * rotates it to console.log.0, .1, ... (max_size, max_backups in
 * virtlogd.conf). fleetd reads and trims those files as root, so each is
 * opened below a root-owned dir with O_NOFOLLOW|O_NONBLOCK and used only if
 * it is a regular file: a symlink never leaks another file, a FIFO never
 * stalls the loop.
 */
#define CONSOLE_LOG "console.log"
#define CONSOLE_CHECK_S 5		/* how often the cap is enforced */

static void closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}

/* The agent's dir, opened without following a symlink; -errno. */
static int vm_dir_open(struct vm_backend *b, const char *agent)
{
	_cleanup_free_ char *dir = vm_path(b, agent, NULL);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

/* A regular file in dfd, opened with flags; -EINVAL for anything else (symlink, FIFO, device), else -errno. */
static int open_regular_at(int dfd, const char *name, int flags, struct stat *ret_st)
{
	_cleanup_close_ int fd = openat(dfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	struct stat st;

	if (fd < 0)
		return errno == ELOOP ? -EINVAL : -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (ret_st)
		*ret_st = st;
	return TAKE_FD(fd);
}

/* Append up to want bytes from the end of fd (size bytes long) to buf at *len; -errno. */
static int read_tail(int fd, off_t size, size_t want, char *buf, size_t *len)
{
	off_t from = size > (off_t)want ? size - (off_t)want : 0;
	size_t n = (size_t)(size - from), got = 0;

	while (got < n) {
		ssize_t k = pread(fd, buf + *len + got, n - got, from + (off_t)got);
		if (k < 0)
			return -errno;
		if (k == 0)
			break;	/* trimmed meanwhile */
		got += (size_t)k;
	}
	*len += got;
	return 0;
}

/*
 * The newest max bytes of the console: the end of console.log, preceded by
 * the end of console.log.0 when the current file is shorter (just rotated).
 * Missing files read as empty; -errno (-EINVAL: not a regular file).
 */
static int console_read(struct vm_backend *b, const char *agent, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_close_ int dfd = vm_dir_open(b, agent), cur = -1, prev = -1;
	struct stat cst = { 0 }, pst = { 0 };
	size_t len = 0, want_prev = 0, want_cur;
	_cleanup_free_ char *buf = NULL;
	int r;

	if (dfd == -ENOENT)
		return (*ret = xstrdup(""), *ret_len = 0, 0);
	if (dfd < 0)
		return dfd;
	cur = open_regular_at(dfd, CONSOLE_LOG, O_RDONLY, &cst);
	if (cur < 0 && cur != -ENOENT)
		return cur;
	want_cur = cur >= 0 ? ((size_t)cst.st_size < max ? (size_t)cst.st_size : max) : 0;
	if (want_cur < max) {
		prev = open_regular_at(dfd, CONSOLE_LOG ".0", O_RDONLY, &pst);
		if (prev >= 0)
			want_prev = (size_t)pst.st_size < max - want_cur ? (size_t)pst.st_size : max - want_cur;
	}
	buf = xmalloc(want_prev + want_cur + 1);
	if ((prev >= 0 && (r = read_tail(prev, pst.st_size, want_prev, buf, &len)) < 0) ||
	    (cur >= 0 && (r = read_tail(cur, cst.st_size, want_cur, buf, &len)) < 0))
		return r;
	buf[len] = '\0';
	*ret = TAKE_PTR(buf);
	*ret_len = len;
	return 0;
}

/* N for "console.log.N", else -1. */
static int console_backup_number(const char *name)
{
	const char *p = name + strlen(CONSOLE_LOG ".");
	char *end;
	long n;

	if (strncmp(name, CONSOLE_LOG ".", strlen(CONSOLE_LOG ".")) != 0 || *p < '0' || *p > '9')
		return -1;
	n = strtol(p, &end, 10);
	return *end || n > 999 ? -1 : (int)n;
}

/*
 * Keep an agent's console files within vm_console_max_bytes together,
 * whatever virtlogd.conf says (max_size = 0 never rotates): drop the oldest
 * backups first; if console.log alone is too big, keep its last quarter of
 * the cap as console.log.0 and truncate it. Its writer appends (O_APPEND),
 * so it carries on at the new end; bytes written between the copy and the
 * truncate are lost.
 * Returns 1 when it trimmed, 0 when nothing was needed, else -errno.
 */
static int console_enforce_cap(struct vm_backend *b, const char *agent)
{
	const long long cap = config_get_long(&b->f->cfg, CFG_VM_CONSOLE_MAX), keep = cap / 4;
	_cleanup_close_ int dfd = vm_dir_open(b, agent), cur = -1, tmp = -1;
	_cleanup_(closedirp) DIR *d = NULL;
	long long sizes[1000] = { 0 }, total = 0, cur_size = 0;
	struct dirent *de;
	struct stat st;
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	int top = -1, r;

	if (dfd < 0)
		return dfd;
	if (fstat(dfd, &st) < 0)
		return -errno;
	if (st.st_uid != geteuid())
		return -EPERM;	/* not our dir (an old layout QEMU could write): never act in it */
	{
		int dup = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
		if (dup < 0 || !(d = fdopendir(dup))) {
			if (dup >= 0)
				close(dup);
			return -errno;
		}
	}
	while ((de = readdir(d))) {
		int n = console_backup_number(de->d_name);
		bool is_cur = strcmp(de->d_name, CONSOLE_LOG) == 0;

		if ((n < 0 && !is_cur) || fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		total += (long long)st.st_size;
		if (is_cur)
			cur_size = (long long)st.st_size;
		else {
			sizes[n] = (long long)st.st_size;
			top = n > top ? n : top;
		}
	}
	if (total <= cap)
		return 0;
	for (int n = top; n >= 0 && total > cap; n--) {
		char name[32];

		if (!sizes[n])
			continue;
		snprintf(name, sizeof(name), CONSOLE_LOG ".%d", n);
		if (unlinkat(dfd, name, 0) == 0)
			total -= sizes[n];
	}
	if (total <= cap || cur_size <= keep)
		return 1;
	/* console.log alone is too big: keep its end as console.log.0, then empty it. */
	if ((cur = open_regular_at(dfd, CONSOLE_LOG, O_RDWR, &st)) < 0)
		return cur;
	buf = xmalloc((size_t)keep);
	if ((r = read_tail(cur, st.st_size, (size_t)keep, buf, &len)) < 0)
		return r;
	(void)unlinkat(dfd, CONSOLE_LOG ".0.tmp", 0);
	tmp = openat(dfd, CONSOLE_LOG ".0.tmp", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (tmp < 0 || write_all(tmp, buf, len) < 0 || renameat(dfd, CONSOLE_LOG ".0.tmp", dfd, CONSOLE_LOG ".0") < 0) {
		r = -errno;
		(void)unlinkat(dfd, CONSOLE_LOG ".0.tmp", 0);
		return r;
	}
	if (ftruncate(cur, 0) < 0)
		return -errno;
	log_info("agent '%s': console log files over %lld bytes; kept the last %lld of %s as %s.0", agent, cap,
		 keep, CONSOLE_LOG, CONSOLE_LOG);
	return 1;
}

/* Every CONSOLE_CHECK_S: every agent's console within its cap (all of vms/, running or not). */
static void on_console_timer(evutil_socket_t fd, short what, void *arg)
{
	struct vm_backend *b = arg;
	_cleanup_free_ char *vms = xasprintf("%s/vms", b->state_dir);
	_cleanup_(closedirp) DIR *d = opendir(vms);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		int r;

		if ((de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) || de->d_name[0] == '.')
			continue;
		if ((r = console_enforce_cap(b, de->d_name)) < 0 && r != -ENOENT)
			log_debug("agent '%s': console cap: %s", de->d_name, strerror(-r));
	}
}

/* --- KVM that exists but does not run guests ---------------------------------------- */

static char *virt_type_file(struct vm_backend *b)
{
	return xasprintf("%s/vms/virt-type", b->state_dir);
}

static bool console_has_kernel_banner(struct vm_backend *b, const char *agent)
{
	_cleanup_free_ char *text = NULL;
	size_t len;

	/* The banner comes in the first KiB of a boot: the newest 1 MiB holds it unless the guest talked a lot since. */
	if (console_read(b, agent, 1 << 20, &text, &len) < 0)
		return false;
	return memmem(text, len, "Linux version", 13) != NULL;
}

/*
 * /dev/kvm can answer its ioctls and still not run a guest (seen with nested
 * virtualization: the kernel never leaves its decompressor). When the first
 * KVM guest prints no kernel banner within KVM_WATCHDOG_S, switch this host
 * to TCG for good (remembered in vms/virt-type), redefine the domain and
 * boot it again. Returns true when it took over the boot.
 */
static bool kvm_watchdog(struct vm *v)
{
	struct vm_backend *b = v->b;
	_cleanup_free_ char *dom = domain_name(v->name), *why = NULL, *xml = NULL, *file = NULL;
	char uuid[40];

	if (!v->booted_type || strcmp(v->booted_type, "kvm") != 0 || !v->started_at || !v->boot_agent)
		return false;
	/* Guests started as KVM before the switch follow it at once; the first one waits it out. */
	if (strcmp(b->domain_type, "kvm") == 0) {
		if (b->kvm_proven || now_usec() - v->started_at < KVM_WATCHDOG_S * 1000000LL)
			return false;
		if (console_has_kernel_banner(b, v->name)) {
			b->kvm_proven = true;
			return false;
		}
		log_warning("vm backend: agent '%s' printed no kernel line %d s after a KVM start: KVM does not run "
			    "guests on this host; switching to TCG (domain type qemu)", v->name, KVM_WATCHDOG_S);
		b->domain_type = "qemu";
		file = virt_type_file(b);
		if (write_text(file, "qemu\n", 0600) < 0)
			log_warning("vm backend: cannot remember the switch in %s", file);
	} else {
		log_info("agent '%s': rebooting under TCG like the rest of this host", v->name);
	}
	vm_drop_session(v);
	v->stopping = true;	/* our destroy, not a crash */
	(void)virt_domain_destroy(b->virt, dom, NULL);
	if (virt_domain_uuid(b->virt, dom, uuid) < 0) {
		waiters_finish(v, -EIO, "cannot read the domain's UUID to redefine it");
		return true;
	}
	{
		_cleanup_images_ struct agent_images im = { 0 };
		(void)load_images(b, v->name, &im);
		xml = domain_xml(b, v->boot_agent, &im, uuid);
	}
	if (virt_domain_define(b->virt, xml, &why) < 0 || virt_domain_start(b->virt, dom, &why) < 0) {
		waiters_finish(v, -EIO, why ? why : "cannot boot the guest under TCG");
		return true;
	}
	v->stopping = false;
	v->booted_type = "qemu";
	v->started_at = now_usec();
	v->boot_deadline = now_usec() + boot_timeout_s(v) * 1000000LL;
	schedule_connect(v);
	return true;
}

/*
 * Before a boot: the agent's dir is root's and 0711 (an older fleetd gave
 * it to QEMU's user), and the disks are 0600, so virtlogd (root, follows
 * symlinks) and fleetd never meet a link of QEMU's there. -errno with *why.
 */
static int vm_dir_secure(struct vm_backend *b, const char *agent, char **why)
{
	_cleanup_close_ int dfd = vm_dir_open(b, agent);
	static const char *const disks[] = { "disk.qcow2", "seed.img" };
	struct stat st;
	uid_t was;

	if (dfd < 0 || fstat(dfd, &st) < 0) {
		int r = dfd < 0 ? dfd : -errno;
		*why = xasprintf("cannot open the agent's directory: %s", strerror(-r));
		return r;
	}
	/* virtlogd (root) appends to console.log and would follow a link there. */
	if (fstatat(dfd, CONSOLE_LOG, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode) &&
	    unlinkat(dfd, CONSOLE_LOG, 0) == 0)
		log_warning("agent '%s': removed a %s that was not a regular file", agent, CONSOLE_LOG);
	if (fstat(dfd, &st) < 0) {
		int r = -errno;
		*why = xasprintf("cannot stat the agent's directory: %s", strerror(-r));
		return r;
	}
	if (st.st_uid == geteuid() && (st.st_mode & 07777) == 0711)
		return 0;
	was = st.st_uid;
	if (fchown(dfd, geteuid(), getegid()) < 0 || fchmod(dfd, 0711) < 0) {
		int r = -errno;
		*why = xasprintf("cannot make the agent's directory root's: %s", strerror(-r));
		return r;
	}
	/* Disks an older fleetd left 0644: the agent's files and its host key. */
	for (size_t i = 0; i < ARRAY_SIZE(disks); i++) {
		if (fstatat(dfd, disks[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
			(void)fchmodat(dfd, disks[i], 0600, 0);
	}
	log_notice("agent '%s': its directory is root's now (was uid %u)", agent, (unsigned)was);
	return 0;
}

/* --- lifecycle ------------------------------------------------------------------ */

static int vm_start(struct fleetd *f, const struct agent *a, backend_done_fn done, void *userdata, char **why)
{
	struct vm_backend *b = backend(f);
	_cleanup_free_ char *dom = domain_name(a->name);
	struct vm *v = vm_get(b, a->name);
	enum virt_state st;
	int r;

	if (v->busy) {
		*why = xstrdup("a snapshot or restore is under way; try again when it is done");
		return -EBUSY;
	}
	if ((r = virt_domain_state(b->virt, dom, &st)) < 0) {
		*why = r == -ENOENT ? xasprintf("its domain %s is gone from libvirt", dom)
				    : xstrdup("cannot reach libvirt (is libvirtd running?)");
		return r;
	}
	if (st != VIRT_RUNNING) {
		/* A fresh boot: any old session is dead, and a crashed domain needs destroying first. */
		vm_drop_session(v);
		if (st != VIRT_OFF) {
			v->stopping = true;	/* clearing a crashed domain is not another crash */
			(void)virt_domain_destroy(b->virt, dom, NULL);
		}
		if (a->network == NETWORK_NAT) {
			/* The network may be gone since create (net-destroy, a host reboot). */
			_cleanup_free_ char *net = network_xml();
			if ((r = virt_network_ensure(b->virt, NETWORK_NAME, net, why)) < 0)
				return r;
		}
		if ((r = vm_dir_secure(b, a->name, why)) < 0 || (r = prepare_boot(b, a, why)) < 0 ||
		    (r = virt_domain_start(b->virt, dom, why)) < 0)
			return r;
		v->booted_type = b->domain_type;
		v->started_at = now_usec();
		agent_free(v->boot_agent);
		v->boot_agent = agent_copy(a);
		log_info("agent '%s': domain %s started; waiting for its control channel", a->name, dom);
	}
	v->stopping = false;
	wait_ready(v, done, userdata);
	return 0;
}

static void stop_finish(struct vm *v, int r, const char *why)
{
	struct waiter w = v->stop_waiter;

	v->stop_waiter = (struct waiter){ 0 };
	if (v->stop_timer)
		evtimer_del(v->stop_timer);
	if (w.done)
		w.done(w.userdata, r, why);
}

static void on_stop_timer(evutil_socket_t fd, short what, void *arg)
{
	struct vm *v = arg;
	_cleanup_free_ char *dom = domain_name(v->name), *why = NULL;
	struct timeval tv = { 0, 250000 };
	enum virt_state st;
	int r;

	r = virt_domain_state(v->b->virt, dom, &st);
	if (r == -ENOENT || (r == 0 && st == VIRT_OFF)) {
		stop_finish(v, 0, NULL);
		return;
	}
	if (now_usec() >= v->stop_deadline) {
		log_notice("agent '%s': no clean shutdown in time; destroying domain %s", v->name, dom);
		r = virt_domain_destroy(v->b->virt, dom, &why);
		stop_finish(v, r == -EINVAL ? 0 : r, why);
		return;
	}
	evtimer_add(v->stop_timer, &tv);
}

static int vm_stop(struct fleetd *f, const struct agent *a, int timeout_s, backend_done_fn done, void *userdata,
		   char **why)
{
	struct vm_backend *b = backend(f);
	_cleanup_free_ char *dom = domain_name(a->name);
	struct vm *v = vm_get(b, a->name);
	struct timeval zero = { 0, 0 };
	int r;

	if (v->stop_waiter.done || v->busy) {
		*why = xstrdup(v->busy ? "a snapshot or restore is under way" : "a stop is already under way");
		return -EBUSY;
	}
	v->stopping = true;
	vm_drop_session(v);
	waiters_finish(v, -ECANCELED, "the agent is being stopped");
	r = virt_domain_shutdown(b->virt, dom, NULL);	/* an off domain refuses: fine, the timer sees it */
	if (r == -ENOTCONN) {
		*why = xstrdup("cannot reach libvirt (is libvirtd running?)");
		return r;
	}
	v->stop_waiter = (struct waiter){ done, userdata };
	v->stop_deadline = now_usec() + (long long)timeout_s * 1000000LL;
	if (!v->stop_timer)
		v->stop_timer = evtimer_new(b->f->base, on_stop_timer, v);
	evtimer_add(v->stop_timer, &zero);
	return 0;
}

static int vm_state(struct fleetd *f, const struct agent *a, enum agent_state *ret, char **why)
{
	_cleanup_free_ char *dom = domain_name(a->name);
	enum virt_state st;
	int r;

	if ((r = virt_domain_state(backend(f)->virt, dom, &st)) < 0) {
		if (r == -ENOENT && why)
			*why = xasprintf("its libvirt domain %s is gone", dom);
		return r;
	}
	*ret = (st == VIRT_OFF || st == VIRT_CRASHED) ? AGENT_STOPPED : AGENT_RUNNING;
	return 0;
}

/* --- exec ----------------------------------------------------------------------- */

/*
 * Wraps the caller's callbacks so the handle is freed with the exec's single
 * done(). An exec that arrives while the guest's session is not up yet (a
 * fleetd restart, a reconnect) keeps a copy of its request and waits for the
 * control channel like a boot does, retrying the connection, instead of
 * failing on the first handshake that does not go through.
 */
struct exec_handle {
	struct ssh_exec *ssh;
	struct exec_callbacks user;
	struct vm *vm;
	bool cancelled;
	bool paused;		/* the reader is slow (backend.h, exec_pause) */
	/* the request, kept while waiting for the session */
	char **argv, **env;
	char *stdin_data;
	size_t stdin_len;
	int timeout_s;
	bool root;
};

static void exec_handle_free(struct exec_handle *h)
{
	strv_free(h->argv);
	strv_free(h->env);
	free(h->stdin_data);
	free(h);
}

static void exec_output(void *userdata, enum exec_stream stream, const char *data, size_t len)
{
	struct exec_handle *h = userdata;

	h->user.output(h->user.userdata, stream, data, len);
}

static void exec_done(void *userdata, const struct exec_result *res)
{
	struct exec_handle *h = userdata;
	struct exec_callbacks user = h->user;

	if (h->vm) {
		h->vm->execs--;
		log_debug("agent '%s': exec done (%d still running)", h->vm->name, h->vm->execs);
	}
	exec_handle_free(h);
	user.done(user.userdata, res);
}

static void exec_fail(struct exec_handle *h, int error, const char *why)
{
	struct exec_result res = { .error = error, .why = why };

	exec_done(h, &res);
}

/* Start the (already wrapped) request on the vm's ready session. */
static int exec_start(struct exec_handle *h, char **why)
{
	struct exec_request req = {
		.argv = (const char *const *)h->argv, .env = (const char *const *)h->env,
		.stdin_data = h->stdin_data, .stdin_len = h->stdin_len, .timeout_s = h->timeout_s,
		.root = h->root,
	};

	int r;

	r = ssh_exec(h->vm->ssh, &req, &(struct exec_callbacks){ exec_output, exec_done, h }, &h->ssh, why);
	if (r == 0 && h->paused)
		ssh_exec_pause(h->ssh, true);
	return r;
}

static void exec_when_ready(void *userdata, int r, const char *why)
{
	struct exec_handle *h = userdata;
	_cleanup_free_ char *msg = NULL;

	if (h->cancelled) {
		exec_fail(h, -ECANCELED, "cancelled");
		return;
	}
	if (r < 0) {
		msg = xasprintf("the guest's control channel is not answering: %s", why ? why : strerror(-r));
		exec_fail(h, r, msg);
		return;
	}
	if ((r = exec_start(h, &msg)) < 0)
		exec_fail(h, r, msg);
}

static int vm_exec(struct fleetd *f, const struct agent *a, const struct exec_request *req,
		   const struct exec_callbacks *cb, struct exec_handle **ret, char **why)
{
	struct vm_backend *b = backend(f);
	_cleanup_free_ char *dom = domain_name(a->name);
	struct vm *v = vm_get(b, a->name);
	struct exec_handle *h;
	enum virt_state st;
	int r;

	/* First: a snapshot pauses the guest, which is not "not running". */
	if (v->busy) {
		*why = xstrdup("a snapshot or restore is under way; try again when it is done");
		return -EBUSY;
	}
	if ((r = virt_domain_state(b->virt, dom, &st)) < 0 || st != VIRT_RUNNING) {
		/* Not busy, yet paused: QEMU stops a guest whose disk write failed (a full host disk). */
		*why = r == 0 && st == VIRT_PAUSED
			? xasprintf("its guest is paused, most likely after a disk I/O error (is the host disk "
				    "full?); free space, then 'fleetctl restart %s'", a->name)
			: xasprintf("it is not running (fleetctl start %s)", a->name);
		return -EINVAL;
	}
	h = xcalloc(1, sizeof(*h));
	h->user = *cb;
	h->vm = v;
	v->execs++;
	log_debug("agent '%s': exec %s (%d running)", a->name, req->argv[0], v->execs);
	h->timeout_s = req->timeout_s;
	h->env = strv_copy(req->env);
	if (req->stdin_len) {
		h->stdin_data = xmalloc(req->stdin_len);
		memcpy(h->stdin_data, req->stdin_data, req->stdin_len);
		h->stdin_len = req->stdin_len;
	}
	h->argv = strv_copy(req->argv);
	h->root = req->root;
	if (v->ready) {
		if ((r = exec_start(h, why)) < 0) {
			v->execs--;
			exec_handle_free(h);
			return r;
		}
	} else {
		/* After a fleetd restart the guest runs but we hold no session yet. */
		wait_ready(v, exec_when_ready, h);
	}
	*ret = h;
	return 0;
}

static void vm_exec_cancel(struct exec_handle *h)
{
	if (h->ssh)
		ssh_exec_cancel(h->ssh);
	else
		h->cancelled = true;	/* done() comes when the wait for the session ends */
}

/* The channel is not read while paused: its SSH window bounds what waits on the host. */
static void vm_exec_pause(struct exec_handle *h, bool paused)
{
	h->paused = paused;
	if (h->ssh)
		ssh_exec_pause(h->ssh, paused);
}

static int vm_console(struct fleetd *f, const struct agent *a, size_t max, char **ret, size_t *ret_len)
{
	int r = console_read(backend(f), a->name, max, ret, ret_len);

	if (r == -EINVAL)
		log_warning("agent '%s': a console file is not a regular file (a symlink or FIFO?); not read", a->name);
	return r;
}

/* --- snapshots ------------------------------------------------------------------- */

/*
 * libvirt's internal qcow2 snapshots: a running guest gets a full checkpoint
 * (RAM and disk), a stopped one a disk snapshot. The blocking libvirt calls
 * run on a worker thread. fleetd's SSH session is closed before either, so
 * a checkpoint never holds a half-open control connection and a restored
 * guest meets a fresh one.
 */
struct snap_job {
	struct vm *vm;
	struct virt *virt;
	char *domain, *snap, *disk;
	bool revert, was_running;
	long long size_before;
	int r;
	char *why;
	backend_snapshot_fn created;
	backend_done_fn reverted;
	void *userdata;
};

static long long disk_bytes(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (long long)st.st_blocks * 512 : -1;
}

static void snap_job_work(void *arg)
{
	struct snap_job *j = arg;

	if (j->revert)
		j->r = virt_snapshot_revert(j->virt, j->domain, j->snap, &j->why);
	else
		j->r = virt_snapshot_create(j->virt, j->domain, j->snap, &j->why);
}

static void snap_job_free(struct snap_job *j)
{
	free(j->domain);
	free(j->snap);
	free(j->disk);
	free(j->why);
	free(j);
}

/* Bytes free for QEMU (not root) on the file system holding the agent's disk; -1 if unknown. */
static long long disk_free(struct vm_backend *b, const char *agent)
{
	_cleanup_free_ char *dir = vm_path(b, agent, NULL);
	struct statvfs s;

	return statvfs(dir, &s) == 0 ? (long long)s.f_bavail * (long long)s.f_frsize : -1;
}

static void snap_created(void *arg)
{
	struct snap_job *j = arg;
	long long after = disk_bytes(j->disk), avail;
	_cleanup_free_ char *why = NULL, *where = NULL;
	struct snapshot_result res = {
		.error = j->r, .why = j->why, .kind = j->was_running ? "full" : "disk",
		.size_bytes = (after >= 0 && j->size_before >= 0 && after >= j->size_before) ? after - j->size_before : -1,
	};

	/*
	 * QEMU reports a checkpoint that ran out of space as a bare I/O error
	 * ("failed to save SaveStateEntry ... -5"), and keeps the part it wrote
	 * allocated in disk.qcow2; say what happened.
	 */
	avail = j->r < 0 ? disk_free(j->vm->b, j->vm->name) : -1;
	if (j->r < 0 && ((avail >= 0 && avail < DISK_FULL_BYTES) || (j->why && strstr(j->why, "No space left")))) {
		_cleanup_free_ char *dir = vm_path(j->vm->b, j->vm->name, NULL);

		where = avail >= 0 ? xasprintf("%.1f MiB free in %s", (double)avail / (1 << 20), dir) : xasprintf("in %s", dir);
		why = xasprintf("the host disk is full (%s)%s; %s", where,
				j->was_running ? "; the guest may pause (I/O error) when it next needs disk space" : "",
				j->why ? j->why : strerror(-j->r));
		res.error = -ENOSPC;
		res.why = why;
	}
	j->vm->busy = false;
	j->created(j->userdata, &res);
	snap_job_free(j);
}

static void snap_reverted_ready(void *userdata, int r, const char *why)
{
	struct snap_job *j = userdata;

	j->vm->stopping = false;
	j->reverted(j->userdata, r, why);
	snap_job_free(j);
}

static void snap_reverted(void *arg)
{
	struct snap_job *j = arg;
	enum virt_state st;

	j->vm->busy = false;
	if (j->r < 0) {
		j->reverted(j->userdata, j->r, j->why);
		snap_job_free(j);
		return;
	}
	/*
	 * A restored checkpoint runs again: answer once its control channel
	 * does, so exec works at once. 'stopping' stays set until then: the
	 * revert's own stop event may still be on its way.
	 */
	if (virt_domain_state(j->virt, j->domain, &st) == 0 && st == VIRT_RUNNING) {
		wait_ready(j->vm, snap_reverted_ready, j);
		return;
	}
	j->reverted(j->userdata, 0, NULL);
	snap_job_free(j);
}

static struct snap_job *snap_job_new(struct vm_backend *b, const struct agent *a, const char *snap, char **why)
{
	struct vm *v = vm_get(b, a->name);
	struct snap_job *j;
	enum virt_state st;

	if (v->execs > 0 || v->busy) {
		*why = v->busy ? xstrdup("a snapshot or restore is already under way")
			       : xasprintf("%d command%s running in it; wait for %s to finish", v->execs,
					   v->execs == 1 ? " is" : "s are", v->execs == 1 ? "it" : "them");
		return NULL;
	}
	j = xcalloc(1, sizeof(*j));
	j->vm = v;
	j->virt = b->virt;
	j->domain = domain_name(a->name);
	j->snap = xstrdup(snap);
	j->disk = vm_path(b, a->name, "disk.qcow2");
	j->was_running = virt_domain_state(b->virt, j->domain, &st) == 0 && st == VIRT_RUNNING;
	return j;
}

static int snap_job_start(struct vm_backend *b, struct snap_job *j, char **why)
{
	int r;

	j->vm->busy = true;
	/* No control session inside the checkpoint; waiting execs are none (checked). */
	vm_drop_session(j->vm);
	if ((r = worker_run(b->f->base, snap_job_work, j->revert ? snap_reverted : snap_created, j)) < 0) {
		j->vm->busy = false;
		*why = xasprintf("cannot start a worker thread: %s", strerror(-r));
		snap_job_free(j);
	}
	return r;
}

static int vm_snapshot_create(struct fleetd *f, const struct agent *a, const char *snap,
			      backend_snapshot_fn done, void *userdata, char **why)
{
	struct vm_backend *b = backend(f);
	struct snap_job *j = snap_job_new(b, a, snap, why);
	long long avail, need;

	if (!j)
		return -EBUSY;
	/*
	 * A checkpoint writes the guest's memory into disk.qcow2: up to all of
	 * it (zero pages are skipped), plus device state and qcow2 metadata.
	 * QEMU (7.2) that runs out of space half-way keeps what it wrote
	 * allocated, so the host disk stays full and the guest pauses at its
	 * next write. Refuse unless the worst case fits.
	 */
	need = ((long long)a->memory_mib + a->memory_mib / 16 + 16) << 20;
	if (j->was_running && (avail = disk_free(b, a->name)) >= 0 && avail < need) {
		_cleanup_free_ char *dir = vm_path(b, a->name, NULL);

		*why = xasprintf("the host disk is nearly full: %.1f MiB free in %s, and a checkpoint of the running "
				 "guest may need up to %lld MiB for its memory; free some space, or stop the agent "
				 "for a disk-only snapshot", (double)avail / (1 << 20), dir, need >> 20);
		snap_job_free(j);
		return -ENOSPC;
	}
	j->created = done;
	j->userdata = userdata;
	j->size_before = disk_bytes(j->disk);
	return snap_job_start(b, j, why);
}

static int vm_snapshot_restore(struct fleetd *f, const struct agent *a, const char *snap,
			       backend_done_fn done, void *userdata, char **why)
{
	struct vm_backend *b = backend(f);
	struct snap_job *j = snap_job_new(b, a, snap, why);

	if (!j)
		return -EBUSY;
	j->revert = true;
	j->reverted = done;
	j->userdata = userdata;
	/* Reverting is fleet's doing: the guest's stop and start are not a crash. */
	j->vm->stopping = true;
	return snap_job_start(b, j, why);
}

static int vm_snapshot_delete(struct fleetd *f, const struct agent *a, const char *snap, char **why)
{
	_cleanup_free_ char *dom = domain_name(a->name);
	long long avail = disk_free(backend(f), a->name);

	/*
	 * Dropping a snapshot rewrites the snapshot table of disk.qcow2, which
	 * needs a little space. When QEMU or qemu-img fails there, libvirt
	 * (9.0) still removes its record and reports success: the snapshot
	 * would stay in the image, holding its space, known to no one.
	 */
	if (avail >= 0 && avail < DISK_FULL_BYTES) {
		_cleanup_free_ char *dir = vm_path(backend(f), a->name, NULL);

		*why = xasprintf("the host disk is full (%.1f MiB free in %s); deleting a snapshot needs a little "
				 "space to rewrite the disk image's snapshot table: free some space first",
				 (double)avail / (1 << 20), dir);
		return -ENOSPC;
	}
	return virt_snapshot_delete(backend(f)->virt, dom, snap, why);
}

static int vm_snapshot_exists(struct fleetd *f, const struct agent *a, const char *snap)
{
	_cleanup_free_ char *dom = domain_name(a->name);

	return virt_snapshot_exists(backend(f)->virt, dom, snap);
}

/* --- what libvirt tells us -------------------------------------------------------- */

/* Tell the lifecycle owner (lifecycle.c) about an agent's guest; it decides what follows. */
static void report(struct vm_backend *b, enum backend_event_kind kind, const char *agent, bool asked, bool clean,
		   const char *detail)
{
	struct backend_event ev = { .kind = kind, .backend = BACKEND_VM, .agent = agent, .asked = asked,
				    .clean = clean, .detail = detail };

	if (b->host->on_event)
		b->host->on_event(b->f, &ev);
}

static void report_orphans(struct vm_backend *b);

static void on_virt_event(void *userdata, const char *domain, enum virt_event_kind kind)
{
	struct vm_backend *b = userdata;
	const char *name;
	struct vm *v;

	if (kind == VIRT_EV_RECONNECTED) {
		report(b, BACKEND_EV_RESYNC, NULL, false, false, NULL);
		report_orphans(b);
		return;
	}
	if (strncmp(domain, DOMAIN_PREFIX, strlen(DOMAIN_PREFIX)) != 0)
		return;
	name = domain + strlen(DOMAIN_PREFIX);
	switch (kind) {
	case VIRT_EV_STARTED:
		report(b, BACKEND_EV_STARTED, name, false, false, NULL);
		break;
	case VIRT_EV_STOPPED_SHUTDOWN:
	case VIRT_EV_STOPPED_DESTROYED:
	case VIRT_EV_STOPPED_CRASHED:
	case VIRT_EV_STOPPED_OTHER:
		if ((v = vm_find(b, name)))
			vm_drop_session(v);
		report(b, BACKEND_EV_STOPPED, name, v && v->stopping, kind == VIRT_EV_STOPPED_SHUTDOWN,
		       kind == VIRT_EV_STOPPED_SHUTDOWN ? "it shut itself down" :
		       kind == VIRT_EV_STOPPED_DESTROYED ? "destroyed outside fleet" :
		       kind == VIRT_EV_STOPPED_CRASHED ? "QEMU died or the guest crashed" : "other reason");
		break;
	case VIRT_EV_UNDEFINED:
		report(b, BACKEND_EV_GONE, name, false, false, "its libvirt domain was undefined");
		break;
	default:
		break;
	}
}

/* libvirt domains of ours that belong to no agent: reported, never touched. */
static void report_orphans(struct vm_backend *b)
{
	struct agent **list = NULL;
	char **domains = NULL;

	if (b->host->list_agents(b->f, BACKEND_VM, &list) < 0)
		return;
	if (virt_domain_list(b->virt, DOMAIN_PREFIX, &domains) < 0) {
		agent_list_free(list);
		return;
	}
	for (size_t i = 0; list[i]; i++) {
		_cleanup_free_ char *dom = domain_name(list[i]->name);

		for (char **d = domains; *d; d++)
			if (strcmp(*d, dom) == 0) {
				free(*d);
				*d = xstrdup("");	/* accounted for */
			}
	}
	for (char **d = domains; *d; d++) {
		if (**d)
			log_warning("drift: libvirt domain %s belongs to no fleet agent; left alone", *d);
		free(*d);
	}
	free(domains);
	agent_list_free(list);
}

/* --- setup ------------------------------------------------------------------------ */

/* KVM when /dev/kvm works (not merely exists), else TCG. */
static const char *pick_domain_type(void)
{
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	int version = fd >= 0 ? ioctl(fd, KVM_GET_API_VERSION, 0) : -1;

	if (fd >= 0)
		close(fd);
	return version == KVM_API_VERSION ? "kvm" : "qemu";
}

static int vm_init(struct fleetd *f, const struct backend_host *host, char **why)
{
	const char *image_dir = config_get(&f->cfg, CFG_IMAGE_DIR);
	_cleanup_free_ char *vms = NULL, *keys = NULL;
	struct vm_backend *b;
	int r;

	/* Each agent's image record is fleet's to keep: without it no guest can be made or booted. */
	if (!host || !host->get_images || !host->set_images || !host->list_agents) {
		*why = xstrdup("fleetd gave the vm backend no access to its agents' image records");
		return -EINVAL;
	}
	b = xcalloc(1, sizeof(*b));
	b->f = f;
	b->host = host;
	b->state_dir = xstrdup(config_get(&f->cfg, CFG_STATE_DIR));
	b->image_dir = *image_dir ? xstrdup(image_dir) : xasprintf("%s/images", b->state_dir);
	b->domain_type = pick_domain_type();
	{
		_cleanup_free_ char *file = virt_type_file(b), *remembered = NULL;
		if (read_file(file, &remembered) == 0 && strcmp(remembered, "qemu") == 0)
			b->domain_type = "qemu";	/* an earlier run found KVM unusable */
	}
	vms = xasprintf("%s/vms", b->state_dir);
	keys = xasprintf("%s/keys", b->state_dir);
	if ((r = mkdir_p(vms, 0711)) < 0 || (r = mkdir_p(keys, 0700)) < 0 ||
	    (chmod(vms, 0711) < 0 && (r = -errno)) || (chmod(keys, 0700) < 0 && (r = -errno))) {
		*why = xasprintf("cannot create %s: %s", vms, strerror(-r));
		goto fail;
	}
	f->backend_state[BACKEND_VM] = b;
	adopt_legacy_agents(b);
	r = virt_open(f->base, config_get(&f->cfg, CFG_LIBVIRT_URI), on_virt_event, b, &b->virt, why);
	if (r == -ENOTCONN) {
		/* libvirtd may come later: stay available and keep trying. */
		log_warning("vm backend: libvirt not reachable yet (%s); retrying in the background", *why ? *why : "");
		free(*why);
		*why = NULL;
	} else if (r < 0) {
		f->backend_state[BACKEND_VM] = NULL;
		goto fail;
	} else {
		report_orphans(b);	/* the agents' own states: lifecycle_reconcile() */
	}
	{
		struct timeval tv = { CONSOLE_CHECK_S, 0 };
		b->console_timer = event_new(f->base, -1, EV_PERSIST, on_console_timer, b);
		if (!b->console_timer || event_add(b->console_timer, &tv) < 0)
			abort();	/* only on allocation failure */
	}
	log_info("vm backend: domain type %s, image %s", b->domain_type, b->image_dir);
	return 0;
fail:
	if (b->virt)
		virt_close(b->virt);
	free(b->state_dir);
	free(b->image_dir);
	free(b);
	return r;
}

static void vm_shutdown(struct fleetd *f)
{
	struct vm_backend *b = backend(f);

	if (!b)
		return;
	/* Guests keep running: fleetd's restart never touches them. */
	while (b->vms)
		vm_free(b->vms);
	if (b->console_timer)
		event_free(b->console_timer);
	virt_close(b->virt);
	free(b->state_dir);
	free(b->image_dir);
	free(b);
	f->backend_state[BACKEND_VM] = NULL;
}

/* agentd's own checks inside the guest. */
static const char *const vm_health_default[] = { "agentd", "health", NULL };

const struct backend_ops backend_vm_ops = {
	.name = "vm",
	.env_word = "guest",
	.health_default = vm_health_default,
	.has_network = true,
	.init = vm_init,
	.shutdown = vm_shutdown,
	.provision = vm_provision,
	.destroy = vm_destroy,
	.start = vm_start,
	.stop = vm_stop,
	.state = vm_state,
	.exec = vm_exec,
	.console = vm_console,
	.snapshot_create = vm_snapshot_create,
	.snapshot_restore = vm_snapshot_restore,
	.snapshot_delete = vm_snapshot_delete,
	.snapshot_exists = vm_snapshot_exists,
	.exec_cancel = vm_exec_cancel,
	.exec_pause = vm_exec_pause,
};
