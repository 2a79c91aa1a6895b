/*
 * backend_vm: agents as libvirt VMs. Each agent gets a persistent domain
 * "fleet-NAME" booted straight into the shared guest kernel, with a qcow2
 * overlay on the shared base image, a small seed disk carrying its SSH keys,
 * and a virtio-serial control channel whose host end is a Unix socket.
 * fleetd reaches the guest only through that channel: one SSH session per
 * running guest (ssh.c), one channel per exec. State comes from libvirt
 * (virt.c), never from guesses. No file of the backend includes libvirt or
 * libssh2 but those two, nor the store: what fleet keeps per agent comes
 * through struct backend_host.
 *
 * This file: the verbs start, stop, state and exec, init and shutdown, the
 * ops table; the registry of struct vm, paths and small file helpers the
 * other files share. The rest of the backend: vm_internal.h.
 *
 * Files per agent:
 *   <state_dir>/vms/NAME/   0711 root: disk.qcow2, seed.img, memory.qcow2 (0600), console.log[.N] (virtlogd's),
 *                           ctl.sock (libvirtd makes it for QEMU)
 * Guest images: the agent's disk is an overlay on the base.qcow2 of an image
 * in the content-addressed store (images.h), and it boots the kernel and
 * initramfs of a store image; never the files in image_dir, which a rebuild
 * replaces.
 *   <state_dir>/keys/NAME/  client (OpenSSH), host (dropbear), host.fingerprint; 0700 root
 */
#include "vm/backend.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/fleetd.h"
#include "common/log.h"
#include "backend/spawn.h"
#include "backend/worker.h"
#include "vm/ssh.h"
#include "common/util.h"
#include "vm/virt.h"
#include "vm/vm_internal.h"

/* --- the agents' struct vm, paths and small helpers (vm_internal.h) ----------- */

struct vm_backend *vm_backend_of(struct fleetd *f)
{
	return f->backend_state[BACKEND_VM];
}

char *vm_domain_name(const char *agent)
{
	return xasprintf(DOMAIN_PREFIX "%s", agent);
}

char *vm_path(struct vm_backend *b, const char *agent, const char *file)
{
	return file ? xasprintf("%s/vms/%s/%s", b->state_dir, agent, file) : xasprintf("%s/vms/%s", b->state_dir, agent);
}

char *vm_key_path(struct vm_backend *b, const char *agent, const char *file)
{
	return file ? xasprintf("%s/keys/%s/%s", b->state_dir, agent, file) : xasprintf("%s/keys/%s", b->state_dir, agent);
}

char *vm_image_path(struct vm_backend *b, const char *file)
{
	return xasprintf("%s/%s", b->image_dir, file);
}

struct vm *vm_find(struct vm_backend *b, const char *name)
{
	for (struct vm *v = b->vms; v; v = v->next)
		if (strcmp(v->name, name) == 0)
			return v;
	return NULL;
}

struct vm *vm_get(struct vm_backend *b, const char *name)
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

void vm_drop_session(struct vm *v)
{
	struct ssh_session *s = TAKE_PTR(v->ssh);

	v->ready = false;
	ssh_session_free(s);
}

void vm_free(struct vm *v)
{
	struct vm **pp;

	for (pp = &v->b->vms; *pp && *pp != v; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = v->next;
	vm_drop_session(v);
	vm_run_snaps_forget(v);
	vm_remote_console_close(v);
	vm_waiters_finish(v, -ECANCELED, "the environment went away (removed, or fleetd is stopping)");
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

struct vm_job {
	struct vm_backend *b;
	void (*work)(void *arg);
	void (*done)(void *arg);
	void *arg;
};

static void vm_job_work(void *p)
{
	struct vm_job *j = p;

	j->work(j->arg);
}

/* On the loop. */
static void vm_job_done(void *p)
{
	struct vm_job *j = p;
	void (*done)(void *arg) = j->done;
	void *arg = j->arg;

	j->b->jobs--;
	free(j);
	done(arg);
}

int vm_worker_run(struct vm_backend *b, void (*work)(void *arg), void (*done)(void *arg), void *arg)
{
	struct vm_job *j = xmalloc(sizeof(*j));
	int r;

	*j = (struct vm_job){ b, work, done, arg };
	if ((r = worker_run(b->f->base, vm_job_work, vm_job_done, j)) < 0) {
		free(j);
		return r;
	}
	b->jobs++;
	return 0;
}

int vm_run_tool(const char *const argv[], const char *what, char **why)
{
	_cleanup_free_ char *out = NULL;
	int r = spawn_run(argv, &out);

	if (r == 0)
		return 0;
	if (r < 0 && !out) {	/* not started at all (no pipe, no process): nothing was printed */
		*why = xasprintf("%s failed: cannot run %s: %s", what, argv[0], strerror(-r));
		return r;
	}
	out[strcspn(out, "\n")] = '\0';
	*why = xasprintf("%s failed: %s", what, r == 127 ? "tool not installed" : *out ? out : "no message");
	return r < 0 ? r : -EIO;
}

int vm_write_text(const char *path, const char *text, mode_t mode)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);

	if (fd < 0)
		return -errno;
	return write_all(fd, text, strlen(text));
}

/* The first line of a small file of ours; no symlink, FIFO or device is followed. */
int vm_read_line(const char *path, char **ret)
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

void vm_remove_tree(const char *path)
{
	const char *rm[] = { "rm", "-rf", "--", path, NULL };
	(void)spawn_run(rm, NULL);
}

/* The agent's dir, opened without following a symlink; -errno. */
int vm_dir_open(struct vm_backend *b, const char *agent)
{
	_cleanup_free_ char *dir = vm_path(b, agent, NULL);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

/* --- lifecycle ------------------------------------------------------------------ */

static int vm_start(struct fleetd *f, const struct agent *a, backend_done_fn done, void *userdata, char **why);

/* A start waiting for the agent's memory disk to be made (memdisk.c), or a remote one's boot prepared (remote_boot.c). */
struct start_wait {
	struct agent *a;
	backend_done_fn done;
	void *userdata;
};

static void start_memdisk_made(struct vm *v, int r, const char *why, void *userdata)
{
	struct start_wait *w = userdata;
	_cleanup_free_ char *again = NULL;

	/* The disk is there now, so this start goes on to the boot (or says why not). */
	if (r == 0)
		r = vm_start(v->b->f, w->a, w->done, w->userdata, &again);
	v->remote_boot_ready = false;	/* spent by that start, or by none: the next one checks again */
	if (r < 0)
		w->done(w->userdata, r, again ? again : why ? why : strerror(-r));
	agent_free(w->a);
	free(w);
}

/*
 * On a host other than local its disks are volumes there (remote_disks.c),
 * a NAT guest's rules its network filter there (remote_nat.c); its control
 * channel is streamed over that host's connection (channel.c). -errno with *why.
 */
static int start_remote(struct vm *v, const struct agent *a, enum virt_state st, backend_done_fn done, void *userdata,
			char **why)
{
	_cleanup_free_ char *dom = vm_domain_name(a->name);
	int r;

	if (st != VIRT_RUNNING) {
		struct start_wait *w = xcalloc(1, sizeof(*w));

		/* Its boot image there and its memory disk's size first, on a worker if anything is to do. */
		*w = (struct start_wait){ agent_copy(a), done, userdata };
		if ((r = vm_remote_boot_prepare(v, a, st == VIRT_OFF, start_memdisk_made, w, why)) != 0) {
			if (r < 0) {
				agent_free(w->a);
				free(w);
			}
			return r < 0 ? r : 0;
		}
		agent_free(w->a);
		free(w);
		vm_drop_session(v);
		if (st != VIRT_OFF) {
			v->stopping = true;	/* clearing a crashed domain is not another crash */
			(void)virt_domain_destroy(v->virt, dom, NULL);
		}
		/* Its network there may be gone since create (net-destroy, a reboot), its filter too: both first. */
		if (a->network == NETWORK_NAT && (r = vm_remote_nat_apply(v->virt, a->name, a->egress_allow, why)) < 0)
			return r;
		if ((r = vm_remote_boot(v, a, why)) < 0)
			return r;
		log_info("agent '%s': domain %s started on host %s (%s); waiting for its control channel", a->name, dom,
			 a->host, strcmp(v->booted_type, "kvm") == 0 ? "KVM" : "TCG");
	}
	v->stopping = false;
	vm_wait_ready(v, done, userdata);
	return 0;
}

static int vm_start(struct fleetd *f, const struct agent *a, backend_done_fn done, void *userdata, char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dom = vm_domain_name(a->name);
	struct vm *v = vm_get(b, a->name);
	struct virt *virt = vm_agent_virt(b, a, why);
	enum virt_state st;
	int r;

	if (!virt)
		return -ENOTCONN;
	if (v->busy) {
		*why = xstrdup("a snapshot, restore or move is under way; try again when it is done");
		return -EBUSY;
	}
	v->virt = virt;
	if ((r = virt_domain_state(virt, dom, &st)) < 0) {
		*why = r == -ENOENT ? xasprintf("its domain %s is gone from libvirt", dom)
				    : xstrdup("cannot reach libvirt (is libvirtd running?)");
		return r;
	}
	if (vm_agent_remote(a))
		return start_remote(v, a, st, done, userdata, why);
	if (st != VIRT_RUNNING) {
		/* Its memory disk first (provision, or an agent from before them): made on a worker. */
		if ((r = vm_memdisk_exists(b, a->name)) < 0) {
			*why = xasprintf("its memory disk %s is not a regular file: %s", MEMDISK, strerror(-r));
			return r;
		}
		if (r == 0) {
			struct start_wait *w = xcalloc(1, sizeof(*w));

			*w = (struct start_wait){ agent_copy(a), done, userdata };
			if ((r = vm_memdisk_make(v, a, start_memdisk_made, w, why)) < 0) {
				agent_free(w->a);
				free(w);
			}
			return r;
		}
		/* A fresh boot: any old session is dead, and a crashed domain needs destroying first. */
		vm_drop_session(v);
		if (st != VIRT_OFF) {
			v->stopping = true;	/* clearing a crashed domain is not another crash */
			(void)virt_domain_destroy(virt, dom, NULL);
		}
		if (a->network == NETWORK_NAT) {
			/* The network may be gone since create (net-destroy, a host reboot). */
			_cleanup_free_ char *net = vm_network_xml();
			if ((r = virt_network_ensure(virt, NETWORK_NAME, net, why)) < 0)
				return r;
			/* What no agent may reach, and its egress list: before the guest runs. */
			if ((r = vm_egress_apply(b, a, why)) < 0)
				return r;
		}
		if ((r = vm_dir_secure(b, a->name, why)) < 0 || (r = vm_prepare_boot(b, a, why)) < 0 ||
		    (st == VIRT_OFF && (r = vm_memdisk_fit(b, a, why)) < 0) ||
		    (r = virt_domain_start(virt, dom, why)) < 0)
			return r;
		v->booted_type = b->domain_type;
		v->started_at = now_usec();
		agent_free(v->boot_agent);
		v->boot_agent = agent_copy(a);
		log_info("agent '%s': domain %s started; waiting for its control channel", a->name, dom);
	}
	v->stopping = false;
	vm_wait_ready(v, done, userdata);
	return 0;
}

static void stop_finish(struct vm *v, int r, const char *why)
{
	struct waiter w = v->stop_waiter;

	v->stop_waiter = (struct waiter){ 0 };
	if (v->stop_timer)
		evtimer_del(v->stop_timer);
	/* Whatever still waits for the control channel waits for a guest that is gone. */
	vm_waiters_finish(v, -ECANCELED, "the agent stopped");
	if (w.done)
		w.done(w.userdata, r, why);
}

static void on_stop_timer(evutil_socket_t fd, short what, void *arg)
{
	struct vm *v = arg;
	_cleanup_free_ char *dom = vm_domain_name(v->name), *why = NULL;
	struct timeval tv = { 0, 250000 };
	enum virt_state st;
	int r;

	r = virt_domain_state(v->virt, dom, &st);
	if (r == -ENOENT || (r == 0 && st == VIRT_OFF)) {
		stop_finish(v, 0, NULL);
		return;
	}
	if (now_usec() >= v->stop_deadline) {
		log_notice("agent '%s': no clean shutdown in time; destroying domain %s", v->name, dom);
		r = virt_domain_destroy(v->virt, dom, &why);
		stop_finish(v, r == -EINVAL ? 0 : r, why);
		return;
	}
	evtimer_add(v->stop_timer, &tv);
}

static int vm_stop(struct fleetd *f, const struct agent *a, int timeout_s, backend_done_fn done, void *userdata,
		   char **why)
{
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dom = vm_domain_name(a->name);
	struct vm *v = vm_get(b, a->name);
	struct virt *virt = vm_agent_virt(b, a, why);
	struct timeval zero = { 0, 0 };
	int r;

	if (!virt)
		return -ENOTCONN;
	if (v->stop_waiter.done || v->busy) {
		*why = xstrdup(v->busy ? "a snapshot, restore or move is under way" : "a stop is already under way");
		return -EBUSY;
	}
	v->stopping = true;
	v->virt = virt;
	vm_drop_session(v);
	vm_waiters_finish(v, -ECANCELED, "the agent is being stopped");
	r = virt_domain_shutdown(virt, dom, NULL);	/* an off domain refuses: fine, the timer sees it */
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
	_cleanup_free_ char *dom = vm_domain_name(a->name);
	struct virt *virt = vm_agent_virt(vm_backend_of(f), a, why);
	enum virt_state st;
	int r;

	if (!virt)
		return -ENOTCONN;
	if ((r = virt_domain_state(virt, dom, &st)) < 0) {
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
	bool health;		/* the default health check: the guest's health service if it has one */
	struct exec_file *files;	/* copies: names and data are this handle's (data wiped when freed) */
	size_t n_files;
};

static void exec_handle_free(struct exec_handle *h)
{
	strv_free(h->argv);
	strv_free(h->env);
	free(h->stdin_data);
	for (size_t i = 0; i < h->n_files; i++) {
		explicit_bzero((void *)h->files[i].data, h->files[i].len);
		free((void *)h->files[i].data);
		free((void *)h->files[i].name);
	}
	free(h->files);
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

static int exec_start(struct exec_handle *h, char **why);

/*
 * The health service's answer; a guest without the service (an older
 * agentd, the service gone) refused the connection: the check runs as an
 * exec, as it did before, and the session tries the service no more.
 */
static void health_done(void *userdata, const struct exec_result *res)
{
	struct exec_handle *h = userdata;
	_cleanup_free_ char *msg = NULL;
	int r;

	if (res->error != -EOPNOTSUPP || h->cancelled) {
		exec_done(h, res);
		return;
	}
	log_debug("agent '%s': no health service in the guest; the check runs as an exec", h->vm->name);
	h->health = false;
	h->ssh = NULL;
	if ((r = exec_start(h, &msg)) < 0)
		exec_fail(h, r, msg);
}

/* Start the (already wrapped) request on the vm's ready session. */
static int exec_start(struct exec_handle *h, char **why)
{
	struct exec_request req = {
		.argv = (const char *const *)h->argv, .env = (const char *const *)h->env,
		.stdin_data = h->stdin_data, .stdin_len = h->stdin_len, .timeout_s = h->timeout_s,
		.root = h->root, .files = h->files, .n_files = h->n_files,
	};

	int r;

	if (h->health) {
		r = ssh_health(h->vm->ssh, GUEST_HEALTH_PORT, h->timeout_s,
			       &(struct exec_callbacks){ exec_output, health_done, h }, &h->ssh, why);
		if (r != -EOPNOTSUPP)
			return r;
		free(*why);
		*why = NULL;
	}
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
	struct vm_backend *b = vm_backend_of(f);
	_cleanup_free_ char *dom = vm_domain_name(a->name);
	struct vm *v = vm_get(b, a->name);
	struct exec_handle *h;
	enum virt_state st;
	int r;

	/*
	 * A guest shutting down still reads as running, but its channel is
	 * gone for good: an exec would wait for it until vm_boot_timeout, and
	 * hold off a restore meanwhile ("1 command is running in it").
	 */
	if (v->stop_waiter.done) {
		*why = xstrdup("it is being stopped");
		return -EBUSY;	/* as for a snapshot: no health verdict on a guest going down */
	}
	/* First: a snapshot pauses the guest, which is not "not running". */
	if (v->busy) {
		*why = xstrdup("a snapshot, restore or move is under way; try again when it is done");
		return -EBUSY;
	}
	struct virt *virt = vm_agent_virt(b, a, NULL);

	r = virt ? virt_domain_state(virt, dom, &st) : -ENOTCONN;
	/* Paused by a backup while its host was away at fleetd's start: resumed now (only a paused guest looks). */
	if (r == 0 && st == VIRT_PAUSED && vm_backup_pause_undo(b, a->name, virt) > 0)
		r = virt_domain_state(virt, dom, &st);
	if (r == -ENOTCONN) {
		/*
		 * libvirtd is away: whether the guest runs is unknown, not "no".
		 * As for a snapshot: a run waits and retries, a health check gives
		 * no verdict (a post-run check once marked the agent bad here).
		 */
		*why = xstrdup("cannot reach libvirt (is libvirtd running?), so its state is unknown; try again");
		return -EBUSY;
	}
	if (r < 0 || st != VIRT_RUNNING) {
		/* Not busy, yet paused: QEMU stops a guest whose disk write failed (a full host disk). */
		*why = r == 0 && st == VIRT_PAUSED
			? xasprintf("its guest is paused, most likely after a disk I/O error (is the host disk "
				    "full?); free space, then 'fleetctl restart %s'", a->name)
			: xasprintf("it is not running (fleetctl start %s)", a->name);
		return -EINVAL;
	}
	v->virt = virt;	/* after a fleetd restart: the host whose channel a new session opens (channel.c) */
	/*
	 * A remote guest's session rides a stream of its host's connection: once
	 * that connection was lost and made again (libvirtd restarted there, the
	 * network back), the stream is dead though the guest runs on. A new one.
	 */
	if (v->ssh && virt != b->virt && virt_generation(virt) != v->channel_gen) {
		log_info("agent '%s': its host's connection was made again; a new control channel", a->name);
		vm_drop_session(v);
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
	h->health = req->health && !req->root && !req->n_files && !req->env && !req->stdin_len;
	/* Files go on the exec's stdin to agentd, which puts them on a tmpfs in the guest (ssh_files_frame). */
	if (req->n_files > 0) {
		h->files = xcalloc(req->n_files, sizeof(*h->files));
		for (size_t i = 0; i < req->n_files; i++) {
			unsigned char *d = xmalloc(req->files[i].len ? req->files[i].len : 1);

			memcpy(d, req->files[i].data, req->files[i].len);
			h->files[i] = (struct exec_file){ xstrdup(req->files[i].name), d, req->files[i].len };
		}
		h->n_files = req->n_files;
	}
	if (v->ready) {
		if ((r = exec_start(h, why)) < 0) {
			v->execs--;
			exec_handle_free(h);
			return r;
		}
	} else {
		/* After a fleetd restart the guest runs but we hold no session yet. */
		vm_wait_ready(v, exec_when_ready, h);
	}
	*ret = h;
	return 0;
}

static void vm_exec_cancel(struct exec_handle *h)
{
	h->cancelled = true;	/* without a session yet: done() comes when the wait for it ends */
	if (h->ssh)
		ssh_exec_cancel(h->ssh);
}

/* The channel is not read while paused: its SSH window bounds what waits on the host. */
static void vm_exec_pause(struct exec_handle *h, bool paused)
{
	h->paused = paused;
	if (h->ssh)
		ssh_exec_pause(h->ssh, paused);
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
		_cleanup_free_ char *file = vm_virt_type_file(b), *remembered = NULL;
		if (vm_read_line(file, &remembered) == 0 && strcmp(remembered, "qemu") == 0)
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
	vm_memdisk_sweep(b);	/* before any build: what one cut short by fleetd's stop left */
	vm_adopt_legacy_agents(b);
	vm_egress_reconcile(b);	/* NAT guests may be running from before: their rules come back if they went missing */
	r = virt_open(f->base, config_get(&f->cfg, CFG_LIBVIRT_URI), vm_on_virt_event, b, &b->virt, why);
	if (r == -ENOTCONN) {
		/* libvirtd may come later: stay available and keep trying. */
		log_warning("vm backend: libvirt not reachable yet (%s); retrying in the background", *why ? *why : "");
		free(*why);
		*why = NULL;
	} else if (r < 0) {
		f->backend_state[BACKEND_VM] = NULL;
		goto fail;
	} else {
		vm_move_recover(b);	/* before anything starts a guest: a move cut short is undone or finished */
		vm_backup_pause_recover(b);	/* a guest a backup paused before fleetd's stop runs again */
		vm_report_orphans(b);	/* the agents' own states: lifecycle_reconcile() */
	}
	vm_console_watch_start(b);
	vm_egress_refresh_start(b);
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
	struct vm_backend *b = vm_backend_of(f);

	if (!b)
		return;
	vm_console_watch_stop(b);
	vm_egress_refresh_stop(b);
	if (b->jobs) {
		/*
		 * A worker thread still uses b, its hosts' connections and its
		 * job's vm: fleetd does not wait for a slow upload or copy, and
		 * the job is undone or finished at the next start, as after a
		 * kill (docs/multi-host.md). Nothing it uses is freed under it:
		 * the process's exit ends both.
		 */
		log_notice("vm: %u job(s) still on worker threads (a create on another host, a move, a snapshot, a backup copy); "
			   "not waiting: the next start finishes or undoes them", b->jobs);
		return;
	}
	/* Guests keep running: fleetd's restart never touches them. */
	while (b->vms)
		vm_free(b->vms);
	vm_hosts_close(b);
	virt_close(b->virt);
	free(b->state_dir);
	free(b->image_dir);
	free(b);
	f->backend_state[BACKEND_VM] = NULL;
}

/* agentd's own checks inside the guest. */
static const char *const vm_health_default[] = { "agentd", "health", NULL };

/* Every running guest's memory and CPU in one bulk libvirt call, matched to agents by domain name. */
static int vm_usage(struct fleetd *f, struct agent *const *agents, size_t n, struct agent_usage *ret)
{
	struct vm_backend *b = vm_backend_of(f);
	struct virt_domain_usage *u = NULL;
	size_t nu = 0;
	int r;

	if (!b || !b->virt)
		return -ENOTCONN;
	if ((r = virt_domain_usage_all(b->virt, DOMAIN_PREFIX, &u, &nu)) < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *dom = vm_domain_name(agents[i]->name);

		ret[i] = (struct agent_usage){ .memory_bytes = -1, .cpu_seconds = -1 };
		for (size_t k = 0; k < nu; k++)
			if (strcmp(u[k].name, dom) == 0)
				ret[i] = (struct agent_usage){ true, u[k].memory_bytes, u[k].cpu_seconds };
	}
	for (size_t k = 0; k < nu; k++)
		free(u[k].name);
	free(u);
	return 0;
}

const struct backend_ops backend_vm_ops = {
	.name = "vm",
	.env_word = "guest",
	.health_default = vm_health_default,
	.has_network = true,
	.agentd = AGENTD_IN_GUEST,	/* the image's, copied in by images/build-image.sh */
	.init = vm_init,
	.shutdown = vm_shutdown,
	.provision = vm_provision,
	.provision_start = vm_provision_start,
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
	.network_apply = vm_network_apply,
	.network_refused = vm_network_refused,
	.memory_quota_apply = vm_memory_quota_apply,
	.usage = vm_usage,
	.doctor = vm_doctor,
	.host_connect = vm_host_connect,
	.host_facts = vm_host_facts,
	.host_forget = vm_host_forget,
	.host_busy = vm_host_busy,
	.host_reachable = vm_host_reachable,
	.move = vm_move,
	.move_finish = vm_move_finish,
};
