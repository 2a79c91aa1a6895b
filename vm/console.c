/*
 * console: an agent's serial console log, read for `fleetctl console` and
 * the KVM watchdog, and kept within vm_console_max_bytes. A remote guest's
 * log is the same file, written by fleetd from its console stream
 * (remote_console.c) instead of by virtlogd.
 *
 * virtlogd (root) writes the serial console to vms/NAME/console.log and
 * rotates it to console.log.0, .1, ... (max_size, max_backups in
 * virtlogd.conf). fleetd reads and trims those files as root, so each is
 * opened below a root-owned dir with O_NOFOLLOW|O_NONBLOCK and used only if
 * it is a regular file: a symlink never leaks another file, a FIFO never
 * stalls the loop.
 */
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/fleetd.h"
#include "common/log.h"
#include "common/names.h"
#include "common/util.h"
#include "vm/virt.h"
#include "vm/vm_internal.h"

/*
 * virtlogd (root) writes the serial console to vms/NAME/console.log and
 * rotates it to console.log.0, .1, ... (max_size, max_backups in
 * virtlogd.conf). fleetd reads and trims those files as root, so each is
 * opened below a root-owned dir with O_NOFOLLOW|O_NONBLOCK and used only if
 * it is a regular file: a symlink never leaks another file, a FIFO never
 * stalls the loop.
 */
#define CONSOLE_CHECK_S 5		/* how often the cap is enforced */

static void closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
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
int vm_console_read(struct vm_backend *b, const char *agent, size_t max, char **ret, size_t *ret_len)
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

/* Whether the guest printed its kernel banner (the KVM watchdog asks). */
bool vm_console_has_kernel_banner(struct vm_backend *b, const char *agent)
{
	_cleanup_free_ char *text = NULL;
	size_t len;

	/* The banner comes in the first KiB of a boot: the newest 1 MiB holds it unless the guest talked a lot since. */
	if (vm_console_read(b, agent, 1 << 20, &text, &len) < 0)
		return false;
	return memmem(text, len, "Linux version", 13) != NULL;
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

void vm_console_cap(struct vm_backend *b, const char *agent)
{
	const char *bad;
	int r;

	if (agent_name_check(agent, &bad) < 0)
		return;
	if ((r = console_enforce_cap(b, agent)) < 0 && r != -ENOENT)
		log_debug("agent '%s': console cap: %s", agent, strerror(-r));
}

/* Every agent's console in vms/, running or not. */
static void console_cap_all(struct vm_backend *b)
{
	_cleanup_free_ char *vms = xasprintf("%s/vms", b->state_dir);
	_cleanup_(closedirp) DIR *d = opendir(vms);
	struct dirent *de;

	while (d && (de = readdir(d))) {
		if ((de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) || de->d_name[0] == '.')
			continue;
		vm_console_cap(b, de->d_name);
	}
}

/*
 * Every CONSOLE_CHECK_S: the consoles of the guests that run, the only ones
 * that grow (a guest that stops is capped once more by events.c). The
 * first time, and whenever libvirt is not there to say which run (guests
 * keep running without libvirtd), every agent's in vms/. A lower cap set
 * by a SIGHUP reaches a stopped agent's files at its next start.
 */
static void on_console_timer(evutil_socket_t fd, short what, void *arg)
{
	struct vm_backend *b = arg;
	char **running = NULL;

	vm_remote_consoles_tick(b);
	/* Asked only when connected: a reconnect is virt.c's to make (it reports it, we resync). */
	if (!b->console_swept || !virt_is_connected(b->virt) ||
	    virt_domain_list(b->virt, DOMAIN_PREFIX, true, &running) < 0) {
		console_cap_all(b);
		b->console_swept = true;
		return;
	}
	for (char **d = running; *d; d++) {
		vm_console_cap(b, *d + strlen(DOMAIN_PREFIX));
		free(*d);
	}
	free(running);
}

void vm_console_watch_start(struct vm_backend *b)
{
	struct timeval tv = { CONSOLE_CHECK_S, 0 };

	b->console_swept = false;
	b->console_timer = event_new(b->f->base, -1, EV_PERSIST, on_console_timer, b);
	if (!b->console_timer || event_add(b->console_timer, &tv) < 0)
		abort();	/* only on allocation failure */
}

void vm_console_watch_stop(struct vm_backend *b)
{
	if (b->console_timer)
		event_free(b->console_timer);
	b->console_timer = NULL;
}

int vm_console(struct fleetd *f, const struct agent *a, size_t max, char **ret, size_t *ret_len)
{
	int r;

	/* A remote guest's log is here too: its console streamed from its host (remote_console.c). */
	r = vm_console_read(vm_backend_of(f), a->name, max, ret, ret_len);

	if (r == -EINVAL)
		log_warning("agent '%s': a console file is not a regular file (a symlink or FIFO?); not read", a->name);
	return r;
}
