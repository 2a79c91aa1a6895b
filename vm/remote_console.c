/*
 * remote_console: the serial console of a guest on another host (#15), kept
 * in <state_dir>/vms/NAME/console.log on fleetd's host like a local guest's,
 * so `fleetctl console`, the cap and its rotation (console.c) read and trim
 * the same file the same way. A local guest's serial port is a file
 * virtlogd writes; a remote guest's is a pty on its host, which fleetd
 * streams over that host's libvirt connection (virDomainOpenConsole,
 * virt_channel.c) and appends here as it arrives.
 *
 * The stream is opened at each start (the domain created paused, resumed
 * once the stream is there, so the boot is logged whole), with each new
 * control session (channel.c), and by the console timer for every remote
 * agent that runs without one: after a fleetd
 * restart, a reconnect to its host (the stream died with the connection), a
 * revert that started a new QEMU, or a person's `virsh console` that held
 * the port (fleetd does not force it away). What the guest prints while no
 * stream is open is lost: at most one timer period.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "model/fleetd.h"
#include "vm/vm_internal.h"

#define READ_CHUNK (16 << 10)
#define READS_PER_WAKE 8	/* a chatty guest yields the loop after this many chunks */

struct vm_remote_console {
	struct vm *v;
	int fd;			/* our end of the stream's socketpair */
	int log;		/* console.log, O_APPEND: the cap's truncate leaves us at its new end */
	struct event *ev;
	struct virt *virt;	/* the connection and its generation it was opened on */
	unsigned gen;
	long long since_cap;	/* bytes appended since the cap was last applied */
};

void vm_remote_console_close(struct vm *v)
{
	struct vm_remote_console *c = TAKE_PTR(v->console);

	if (!c)
		return;
	event_free(c->ev);
	close(c->fd);	/* the pump sees its end close and aborts the stream */
	close(c->log);
	free(c);
}

static void on_console_data(evutil_socket_t fd, short what, void *arg)
{
	struct vm_remote_console *c = arg;
	struct vm *v = c->v;
	const long long cap = config_get_long(&v->b->f->cfg, CFG_VM_CONSOLE_MAX);
	char buf[READ_CHUNK];

	for (int i = 0; i < READS_PER_WAKE; i++) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			/* Its QEMU stopped, the connection went, or someone took the port: the timer opens it again. */
			log_debug("agent '%s': console stream ended (%s)", v->name, n == 0 ? "closed" : strerror(errno));
			vm_remote_console_close(v);
			return;
		}
		if (write_all(c->log, buf, (size_t)n) < 0)
			log_debug("agent '%s': cannot append to its console log: %s", v->name, strerror(errno));
		/* A guest that prints fast is held to the cap here, not only by the timer. */
		c->since_cap += n;
		if (c->since_cap > cap / 4) {
			c->since_cap = 0;
			vm_console_cap(v->b, v->name);
		}
	}
}

int vm_remote_console_open(struct vm *v, char **why)
{
	_cleanup_free_ char *dom = vm_domain_name(v->name);
	_cleanup_close_ int dfd = -1, log = -1, fd = -1;
	struct vm_remote_console *c;
	struct stat st;
	int r;

	if (v->console)
		return 0;
	if (!v->virt)
		return *why = xstrdup("its host's connection is not known yet"), -ENOTCONN;
	if ((dfd = vm_dir_open(v->b, v->name)) < 0)
		return *why = xasprintf("cannot open the agent's directory: %s", strerror(-dfd)), dfd;
	/* The dir is root's (0711): nobody else can put a link or a FIFO here; checked anyway. */
	log = openat(dfd, CONSOLE_LOG, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
		     0600);
	if (log < 0 || fstat(log, &st) < 0 || !S_ISREG(st.st_mode)) {
		r = log < 0 ? (errno == ELOOP ? -EINVAL : -errno) : -EINVAL;
		return *why = xasprintf("cannot open %s: %s", CONSOLE_LOG, strerror(-r)), r;
	}
	if ((r = virt_console_open(v->virt, dom, &fd, why)) < 0)
		return r;
	c = xcalloc(1, sizeof(*c));
	*c = (struct vm_remote_console){ .v = v, .fd = TAKE_FD(fd), .log = TAKE_FD(log), .virt = v->virt,
					 .gen = virt_generation(v->virt) };
	c->ev = event_new(v->b->f->base, c->fd, EV_READ | EV_PERSIST, on_console_data, c);
	if (!c->ev || event_add(c->ev, NULL) < 0)
		abort();	/* only on allocation failure */
	v->console = c;
	log_debug("agent '%s': console streamed from its host into %s", v->name, CONSOLE_LOG);
	return 0;
}

void vm_remote_console_ensure(struct vm *v)
{
	_cleanup_free_ char *why = NULL;

	/* A stream of an older connection (or of a host it left) is dead: open a new one. */
	if (v->console && (v->console->virt != v->virt || v->console->gen != virt_generation(v->virt)))
		vm_remote_console_close(v);
	if (!v->console && !v->busy && vm_remote_console_open(v, &why) < 0)
		log_debug("agent '%s': console not streamed yet: %s", v->name, why ? why : "?");
}

/* Whether agent list[i]'s host already came up among list[0..i-1]. */
static bool host_seen(struct agent **list, size_t i)
{
	for (size_t j = 0; j < i; j++)
		if (vm_agent_remote(list[j]) && strcmp(list[j]->host, list[i]->host) == 0)
			return true;
	return false;
}

static bool in_list(char **names, const char *name)
{
	for (char **n = names; n && *n; n++)
		if (strcmp(*n, name) == 0)
			return true;
	return false;
}

/* On one connected host: its agents' running domains get a console stream and the cap. */
static void tick_host(struct vm_backend *b, struct virt *virt, struct agent **list, const char *host)
{
	char **running = NULL;

	if (virt_domain_list(virt, DOMAIN_PREFIX, true, &running) < 0)
		return;
	for (size_t i = 0; list[i]; i++) {
		_cleanup_free_ char *dom = NULL;
		struct vm *v;

		if (!vm_agent_remote(list[i]) || strcmp(list[i]->host, host) != 0)
			continue;
		dom = vm_domain_name(list[i]->name);
		if (!in_list(running, dom)) {
			if ((v = vm_find(b, list[i]->name)))
				vm_remote_console_close(v);
			continue;
		}
		v = vm_get(b, list[i]->name);
		v->virt = virt;
		vm_remote_console_ensure(v);
		vm_console_cap(b, list[i]->name);
	}
	strv_free(running);
}

void vm_remote_consoles_tick(struct vm_backend *b)
{
	struct agent **list = NULL;

	/* No other host's connection open: no remote guest runs that fleetd could reach. */
	if (!b->hosts || b->host->list_agents(b->f, BACKEND_VM, &list) < 0)
		return;
	for (size_t i = 0; list[i]; i++) {
		struct virt *virt;

		if (!vm_agent_remote(list[i]) || host_seen(list, i))
			continue;
		/* Only a connection that is open and up: the timer never connects, nor waits for a host. */
		if (!(virt = vm_host_virt_if_open(b, list[i]->host)) || !virt_is_connected(virt))
			continue;
		tick_host(b, virt, list, list[i]->host);
	}
	agent_list_free(list);
}
