/*
 * ssh against a real dropbear: one `dropbear -i` (inetd mode) per
 * connection, started on the accepted end of a Unix socket the test
 * connects to the way fleetd connects a guest's virtio-serial socket. Like
 * the guest's relay, it starts only once the client sent its first bytes.
 *
 * dropbear runs as root in a private mount namespace where /etc is an
 * overlay whose upper layer holds a copy of /etc/passwd with one extra user
 * (a free uid, home in the temp dir), so nothing outside the temp dir is
 * touched. Not a bind mount on /etc/passwd itself: a useradd elsewhere (a
 * test running beside this one) renames a new passwd over the file, and the
 * kernel detaches a mount whose mount point is renamed over, in every
 * namespace: dropbear then saw no test user ("Login attempt for nonexistent
 * user"). Commands run
 * as that user; cleanup kills, by pid, every dropbear this test started
 * and every process left with the test's uid, and removes the temp dir.
 * Needs root; skips without it (fails under CI=true).
 *
 * The dropbear is fleet's patched build, the one in the guest image:
 * $FLEET_DROPBEAR, which `make check` builds (images/build-dropbear.sh) and
 * sets. Without it the test fails: it never falls back to Debian's stock
 * /usr/sbin/dropbear, which has the bug test_stress() shows (run against both).
 */
#include <errno.h>
#include <event2/event.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <dlfcn.h>
#include <sys/ioctl.h>
#include <ftw.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "vm/ssh.h"
#include "common/util.h"
#include "../tap.h"

#define STOCK_DROPBEAR "/usr/sbin/dropbear"
#define USER "fleet-ssh-test"

static char tmpdir[] = "/tmp/fleet-ssh-test.XXXXXX";
static bool have_tmpdir;
static uid_t test_uid;
static pid_t guests[64];
static int n_guests;
static struct event_base *base;
static char *client_key, *client_pub, *host_key, *host_fp, *other_fp, *stranger_key, *passwd_copy;
static const char *const dev_nodes[] = { "null", "zero", "full", "random", "urandom" };
static int log_sock = -1;
static char *log_buf;
static size_t log_len;
static const char *patched_dropbear;	/* $FLEET_DROPBEAR */
static const char *dropbear_bin;	/* what start_guest() runs: patched_dropbear, but for a stock run */

/* --- cleanup ------------------------------------------------------------------ */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

/* Kill, by pid, every live process owned by the test uid (only this test uses it). */
static int kill_test_uid(bool dry_run, const char *comm_want)
{
	DIR *d;
	struct dirent *de;
	int n = 0;

	if (!test_uid || !(d = opendir("/proc")))
		return 0;
	while ((de = readdir(d))) {
		char path[300], line[256], comm[64] = "";
		unsigned uid = (unsigned)-1;
		char state = '?';
		FILE *f;
		pid_t pid = (pid_t)atoi(de->d_name);

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
		if (!(f = fopen(path, "r")))
			continue;
		while (fgets(line, sizeof(line), f)) {
			if (strncmp(line, "Name:", 5) == 0)
				sscanf(line + 5, "%63s", comm);
			else if (strncmp(line, "State:", 6) == 0)
				sscanf(line + 6, " %c", &state);
			else if (strncmp(line, "Uid:", 4) == 0)
				sscanf(line + 4, "%u", &uid);
		}
		fclose(f);
		if (uid != test_uid || state == 'Z' || (comm_want && strcmp(comm, comm_want) != 0))
			continue;
		n++;
		if (!dry_run)
			kill(pid, SIGKILL);
	}
	closedir(d);
	return n;
}

static void cleanup(void)
{
	for (int i = 0; i < n_guests; i++) {
		kill(guests[i], SIGKILL);
		waitpid(guests[i], NULL, 0);
	}
	n_guests = 0;
	/* SIGKILL is not instant: wait (up to 2 s) until they are gone */
	for (int i = 0; i < 200 && kill_test_uid(false, NULL) > 0; i++)
		usleep(10000);
	if (have_tmpdir)
		nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	have_tmpdir = false;
}

static void dump_log(void);

static void on_signal(int sig)
{
	printf("# killed by signal %d (watchdog?)\n", sig);
	dump_log();
	cleanup();
	_exit(1);
}

static _noreturn_ void fail_all(const char *why)
{
	printf("not ok 1 - %s\n1..1\n", why);
	exit(1);
}

/* --- setup ---------------------------------------------------------------------- */

static char *tmp_path(const char *name)
{
	return xasprintf("%s/%s", tmpdir, name);
}

/* In dropbear's mount namespace: /etc with the test user's passwd on top; 0 or -1. */
static int mount_etc_overlay(void)
{
	_cleanup_free_ char *upper = tmp_path("etc-upper"), *work = tmp_path("etc-work");
	_cleanup_free_ char *opts = xasprintf("lowerdir=/etc,upperdir=%s,workdir=%s", upper, work);

	return mount("overlay", "/etc", "overlay", 0, opts);
}

static int write_text(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	int r;

	if (fd < 0)
		return -errno;
	r = write_all(fd, text, strlen(text));
	close(fd);
	return r;
}

/* Output of a command (first 4 KiB), or NULL. */
static char *capture(const char *cmd)
{
	FILE *p = popen(cmd, "r");
	char *buf = xcalloc(1, 4096);

	if (!p) {
		free(buf);
		return NULL;
	}
	fread(buf, 1, 4095, p);
	if (pclose(p) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static bool can_unshare_mount(void)
{
	pid_t pid = fork();
	int st;

	if (pid == 0)
		_exit(unshare(CLONE_NEWNS | CLONE_NEWNET) == 0 ? 0 : 1);
	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void setup(void)
{
	_cleanup_free_ char *passwd = NULL, *home = NULL, *sshdir = NULL, *auth = NULL, *line = NULL;
	_cleanup_free_ char *other = NULL, *stranger_pub = NULL, *auth_text = NULL;
	FILE *f;
	char buf[4096];
	size_t n, len = 0;

	if (geteuid() != 0)
		tap_skip_all("needs root (dropbear must switch to the test user)");
	patched_dropbear = getenv("FLEET_DROPBEAR");
	if (!patched_dropbear || !*patched_dropbear)
		fail_all("FLEET_DROPBEAR is not set: run through make check, which builds fleet's patched dropbear");
	if (access(patched_dropbear, X_OK) != 0)
		fail_all("no patched dropbear at $FLEET_DROPBEAR: run scripts/deps.sh as root (it fetches the source), "
			 "then make check (images/build-dropbear.sh builds it)");
	dropbear_bin = patched_dropbear;
	if (getpwnam(USER))
		tap_skip_all("a user named " USER " already exists");
	if (!can_unshare_mount())
		tap_skip_all("cannot create mount and network namespaces");
	/* From a pid-chosen start: two runs at once (several worktrees on one host)
	 * must not share a uid, since each kills its uid's leftover processes. */
	for (uid_t i = 0, first = (uid_t)getpid() % 500; i < 500 && !test_uid; i++) {
		uid_t u = 60500 + (first + i) % 500;

		if (!getpwuid(u) && !getgrgid(u))
			test_uid = u;
	}
	if (!test_uid)
		tap_skip_all("no free uid in 60500..60999");

	if (!mkdtemp(tmpdir))
		tap_skip_all("mkdtemp failed");
	have_tmpdir = true;
	chmod(tmpdir, 0755);	/* the test user must reach its home inside */

	client_key = tmp_path("client_key");
	host_key = tmp_path("host_key");
	stranger_key = tmp_path("stranger_key");
	other = tmp_path("other_host_key");
	if (ssh_keygen(client_key, SSH_KEY_OPENSSH, "fleetd@test", &client_pub, NULL) < 0 ||
	    ssh_keygen(host_key, SSH_KEY_DROPBEAR, "", NULL, &host_fp) < 0 ||
	    ssh_keygen(other, SSH_KEY_DROPBEAR, "", NULL, &other_fp) < 0 ||
	    ssh_keygen(stranger_key, SSH_KEY_OPENSSH, "", &stranger_pub, NULL) < 0) {
		cleanup();
		tap_skip_all("ssh_keygen failed");
	}

	/* /etc/passwd plus the test user, for dropbear's mount namespace only */
	f = fopen("/etc/passwd", "r");
	if (!f) {
		cleanup();
		tap_skip_all("cannot read /etc/passwd");
	}
	passwd = xstrdup("");
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
		passwd = xrealloc(passwd, len + n + 1);
		memcpy(passwd + len, buf, n);
		len += n;
		passwd[len] = '\0';
	}
	fclose(f);
	home = tmp_path("home");
	line = xasprintf("%s%s" USER ":x:%u:%u::%s:/bin/sh\n", passwd, len && passwd[len - 1] != '\n' ? "\n" : "",
			 (unsigned)test_uid, (unsigned)test_uid, home);
	passwd_copy = tmp_path("etc-upper/passwd");
	sshdir = xasprintf("%s/.ssh", home);
	auth_text = xasprintf("%s\n", client_pub);
	auth = xasprintf("%s/authorized_keys", sshdir);
	{
		_cleanup_free_ char *devdir = tmp_path("dev"), *logpath = tmp_path("dev/log");
		struct sockaddr_un sa = { .sun_family = AF_UNIX };

		mkdir(devdir, 0755);
		for (size_t i = 0; i < ARRAY_SIZE(dev_nodes); i++) {
			_cleanup_free_ char *p = xasprintf("%s/%s", devdir, dev_nodes[i]);
			write_text(p, "", 0644);
		}
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", logpath);
		log_sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (log_sock < 0 || bind(log_sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			cleanup();
			tap_skip_all("cannot make a syslog socket");
		}
		chmod(logpath, 0666);
	}
	{
		_cleanup_free_ char *upper = tmp_path("etc-upper"), *work = tmp_path("etc-work");

		if (mkdir(upper, 0755) < 0 || mkdir(work, 0700) < 0) {
			cleanup();
			tap_skip_all("cannot make the /etc overlay's directories");
		}
	}
	if (write_text(passwd_copy, line, 0644) < 0 || mkdir(home, 0700) < 0 || mkdir(sshdir, 0700) < 0 ||
	    write_text(auth, auth_text, 0600) < 0 || chown(home, test_uid, test_uid) < 0 || chown(sshdir, test_uid, test_uid) < 0 ||
	    chown(auth, test_uid, test_uid) < 0) {
		cleanup();
		tap_skip_all("cannot prepare the test user's home");
	}
}

/* Bring up lo in the test's own network namespace. */
static int lo_up(void)
{
	struct ifreq ifr = { 0 };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int r = -1;

	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP;
		r = ioctl(fd, SIOCSIFFLAGS, &ifr);
	}
	if (fd >= 0)
		close(fd);
	return r;
}

struct pipe_buf {
	char data[65536];
	size_t off, len;
};

/* Copy both ways, buffered per direction like agentd's relay, until either side closes. */
static void relay(int a, int b)
{
	static struct pipe_buf ab, ba;
	bool a_eof = false, b_eof = false;

	fcntl(a, F_SETFL, O_NONBLOCK);
	fcntl(b, F_SETFL, O_NONBLOCK);
	while (!(a_eof && ab.len == 0) && !(b_eof && ba.len == 0)) {
		struct pollfd p[2] = {
			{ a, (short)((!a_eof && ab.len == 0 ? POLLIN : 0) | (ba.len ? POLLOUT : 0)), 0 },
			{ b, (short)((!b_eof && ba.len == 0 ? POLLIN : 0) | (ab.len ? POLLOUT : 0)), 0 },
		};
		struct { int from, to; struct pipe_buf *buf; bool *eof; short rev_from, rev_to; } d[2] = {
			{ a, b, &ab, &a_eof, 0, 0 }, { b, a, &ba, &b_eof, 0, 0 },
		};

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		d[0].rev_from = p[0].revents, d[0].rev_to = p[1].revents;
		d[1].rev_from = p[1].revents, d[1].rev_to = p[0].revents;
		for (int i = 0; i < 2; i++) {
			if (d[i].buf->len && (d[i].rev_to & (POLLOUT | POLLERR | POLLHUP))) {
				ssize_t n = write(d[i].to, d[i].buf->data + d[i].buf->off, d[i].buf->len - d[i].buf->off);
				if (n < 0 && errno != EAGAIN && errno != EINTR)
					return;
				if (n > 0 && (d[i].buf->off += (size_t)n) == d[i].buf->len)
					d[i].buf->off = d[i].buf->len = 0;
			}
			if (!*d[i].eof && d[i].buf->len == 0 && (d[i].rev_from & (POLLIN | POLLHUP | POLLERR))) {
				ssize_t n = read(d[i].from, d[i].buf->data, sizeof(d[i].buf->data));
				if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
					*d[i].eof = true;
				else if (n > 0)
					d[i].buf->len = (size_t)n;
			}
		}
	}
}

/*
 * A stand-in guest on the far end of a Unix socket the test connects to, as
 * fleetd connects to QEMU's end of the virtio-serial channel: in its own
 * mount and network namespaces, a relay (like agentd's) that, once the
 * host's first bytes came, connects to a `dropbear -i` on the namespace's
 * 127.0.0.1:22 (dropbear cannot run a command on a Unix socket: it needs an
 * IP peer for SSH_CONNECTION). Returns the client fd; *pid_ret is the relay.
 */
static int start_guest(pid_t *pid_ret)
{
	_cleanup_free_ char *sock = tmp_path("guest.sock"), *devdir = tmp_path("dev");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd, cfd, afd;
	pid_t pid;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	unlink(sock);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 1) < 0)
		return -1;
	cfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (cfd < 0 || connect(cfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -1;
	afd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	close(lfd);
	unlink(sock);
	if (afd < 0)
		return -1;
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons(22),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		struct pollfd p = { .fd = afd, .events = POLLIN };
		int tl, tc, ts, one = 1;
		pid_t db;

		close(cfd);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (unshare(CLONE_NEWNS | CLONE_NEWNET) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount_etc_overlay() < 0)
			_exit(120);
		/* a /dev of the usual nodes plus our syslog socket, for dropbear's log */
		for (size_t i = 0; i < ARRAY_SIZE(dev_nodes); i++) {
			char host[64], mine[PATH_MAX];

			snprintf(host, sizeof(host), "/dev/%s", dev_nodes[i]);
			snprintf(mine, sizeof(mine), "%s/dev/%s", tmpdir, dev_nodes[i]);
			if (mount(host, mine, NULL, MS_BIND, NULL) < 0)
				_exit(122);
		}
		if (mount(devdir, "/dev", NULL, MS_BIND | MS_REC, NULL) < 0 || lo_up() < 0)
			_exit(123);
		tl = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		setsockopt(tl, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (tl < 0 || bind(tl, (struct sockaddr *)&in, sizeof(in)) < 0 || listen(tl, 1) < 0)
			_exit(124);
		/* the guest relay reaches sshd only after the host's first bytes */
		if (poll(&p, 1, 30000) != 1)
			_exit(121);
		tc = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (tc < 0 || connect(tc, (struct sockaddr *)&in, sizeof(in)) < 0)
			_exit(125);
		setsockopt(tc, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		ts = accept4(tl, NULL, NULL, 0);
		close(tl);
		if (ts < 0)
			_exit(126);
		setsockopt(ts, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));	/* as dropbear does when it listens itself */
		db = fork();
		if (db == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			dup2(ts, 0);
			dup2(ts, 1);
			close(ts);
			/* inetd mode logs only to syslog (-E is refused): /dev/log is ours */
			execl(dropbear_bin, "dropbear", "-i", "-r", host_key, "-s", "-j", "-k", (char *)NULL);
			_exit(127);
		}
		close(ts);
		relay(afd, tc);
		_exit(0);
	}
	close(afd);
	if (n_guests < (int)ARRAY_SIZE(guests))
		guests[n_guests++] = pid;
	if (pid_ret)
		*pid_ret = pid;
	return cfd;
}

static void reap_guest(pid_t pid)
{
	for (int i = 0; i < n_guests; i++) {
		if (guests[i] == pid) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			guests[i] = guests[--n_guests];
			return;
		}
	}
}

/* dropbear's syslog lines, drained from our /dev/log socket as they come. */
static void log_drain(evutil_socket_t fd, short what, void *arg)
{
	char b[2048];
	ssize_t n;

	while ((n = recv(log_sock, b, sizeof(b) - 1, MSG_DONTWAIT)) > 0) {
		b[n] = '\n';
		log_buf = xrealloc(log_buf, log_len + (size_t)n + 2);
		memcpy(log_buf + log_len, b, (size_t)n + 1);
		log_len += (size_t)n + 1;
		log_buf[log_len] = '\0';
	}
}

/* How many lines of dropbear's log contain s. */
static int log_count(const char *s)
{
	int n = 0;

	log_drain(-1, 0, NULL);
	for (const char *p = log_buf; p && (p = strstr(p, s)); p++)
		n++;
	return n;
}

/* Show dropbear's log as TAP comments, for failures. */
static void dump_log(void)
{
	log_drain(-1, 0, NULL);
	printf("# dropbear's log:\n");
	for (const char *p = log_buf; p && *p;) {
		const char *nl = strchr(p, '\n');
		int len = nl ? (int)(nl - p) : (int)strlen(p);

		printf("#   %.*s\n", len, p);
		p += len + (nl ? 1 : 0);
	}
}

/* --- the loop ------------------------------------------------------------------- */

struct sess {
	struct ssh_session *s;
	pid_t guest;
	bool ready, failed;
	int failed_calls, error;
	char *why;
};

static void sess_ready(void *u)
{
	((struct sess *)u)->ready = true;
}

static void sess_failed(void *u, int error, const char *why)
{
	struct sess *x = u;

	x->failed = true;
	x->failed_calls++;
	x->error = error;
	free(x->why);
	x->why = xstrdup(why);
}

static void loop_once(void)
{
	event_base_loop(base, EVLOOP_ONCE);
}

static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
	*(bool *)arg = true;
}

/* Run the loop for ms milliseconds. */
static void loop_for(int ms)
{
	bool over = false;
	struct event *t = evtimer_new(base, stop_cb, &over);
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	evtimer_add(t, &tv);
	while (!over)
		loop_once();
	event_free(t);
}

/* Start a session to a new guest and run the loop until it is ready or failed. */
static int open_sess(struct sess *x, const char *fingerprint, const char *key, int keepalive_s)
{
	struct ssh_session_config cfg = {
		.user = USER, .key_path = key, .host_fingerprint = fingerprint,
		.connect_timeout_s = 20, .keepalive_s = keepalive_s,
	};
	struct ssh_session_callbacks cb = { sess_ready, sess_failed, x };
	_cleanup_free_ char *why = NULL;
	int fd, r;

	memset(x, 0, sizeof(*x));
	fd = start_guest(&x->guest);
	if (fd < 0)
		return -errno;
	if ((r = ssh_session_new(base, fd, &cfg, &cb, &x->s, &why)) < 0) {
		printf("# ssh_session_new: %s\n", why);
		return r;
	}
	while (!x->ready && !x->failed)
		loop_once();
	if (x->failed)
		printf("# session failed: %s\n", x->why);
	return x->ready ? 0 : x->error;
}

static void close_sess(struct sess *x)
{
	ssh_session_free(x->s);
	x->s = NULL;
	reap_guest(x->guest);
	free(x->why);
	x->why = NULL;
}

struct run {
	struct ssh_exec *e;
	char *out, *err;
	size_t out_len, err_len, out_cap, err_cap;
	bool done;
	int done_calls, late_output;
	struct exec_result res;
	char *why;
	long long started, finished;
	/* flow control: pause the exec each time out_len reaches pause_at, then pause_at += pause_every */
	size_t pause_at, pause_every;
	bool paused;
	int pauses;
};

static void grow_append(char **buf, size_t *len, size_t *cap, const char *d, size_t n)
{
	if (*len + n + 1 > *cap) {
		*cap = (*len + n + 1) * 2;
		*buf = xrealloc(*buf, *cap);
	}
	memcpy(*buf + *len, d, n);
	*len += n;
	(*buf)[*len] = '\0';
}

static void run_output(void *u, enum exec_stream stream, const char *d, size_t n)
{
	struct run *r = u;

	if (r->done)
		r->late_output++;
	if (stream == EXEC_STDOUT)
		grow_append(&r->out, &r->out_len, &r->out_cap, d, n);
	else
		grow_append(&r->err, &r->err_len, &r->err_cap, d, n);
	if (r->pause_at && !r->paused && r->out_len >= r->pause_at && !r->done) {
		ssh_exec_pause(r->e, true);
		r->paused = true;
		r->pauses++;
		r->pause_at = r->pause_every ? r->pause_at + r->pause_every : 0;
	}
}

static void run_done(void *u, const struct exec_result *res)
{
	struct run *r = u;

	r->done = true;
	r->done_calls++;
	r->res = *res;
	r->why = res->why ? xstrdup(res->why) : NULL;
	r->res.why = r->why;
	r->finished = now_usec();
}

static int start_run(struct sess *x, struct run *r, const char *const *argv, const char *const *env,
		     const char *in, size_t in_len, int timeout_s)
{
	struct exec_request req = {
		.argv = argv, .env = env, .stdin_data = in, .stdin_len = in_len, .timeout_s = timeout_s,
	};
	struct exec_callbacks cb = { run_output, run_done, r };
	_cleanup_free_ char *why = NULL;
	int rc;

	memset(r, 0, sizeof(*r));
	r->out = xstrdup("");
	r->err = xstrdup("");
	r->started = now_usec();
	rc = ssh_exec(x->s, &req, &cb, &r->e, &why);
	if (rc < 0)
		printf("# ssh_exec: %s\n", why);
	return rc;
}

static void wait_run(struct run *r)
{
	while (!r->done)
		loop_once();
}

static void free_run(struct run *r)
{
	free(r->out);
	free(r->err);
	free(r->why);
	memset(r, 0, sizeof(*r));
}

/* Run argv to the end; returns ssh_exec's result. */
static int run_cmd(struct sess *x, struct run *r, const char *const *argv, const char *const *env,
		   const char *in, size_t in_len, int timeout_s)
{
	int rc = start_run(x, r, argv, env, in, in_len, timeout_s);

	if (rc == 0)
		wait_run(r);
	return rc;
}

/* Wait (polling, up to 3 s) until no process named comm runs as the test user. */
static int wait_no_procs(const char *comm)
{
	int n = 0;

	for (int i = 0; i < 300; i++) {
		if ((n = kill_test_uid(true, comm)) == 0)
			return 0;
		loop_for(10);
	}
	return n;
}

/* --- tests ------------------------------------------------------------------------ */

static void test_keys(void)
{
	_cleanup_free_ char *cmd = NULL, *out = NULL, *fp = NULL;
	size_t blob_end;

	/* libssh2 1.10 loads our OpenSSH-format key: proven by every login below. Cross-check with the tools too. */
	cmd = xasprintf("ssh-keygen -y -f %s 2>/dev/null", client_key);
	if (access("/usr/bin/ssh-keygen", X_OK) == 0) {
		out = capture(cmd);
		blob_end = strcspn(client_pub + 12, " ") + 12;
		ok(out && strncmp(out, client_pub, blob_end) == 0, "ssh-keygen reads our OpenSSH private key and derives the same public key");
		free(out);
		out = NULL;
	}
	free(cmd);
	cmd = xasprintf("dropbearkey -y -f %s 2>/dev/null", host_key);
	out = capture(cmd);
	ok(out && strstr(out, host_fp), "dropbearkey reads our dropbear host key and prints the same SHA256 fingerprint");
	if (out)
		printf("#   %s pinned\n", host_fp);
	ok(ssh_fingerprint_pubkey(client_pub, &fp) == 0 && strncmp(fp, "SHA256:", 7) == 0, "client key line has a fingerprint");
}

static void test_pinning(void)
{
	struct sess x;
	_cleanup_free_ char *want = NULL;
	int before;

	want = xasprintf("host key mismatch: expected %s, got %s", other_fp, host_fp);
	before = log_count("auth succeeded");
	is_int(open_sess(&x, other_fp, client_key, 0), -EKEYREJECTED, "wrong pinned host key refused");
	is_str(x.why, want, "the refusal names both fingerprints");
	is_int(x.failed_calls, 1, "failed() called once");
	loop_for(100);
	is_int(log_count("auth succeeded"), before, "no login happened on that connection");
	close_sess(&x);

	/* a missing client key would fail authentication: the pin is checked before it */
	is_int(open_sess(&x, other_fp, "/nonexistent/key", 0), -EKEYREJECTED, "host key checked before authentication");
	close_sess(&x);

	is_int(open_sess(&x, host_fp, stranger_key, 0), -EACCES, "unknown client key refused");
	is_str(x.why, "the guest refused public key login as '" USER "'", "refusal names the user");
	close_sess(&x);
}

static void test_basic(struct sess *x)
{
	const char *argv[] = { "sh", "-c", "echo hi; echo err >&2; exit 3", NULL };
	const char *words[] = { "printf", "[%s]", "a b", "", "$HOME", "`id`", "it's", "x\ny", "*", NULL };
	const char *env_argv[] = { "sh", "-c", "printf '%s|%s' \"$A\" \"$B\"", NULL };
	const char *env[] = { "A=it's $HOME `id`", "B=two\nlines", NULL };
	const char *nocmd[] = { "no-such-command-fleet", NULL };
	const char *sig[] = { "sh", "-c", "kill -TERM $$", NULL };
	const char *who[] = { "id", "-u", NULL };
	struct run r;
	char uidline[32];

	ok(run_cmd(x, &r, argv, NULL, NULL, 0, 0) == 0, "exec started");
	is_str(r.out, "hi\n", "stdout");
	is_str(r.err, "err\n", "stderr (pid line stripped)");
	is_int(r.res.exit_code, 3, "exit status 3");
	is_int(r.res.signal, 0, "no signal");
	ok(!r.res.timed_out && r.res.error == 0, "no timeout, no error");
	is_int(r.done_calls, 1, "done() once");
	is_int(r.late_output, 0, "no output after done()");
	free_run(&r);

	run_cmd(x, &r, who, NULL, NULL, 0, 0);
	snprintf(uidline, sizeof(uidline), "%u\n", (unsigned)test_uid);
	is_str(r.out, uidline, "runs as the session's user");
	free_run(&r);

	run_cmd(x, &r, words, NULL, NULL, 0, 0);
	is_str(r.out, "[a b][][$HOME][`id`][it's][x\ny][*]", "argv reaches the command word for word through the remote shell");
	free_run(&r);

	run_cmd(x, &r, env_argv, env, NULL, 0, 0);
	is_str(r.out, "it's $HOME `id`|two\nlines", "env values arrive literally");
	free_run(&r);

	run_cmd(x, &r, nocmd, NULL, NULL, 0, 0);
	is_int(r.res.exit_code, 127, "missing command: exit 127");
	ok(strstr(r.err, "no-such-command-fleet") != NULL, "missing command: stderr names it");
	free_run(&r);

	run_cmd(x, &r, sig, NULL, NULL, 0, 0);
	is_int(r.res.signal, SIGTERM, "killed by a signal: reported as SIGTERM");
	is_int(r.res.exit_code, -1, "killed by a signal: no exit code");
	free_run(&r);
}

/*
 * The exit status comes after the EOF: a command that closes its stdout and
 * stderr, then exits 3 once another exec on the same session has sent
 * output. libssh2 1.10's channel close returns after reading any one packet
 * (here the other exec's output), before this channel's exit-status came:
 * its status then read 0, success for a command that failed (the flake of
 * tests/vm/memory.sh's over-quota put, whose stdin window adjusts came
 * first). The "go" file orders the two: the status cannot come before the
 * other exec's output.
 */
/* Run late_end (after closing its output) beside another exec that talks first; a's result in *a. */
static void run_beside_talker(struct sess *x, struct run *a, const char *late_end, const char *what)
{
	_cleanup_free_ char *go = tmp_path("home/go");
	_cleanup_free_ char *late = xasprintf("exec >&- 2>&-; while [ ! -e %s ]; do sleep 0.1; done; %s", go, late_end);
	_cleanup_free_ char *other = xasprintf("sleep 1; echo hi; sleep 1; echo more; touch %s", go);
	const char *a_argv[] = { "sh", "-c", late, NULL };
	const char *b_argv[] = { "sh", "-c", other, NULL };
	struct run b;

	unlink(go);
	ok(start_run(x, a, a_argv, NULL, NULL, 0, 0) == 0 && start_run(x, &b, b_argv, NULL, NULL, 0, 0) == 0,
	   "%s: two execs, one closes its output at once and ends after the other talked", what);
	wait_run(a);
	wait_run(&b);
	is_str(b.out, "hi\nmore\n", "%s: the other exec's output", what);
	free_run(&b);
}

static void test_status_after_eof(struct sess *x)
{
	const char *quiet[] = { "sh", "-c", "exec >&- 2>&-; sleep 100", NULL };
	struct run a;

	run_beside_talker(x, &a, "exit 3", "exit 3");
	ok(a.res.error == 0 && !a.res.timed_out, "exit 3: no error (%s)", a.why ? a.why : "none");
	is_int(a.res.exit_code, 3, "exit 3: the status that came after the EOF and the other's output: 3, not 0");
	free_run(&a);

	run_beside_talker(x, &a, "kill -KILL $$", "SIGKILL");
	is_int(a.res.signal, SIGKILL, "SIGKILL: reported as killed by SIGKILL");
	ok(a.res.exit_code != 0, "SIGKILL: not exit status 0 (%d)", a.res.exit_code);
	free_run(&a);

	/* Waiting for the status is bounded by the exec's timeout, which kills the command. */
	run_cmd(x, &a, quiet, NULL, NULL, 0, 1);
	ok(a.res.timed_out, "output closed, still running: times out");
	is_int(a.res.signal, SIGKILL, "and is killed (SIGKILL)");
	is_int(wait_no_procs("sleep"), 0, "no sleep left in the guest");
	free_run(&a);
}

static void test_bad_requests(struct sess *x)
{
	const char *empty[] = { NULL }, *bad_env[] = { "1X=y", NULL }, *argv[] = { "true", NULL };
	struct exec_callbacks cb = { run_output, run_done, NULL };
	struct exec_request req = { .argv = empty };
	struct ssh_exec *e = NULL;
	char *why = NULL;

	is_int(ssh_exec(x->s, &req, &cb, &e, &why), -EINVAL, "empty argv refused");
	ok(why != NULL, "with a reason");
	free(why);
	why = NULL;
	req.argv = argv;
	req.env = bad_env;
	is_int(ssh_exec(x->s, &req, &cb, &e, &why), -EINVAL, "bad env name refused");
	free(why);
}

static void test_large(struct sess *x)
{
	const char *seq[] = { "seq", "1", "1000000", NULL };
	const char *wc[] = { "wc", "-c", NULL };
	const char *cat[] = { "cat", NULL };
	size_t exp_len = 0, big = 3000000, bin = 4 << 20;
	char *exp = xmalloc(8 << 20), *in = xmalloc(bin);
	struct run r;
	long long t;

	for (int i = 1; i <= 1000000; i++)
		exp_len += (size_t)sprintf(exp + exp_len, "%d\n", i);
	t = now_usec();
	run_cmd(x, &r, seq, NULL, NULL, 0, 0);
	ok(r.out_len == exp_len && memcmp(r.out, exp, exp_len) == 0, "seq 1 1000000: all %zu bytes, in order", exp_len);
	is_int(r.res.exit_code, 0, "large output: exit 0");
	printf("#   %zu bytes in %.2f s\n", r.out_len, (now_usec() - t) / 1e6);
	free_run(&r);

	memset(in, 'x', big);
	t = now_usec();
	run_cmd(x, &r, wc, NULL, in, big, 0);
	is_str(r.out, "3000000\n", "3 MB of stdin counted by wc -c");
	printf("#   3 MB in %.2f s\n", (now_usec() - t) / 1e6);
	free_run(&r);

	/* both directions at once, binary (NULs included), through the windows */
	for (size_t i = 0; i < bin; i++)
		in[i] = (char)((i * 2654435761u) >> 13);
	t = now_usec();
	run_cmd(x, &r, cat, NULL, in, bin, 0);
	ok(r.out_len == bin && memcmp(r.out, in, bin) == 0, "4 MiB of binary stdin comes back through cat unchanged");
	printf("#   4 MiB each way in %.2f s\n", (now_usec() - t) / 1e6);
	free_run(&r);

	run_cmd(x, &r, wc, NULL, "", 0, 0);
	is_str(r.out, "0\n", "no stdin: EOF at once");
	free_run(&r);
	free(exp);
	free(in);
}

/*
 * How long one exec of "sleep 1" takes on this host, now: the yardstick for
 * the duration checks below (ratios, never absolute limits: on a loaded
 * machine everything is slower, the baseline too). Set by test_concurrent.
 */
static long long baseline_us;

/* Each command prints when it started and ended (the guest's clock, in ns). */
static bool parse_span(const char *err, long long *start, long long *end)
{
	return sscanf(err, "start %lld\nend %lld\n", start, end) == 2;
}

static void test_concurrent(struct sess *x)
{
	const char *argv[] = { "sh", "-c", "echo start $(date +%s%N) >&2; sleep 1; tr a-z A-Z; echo end $(date +%s%N) >&2",
			       NULL };
	const char *sleep1[] = { "sleep", "1", NULL };
	struct run r[5];
	char in[5][16];
	bool all = true;
	long long t, t_end, last_start = 0, first_end = 0;

	run_cmd(x, &r[0], sleep1, NULL, NULL, 0, 0);
	baseline_us = r[0].finished - r[0].started;
	printf("#   baseline: one exec of sleep 1 took %.2f s\n", baseline_us / 1e6);
	free_run(&r[0]);

	t = now_usec();
	for (int i = 0; i < 5; i++) {
		snprintf(in[i], sizeof(in[i]), "hello %d", i);
		if (start_run(x, &r[i], argv, NULL, in[i], strlen(in[i]), 0) < 0)
			all = false;
	}
	ok(all, "5 execs started on one session");
	if (!all) {
		ssh_session_free(x->s);	/* done() for whatever started */
		x->s = NULL;
	}
	for (int i = 0; i < 5; i++)
		wait_run(&r[i]);
	t_end = now_usec();
	for (int i = 0; i < 5; i++) {
		char want[16];
		long long s0, s1;

		snprintf(want, sizeof(want), "HELLO %d", i);
		if (strcmp(r[i].out, want) != 0 || !parse_span(r[i].err, &s0, &s1) || r[i].res.exit_code != 0) {
			all = false;
			continue;
		}
		if (s0 > last_start)
			last_start = s0;
		if (first_end == 0 || s1 < first_end)
			first_end = s1;
	}
	ok(all, "each of the 5 got its own stdin, stdout, stderr and exit status");
	/* An order, not a duration: run one after the other, the last would start after the first ended. */
	ok(all && last_start < first_end, "they ran at the same time: all 5 had started before the first ended");
	printf("#   5 x sleep 1 at once took %.2f s\n", (t_end - t) / 1e6);
	for (int i = 0; i < 5; i++)
		free_run(&r[i]);
}

static void test_timeout(struct sess *x)
{
	const char *sleep100[] = { "sleep", "100", NULL };
	const char *tree[] = { "sh", "-c", "sleep 100 & sleep 100 & echo started; wait", NULL };
	struct run r;

	run_cmd(x, &r, sleep100, NULL, NULL, 0, 1);
	ok(r.res.timed_out, "sleep 100 with timeout 1: timed out");
	is_int(r.res.signal, SIGKILL, "and was killed (SIGKILL)");
	/* Not killed, it would take 100 x the baseline. */
	ok(r.finished - r.started < 10 * baseline_us, "within the timeout plus a little (%.2f s; sleep 1 took %.2f s)",
	   (r.finished - r.started) / 1e6, baseline_us / 1e6);
	is_int(wait_no_procs("sleep"), 0, "no sleep left in the guest");
	free_run(&r);

	run_cmd(x, &r, tree, NULL, NULL, 0, 1);
	ok(r.res.timed_out && strcmp(r.out, "started\n") == 0, "a process tree times out");
	is_int(wait_no_procs("sleep"), 0, "every process of the tree was killed");
	free_run(&r);
}

static void cancel_cb(evutil_socket_t fd, short what, void *arg)
{
	ssh_exec_cancel(((struct run *)arg)->e);
}

static void test_cancel(struct sess *x)
{
	const char *sleep100[] = { "sh", "-c", "echo going; sleep 100", NULL };
	struct run r;
	struct event *t;
	struct timeval tv = { 0, 300000 };

	start_run(x, &r, sleep100, NULL, NULL, 0, 0);
	t = evtimer_new(base, cancel_cb, &r);
	evtimer_add(t, &tv);
	wait_run(&r);
	event_free(t);
	is_int(r.res.error, -ECANCELED, "cancel: done() with -ECANCELED");
	is_str(r.out, "going\n", "output before the cancel delivered");
	ok(r.finished - r.started < 10 * baseline_us, "cancel is prompt (%.2f s; sleep 1 took %.2f s)",
	   (r.finished - r.started) / 1e6, baseline_us / 1e6);
	is_int(wait_no_procs("sleep"), 0, "cancelled command killed");
	free_run(&r);
}

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct run *r = arg;

	if (r->paused && !r->done) {
		r->paused = false;
		ssh_exec_pause(r->e, false);
	}
}

/* Flow control: a paused exec is not read, its sender blocks, the session serves others. */
/*
 * recv() as libssh2 and vm/ssh.c see it (this definition interposes on
 * libc's). Armed, it answers every other call that would return bytes with
 * EAGAIN, so the bytes reach libssh2 during whichever call comes next: a
 * stderr read after a stdout read, one exec's read for another exec's
 * output. On a loaded host that happens by timing; here on purpose.
 */
static bool recv_hide_armed;
static unsigned long recv_hidden;

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	static ssize_t (*real_recv)(int, void *, size_t, int);
	static bool hide;
	char c;

	if (!real_recv)
		*(void **)&real_recv = dlsym(RTLD_NEXT, "recv");
	if (recv_hide_armed && !(flags & MSG_PEEK) && real_recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
		hide = !hide;
		if (hide) {
			recv_hidden++;
			errno = EAGAIN;
			return -1;
		}
	}
	return real_recv(fd, buf, len, flags);
}

/*
 * Bytes libssh2 took from the socket during a call for another stream or
 * another channel wake nothing: the socket is empty by then. Before the fix
 * half of these execs waited for input that never came (a hang in CI when
 * the host was loaded), each ended here by its 3 s timeout.
 */
static void test_hidden_bytes(struct sess *x)
{
	const char *out[] = { "sh", "-c", "echo out; sleep 0.05; echo more", NULL };
	const char *err[] = { "sh", "-c", "echo err >&2; sleep 0.05; echo more >&2", NULL };
	struct run a, b;
	int stalled = 0, wrong = 0;

	recv_hide_armed = true;
	for (int i = 0; i < 10; i++) {
		run_cmd(x, &a, out, NULL, NULL, 0, 3);
		stalled += a.res.timed_out;
		wrong += !a.res.timed_out && strcmp(a.out, "out\nmore\n") != 0;
		free_run(&a);
	}
	for (int i = 0; i < 5; i++) {
		if (start_run(x, &a, out, NULL, NULL, 0, 3) < 0 || start_run(x, &b, err, NULL, NULL, 0, 3) < 0) {
			wrong++;
			break;
		}
		wait_run(&a);
		wait_run(&b);
		stalled += a.res.timed_out + b.res.timed_out;
		wrong += (!a.res.timed_out && strcmp(a.out, "out\nmore\n") != 0) +
			 (!b.res.timed_out && !strstr(b.err, "err\nmore\n"));
		free_run(&a);
		free_run(&b);
	}
	recv_hide_armed = false;
	ok(recv_hidden > 0 && stalled == 0 && wrong == 0,
	   "bytes libssh2 took during another call are read: %d of 20 execs stalled, %d wrong (%lu reads held back)",
	   stalled, wrong, recv_hidden);
}

static void test_pause(struct sess *x)
{
	const char *big[] = { "sh", "-c", "head -c 33554432 /dev/zero; echo end >&2", NULL };
	const char *endless[] = { "sh", "-c", "echo going; exec cat /dev/zero", NULL };
	const char *echo[] = { "echo", "beside", NULL };
	struct timeval tv = { 0, 20000 };
	struct run r, o;
	struct event *t;
	size_t at_pause;
	bool all = true;

	/* pause at the first output and hold it */
	start_run(x, &r, big, NULL, NULL, 0, 0);
	r.pause_at = 1;
	while (!r.paused && !r.done)
		loop_once();
	at_pause = r.out_len;
	loop_for(1500);
	ok(r.paused && !r.done && r.out_len == at_pause,
	   "paused: no output for 1.5 s (%zu bytes before the pause, %zu after)", at_pause, r.out_len - at_pause);
	run_cmd(x, &o, echo, NULL, NULL, 0, 0);
	is_str(o.out, "beside\n", "another exec on the session runs meanwhile");
	free_run(&o);
	ok(!r.done, "and the paused one is still not done");
	ssh_exec_pause(r.e, false);
	r.paused = false;
	wait_run(&r);
	for (size_t i = 0; i < r.out_len && all; i++)
		all = r.out[i] == 0;
	ok(r.out_len == 32 << 20 && all, "resumed: all 32 MiB arrive (%zu)", r.out_len);
	ok(strcmp(r.err, "end\n") == 0 && r.res.exit_code == 0, "then stderr's last line and exit 0");
	free_run(&r);

	/* paused every 1 MiB, resumed 20 ms later: many turns, nothing lost */
	start_run(x, &r, big, NULL, NULL, 0, 0);
	r.pause_at = r.pause_every = 1 << 20;
	t = event_new(base, -1, EV_PERSIST, resume_cb, &r);
	evtimer_add(t, &tv);
	wait_run(&r);
	event_free(t);
	ok(r.out_len == 32 << 20 && r.res.exit_code == 0 && r.pauses >= 16,
	   "paused and resumed %d times: all 32 MiB and exit 0 (%zu)", r.pauses, r.out_len);
	free_run(&r);

	/* a kill overrides the pause: a timeout and a cancel still end a paused exec */
	start_run(x, &r, endless, NULL, NULL, 0, 2);
	r.pause_at = 1;
	wait_run(&r);
	ok(r.res.timed_out && r.res.signal == SIGKILL, "a paused exec still times out (signal %d)", r.res.signal);
	is_int(wait_no_procs("cat"), 0, "and its command is gone");
	free_run(&r);
	start_run(x, &r, endless, NULL, NULL, 0, 0);
	r.pause_at = 1;
	while (!r.paused && !r.done)
		loop_once();
	ssh_exec_cancel(r.e);
	wait_run(&r);
	is_int(r.res.error, -ECANCELED, "a paused exec can be cancelled");
	is_int(wait_no_procs("cat"), 0, "and its command is gone");
	free_run(&r);
}

static void test_session_end(void)
{
	const char *sleep100[] = { "sleep", "100", NULL };
	const char *echo[] = { "echo", "still", NULL };
	struct sess x;
	struct run r;
	bool done_before_failed;

	/* keepalive while idle, then work as usual */
	is_int(open_sess(&x, host_fp, client_key, 1), 0, "session with keepalive 1 s");
	loop_for(2500);
	ok(ssh_session_is_ready(x.s) && !x.failed, "idle with keepalives: still ready");
	run_cmd(&x, &r, echo, NULL, NULL, 0, 0);
	is_str(r.out, "still\n", "and runs commands");
	free_run(&r);

	/* the guest side goes away while idle */
	kill(x.guest, SIGKILL);
	while (!x.failed)
		loop_once();
	is_int(x.error, -ECONNRESET, "guest gone while idle: failed() with -ECONNRESET");
	close_sess(&x);

	/* ... and while a command runs */
	is_int(open_sess(&x, host_fp, client_key, 0), 0, "new session");
	start_run(&x, &r, sleep100, NULL, NULL, 0, 0);
	loop_for(300);
	kill(x.guest, SIGKILL);
	while (!x.failed)
		loop_once();
	done_before_failed = r.done;
	ok(r.done && r.res.error < 0 && r.why, "the running exec got done() with an error (%s)", r.why ? r.why : "-");
	ok(done_before_failed, "before failed()");
	{
		char *why = NULL;
		struct ssh_exec *e;
		struct exec_request req = { .argv = echo };
		struct exec_callbacks cb = { run_output, run_done, NULL };

		is_int(ssh_exec(x.s, &req, &cb, &e, &why), -ENOTCONN, "no exec on a failed session");
		free(why);
	}
	free_run(&r);
	close_sess(&x);
	kill_test_uid(false, "sleep");	/* dropbear died under it: the orphan is ours to end */

	/* freeing the session with an exec in flight */
	is_int(open_sess(&x, host_fp, client_key, 0), 0, "another session");
	start_run(&x, &r, sleep100, NULL, NULL, 0, 0);
	loop_for(200);
	ssh_session_free(x.s);
	x.s = NULL;
	ok(r.done && r.res.error == -ECONNABORTED, "ssh_session_free: the exec's done() came with -ECONNABORTED");
	free_run(&r);
	close_sess(&x);
	kill_test_uid(false, "sleep");
}

/* The guest's dropbear for x: the one child of x's relay (same pid namespace). */
static pid_t guest_dropbear(const struct sess *x)
{
	char path[64], buf[64] = "";
	FILE *f;
	long pid = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)x->guest, (int)x->guest);
	if ((f = fopen(path, "r"))) {
		if (fgets(buf, sizeof(buf), f))
			pid = strtol(buf, NULL, 10);
		fclose(f);
	}
	return (pid_t)pid;
}

/* Run the loop until x failed, for at most ms (a bound on the wait, not an assertion). */
static void wait_failed(struct sess *x, int ms)
{
	bool over = false;
	struct event *t = evtimer_new(base, stop_cb, &over);
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	evtimer_add(t, &tv);
	while (!x->failed && !over)
		loop_once();
	event_free(t);
}

/*
 * A guest whose sshd freezes after login (#13): dropbear stopped with
 * SIGSTOP, the connection open, nothing closed. The session's probes go
 * unanswered, so it fails by itself after SSH_KEEPALIVE_MISSES intervals:
 * an exec in flight (with a long timeout of its own) and one sent after the
 * freeze get "SSH session to the guest stopped answering", an idle session
 * fails the same way. After SIGCONT the old dropbear sees its connection
 * gone and ends; a new session works. Before the fix the exec waited for
 * its own 30 s timeout and the idle session stayed "ready".
 */
static void test_frozen(void)
{
	const char *sleep100[] = { "sleep", "100", NULL };
	const char *echo[] = { "echo", "alive", NULL };
	struct sess x;
	struct run r, late;
	pid_t db;
	bool done_before_failed, gone = false;
	long long t;

	is_int(open_sess(&x, host_fp, client_key, 1), 0, "frozen: session with a 1 s keepalive");
	run_cmd(&x, &r, echo, NULL, NULL, 0, 0);
	is_str(r.out, "alive\n", "frozen: runs commands at first");
	free_run(&r);
	loop_for(2500);
	ok(ssh_session_is_ready(x.s) && !x.failed, "frozen: a live idle guest answers the probes: still ready");
	db = guest_dropbear(&x);
	ok(db > 0, "frozen: found the guest's dropbear (pid %d)", (int)db);
	start_run(&x, &r, sleep100, NULL, NULL, 0, 30);
	loop_for(300);
	if (db > 0)
		kill(db, SIGSTOP);
	t = now_usec();
	start_run(&x, &late, echo, NULL, NULL, 0, 30);
	wait_run(&r);
	wait_run(&late);
	done_before_failed = !x.failed || r.done;
	wait_failed(&x, 1000);
	printf("#   noticed %.1f s after the freeze (keepalive 1 s, %d misses)\n", (now_usec() - t) / 1e6,
	       SSH_KEEPALIVE_MISSES);
	ok(!r.res.timed_out && r.res.error == -ETIMEDOUT && r.why &&
	   strstr(r.why, "SSH session to the guest stopped answering"),
	   "frozen: the running exec fails with the session, not its own timeout (%s)", r.why ? r.why : "-");
	ok(!late.res.timed_out && late.res.error == -ETIMEDOUT && late.why &&
	   strstr(late.why, "SSH session to the guest stopped answering"),
	   "frozen: an exec sent after the freeze fails the same way (%s)", late.why ? late.why : "-");
	ok(x.failed && x.failed_calls == 1 && x.error == -ETIMEDOUT && done_before_failed,
	   "frozen: failed() once, -ETIMEDOUT, after the execs' done() (%s)", x.why ? x.why : "-");
	ok(!ssh_session_is_ready(x.s), "frozen: the session is no longer ready");
	free_run(&r);
	free_run(&late);
	ssh_session_free(x.s);
	x.s = NULL;
	if (db > 0)
		kill(db, SIGCONT);
	/* polled for at most 3 s: gone, or a zombie not reaped yet */
	for (int i = 0; i < 300 && db > 0 && !gone; i++) {
		char path[64], state = 'Z';
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)db);
		if ((f = fopen(path, "r"))) {
			if (fscanf(f, "%*d %*s %c", &state) != 1)
				state = '?';
			fclose(f);
		}
		gone = state == 'Z';
		if (!gone)
			loop_for(10);
	}
	ok(gone, "frozen: continued, the old dropbear saw its connection closed and ended");
	close_sess(&x);
	kill_test_uid(false, "sleep");

	/* idle: nothing in flight, the probes alone notice it */
	is_int(open_sess(&x, host_fp, client_key, 1), 0, "frozen idle: a new session");
	db = guest_dropbear(&x);
	if (db > 0)
		kill(db, SIGSTOP);
	wait_failed(&x, 20000);
	ok(x.failed && x.error == -ETIMEDOUT && x.why && strstr(x.why, "SSH session to the guest stopped answering"),
	   "frozen idle: the session fails by itself (%s)", x.why ? x.why : "-");
	if (db > 0)
		kill(db, SIGCONT);
	close_sess(&x);

	is_int(open_sess(&x, host_fp, client_key, 1), 0, "frozen: a guest that answers again gets a new session");
	run_cmd(&x, &r, echo, NULL, NULL, 0, 0);
	is_str(r.out, "alive\n", "frozen: and runs commands");
	free_run(&r);
	close_sess(&x);
}

/* Execs sent before the session is ready wait for it, or fail with it. */
static void test_early_exec(void)
{
	const char *echo[] = { "echo", "early", NULL };
	struct ssh_session_config cfg = { .user = USER, .key_path = client_key, .host_fingerprint = host_fp };
	struct sess x = { 0 };
	struct ssh_session_callbacks cb = { sess_ready, sess_failed, &x };
	struct run r1, r2;
	char *why = NULL;
	int fd;

	fd = start_guest(&x.guest);
	ok(fd >= 0 && ssh_session_new(base, fd, &cfg, &cb, &x.s, &why) == 0, "session started");
	ok(start_run(&x, &r1, echo, NULL, NULL, 0, 0) == 0 && start_run(&x, &r2, echo, NULL, NULL, 0, 0) == 0,
	   "two execs sent before the handshake");
	ok(!r1.done && !r2.done, "done() is never called from inside ssh_exec()");
	wait_run(&r1);
	wait_run(&r2);
	ok(x.ready && strcmp(r1.out, "early\n") == 0 && strcmp(r2.out, "early\n") == 0, "they ran once the session was ready");
	free_run(&r1);
	free_run(&r2);
	close_sess(&x);

	memset(&x, 0, sizeof(x));
	cfg.host_fingerprint = other_fp;
	fd = start_guest(&x.guest);
	ok(fd >= 0 && ssh_session_new(base, fd, &cfg, &cb, &x.s, &why) == 0, "session with a wrong pin started");
	start_run(&x, &r1, echo, NULL, NULL, 0, 0);
	wait_run(&r1);
	ok(r1.res.error == -EKEYREJECTED && r1.why && strstr(r1.why, "host key mismatch"),
	   "an exec waiting for it fails with the session's error");
	ok(x.failed && r1.out_len == 0, "and nothing ran");
	free_run(&r1);
	close_sess(&x);
}

/*
 * dropbear 2022.83's "sent_close" bug (images/patches/dropbear-close-before-exec.patch,
 * upstream https://github.com/mkj/dropbear/issues/321): a child exiting while
 * a session channel is open but has not had its exec request yet closes that
 * channel early, and its command's first output then kills the connection
 * ("Failed assertion ... !channel->sent_close"). fleet hits it by running
 * health checks, runs and a person's execs at once. To provoke it: many
 * short execs, STRESS_INFLIGHT at a time on one session, each replaced as
 * soon as one ends, so children keep exiting while new channels open. A
 * session that dies is counted and replaced. Measured here with the stock
 * build: a session died about every 20 execs (mostly on the assertion, some
 * when libssh2 saw the early close itself and failed the session), so 600
 * execs on one session of the patched build is a real test of the fix; with
 * FLEET_DROPBEAR=/usr/sbin/dropbear the assertions below fail.
 */
#define STRESS_INFLIGHT 8
#define STRESS_EXECS 600

struct stress_stats {
	int execs, ok, bad, sessions, died, asserts;
	double secs;
	char *first_bad, *first_death;
};

/* Up to total execs; budget_ms > 0 also stops it after that long (for the
 * stock build, whose figures are only reported), 0 runs all of them. */
static void stress(const char *bin, int total, int budget_ms, struct stress_stats *st)
{
	struct sess x;
	struct run r[STRESS_INFLIGHT];
	char arg[STRESS_INFLIGHT][16];
	int num[STRESS_INFLIGHT];
	bool busy[STRESS_INFLIGHT];
	int started = 0, asserts_before = log_count("Failed assertion");
	long long t0 = now_usec(), deadline = budget_ms > 0 ? t0 + budget_ms * 1000LL : LLONG_MAX;

	memset(st, 0, sizeof(*st));
	dropbear_bin = bin;
	while (started < total && now_usec() < deadline) {
		int active = 0;

		if (open_sess(&x, host_fp, client_key, 0) < 0) {
			if (!st->bad)
				st->first_bad = xstrdup("a new session failed");
			st->bad++;
			close_sess(&x);
			break;
		}
		st->sessions++;
		memset(busy, 0, sizeof(busy));
		for (;;) {
			for (int i = 0; i < STRESS_INFLIGHT && !x.failed && started < total && now_usec() < deadline; i++) {
				const char *argv[] = { "echo", arg[i], NULL };

				if (busy[i])
					continue;
				num[i] = started;
				snprintf(arg[i], sizeof(arg[i]), "%d", num[i]);
				if (start_run(&x, &r[i], argv, NULL, NULL, 0, 10) < 0)
					break;
				busy[i] = true;
				active++;
				started++;
			}
			if (active == 0)
				break;
			loop_once();
			for (int i = 0; i < STRESS_INFLIGHT; i++) {
				char want[24];

				if (!busy[i] || !r[i].done)
					continue;
				snprintf(want, sizeof(want), "%d\n", num[i]);
				st->execs++;
				if (r[i].res.error == 0 && r[i].res.exit_code == 0 && strcmp(r[i].out, want) == 0 &&
				    r[i].done_calls == 1) {
					st->ok++;
				} else {
					if (!st->bad)
						st->first_bad = xasprintf("exec %d: error %d, exit %d, out '%.20s' (%s)", num[i],
									  r[i].res.error, r[i].res.exit_code, r[i].out,
									  r[i].why ? r[i].why : "-");
					st->bad++;
				}
				free_run(&r[i]);
				busy[i] = false;
				active--;
			}
		}
		if (x.failed && st->died++ == 0)
			st->first_death = xstrdup(x.why);
		close_sess(&x);
	}
	loop_for(100);	/* the last session's log lines */
	st->asserts = log_count("Failed assertion") - asserts_before;
	st->secs = (now_usec() - t0) / 1e6;
	dropbear_bin = patched_dropbear;
	kill_test_uid(false, NULL);	/* a dead dropbear's orphans */
}

static void test_stress(void)
{
	struct stress_stats st;
	_cleanup_free_ char *cmd = xasprintf("grep -E '^(debian_version|fleet_patches)=' '%s.info' 2>/dev/null",
					     patched_dropbear);
	_cleanup_free_ char *info = capture(cmd);

	printf("# dropbear under test: %s\n", patched_dropbear);
	for (char *line = info ? strtok(info, "\n") : NULL; line; line = strtok(NULL, "\n"))
		printf("#   %s\n", line);

	/* Debian's stock build: a race, so report, do not assert */
	if (access(STOCK_DROPBEAR, X_OK) == 0) {
		stress(STOCK_DROPBEAR, 800, 4000, &st);
		printf("# stock %s: %d execs (%d ok) in %.1f s on %d sessions; %d sessions died, "
		       "%d \"Failed assertion\" in its log\n", STOCK_DROPBEAR, st.execs, st.ok, st.secs, st.sessions,
		       st.died, st.asserts);
		if (st.died)
			printf("#   first death: %s\n", st.first_death);
		free(st.first_bad);
		free(st.first_death);
	} else {
		printf("# no stock %s to compare with\n", STOCK_DROPBEAR);
	}

	/* A count, not a rate: a loaded host runs them slower, not fewer. */
	stress(patched_dropbear, STRESS_EXECS, 0, &st);
	printf("# FLEET_DROPBEAR %s: %d execs (%d ok) in %.1f s on %d sessions; %d sessions died, "
	       "%d \"Failed assertion\" in its log\n", patched_dropbear, st.execs, st.ok, st.secs, st.sessions,
	       st.died, st.asserts);
	if (st.bad)
		printf("#   first failure: %s\n", st.first_bad);
	if (st.died)
		printf("#   first death: %s\n", st.first_death);
	free(st.first_bad);
	free(st.first_death);
	ok(st.execs == STRESS_EXECS, "stress: all %d short execs, %d at a time, ran on the patched dropbear (%d)",
	   STRESS_EXECS, STRESS_INFLIGHT, st.execs);
	ok(st.bad == 0 && st.ok == st.execs, "stress: every exec gave its own output and exit 0 (%d of %d)", st.ok, st.execs);
	ok(st.died == 0 && st.sessions == 1, "stress: the session never died (%d died, %d sessions)", st.died, st.sessions);
	is_int(st.asserts, 0, "stress: no failed assertion in dropbear's log");
}

static void test_connect_timeout(void)
{
	struct ssh_session_config cfg = {
		.user = USER, .key_path = client_key, .host_fingerprint = host_fp, .connect_timeout_s = 1,
	};
	struct sess x = { 0 };
	struct ssh_session_callbacks cb = { sess_ready, sess_failed, &x };
	char *why = NULL;
	int sv[2];
	long long t;

	/* a peer that never answers */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		ok(0, "socketpair");
		return;
	}
	t = now_usec();
	ok(ssh_session_new(base, sv[0], &cfg, &cb, &x.s, &why) == 0, "session on a silent peer");
	while (!x.failed && !x.ready)
		loop_once();
	is_int(x.error, -ETIMEDOUT, "silent peer: -ETIMEDOUT");
	t = now_usec() - t;
	/* Not at once (libevent's cached clock may start the timer a little before t); late
	 * by the host's load, which the baseline shares. */
	ok(t >= 900000 && (baseline_us == 0 || t < 3 * baseline_us),
	   "after the connect timeout of 1 s (%.2f s; sleep 1 took %.2f s)", t / 1e6, baseline_us / 1e6);
	ssh_session_free(x.s);
	close(sv[1]);
	free(x.why);

	cfg.host_fingerprint = "MD5:xx";
	ok(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0 &&
	   ssh_session_new(base, sv[0], &cfg, &cb, &x.s, &why) == -EINVAL, "a non-SHA256 pin is refused");
	close(sv[1]);
	free(why);
}

/*
 * A guest whose sshd answers garbage (#13): something that is no SSH server
 * at all, and a server whose banner is right but whose next bytes are not a
 * key exchange. Either way the session fails (never ready) with an error
 * and a reason, once, and does not wait for the connect timeout to say so
 * when the peer has closed.
 */
static void test_garbage_peer(void)
{
#define ANSWER(text) { text, sizeof(text) - 1 }
	static const struct { const char *bytes; size_t len; } answers[] = {
		ANSWER("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"),
		ANSWER("SSH-2.0-dropbear_2022.83\r\n\x00\x00\x00\x0c\x0a\x15garbage-garbage-garbage\xff\xfe"),
		ANSWER("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\r\n"),
	};
#undef ANSWER
	struct ssh_session_config cfg = {
		.user = USER, .key_path = client_key, .host_fingerprint = host_fp, .connect_timeout_s = 30,
	};

	for (size_t i = 0; i < ARRAY_SIZE(answers); i++) {
		struct sess x = { 0 };
		struct ssh_session_callbacks cb = { sess_ready, sess_failed, &x };
		char *why = NULL;
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
			ok(0, "socketpair");
			return;
		}
		/* The peer's whole answer, then it hangs up (as sshd does after a protocol error). */
		if (write(sv[1], answers[i].bytes, answers[i].len) != (ssize_t)answers[i].len)
			ok(0, "write the garbage");
		shutdown(sv[1], SHUT_WR);
		ok(ssh_session_new(base, sv[0], &cfg, &cb, &x.s, &why) == 0, "garbage peer %zu: a session starts", i);
		while (!x.failed && !x.ready)
			loop_once();
		ok(x.failed && !x.ready && x.failed_calls == 1, "garbage peer %zu: the session fails, once", i);
		ok(x.error < 0 && x.error != -ETIMEDOUT, "garbage peer %zu: with an error, not the timeout (%d)", i,
		   x.error);
		ok(x.why && *x.why, "garbage peer %zu: and a reason: %s", i, x.why ? x.why : "(none)");
		ssh_session_free(x.s);
		close(sv[1]);
		free(x.why);
	}
}

int main(void)
{
	struct event *log_ev;
	struct sess x;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getenv("FLEET_TEST_DEBUG"))
		log_setup("test_ssh", LOG_DEBUG);	/* libssh2's own words, on stderr */
	signal(SIGPIPE, SIG_IGN);
	setup();
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGALRM, on_signal);
	alarm(300);
	base = event_base_new();
	log_ev = event_new(base, log_sock, EV_READ | EV_PERSIST, log_drain, NULL);
	event_add(log_ev, NULL);

	test_keys();
	test_pinning();
	is_int(open_sess(&x, host_fp, client_key, 0), 0, "pinned key accepted, logged in with the OpenSSH-format ed25519 key");
	if (x.ready) {
		test_basic(&x);
		test_bad_requests(&x);
		test_status_after_eof(&x);
		test_large(&x);
		test_concurrent(&x);
		test_timeout(&x);
		test_cancel(&x);
		test_pause(&x);
		test_hidden_bytes(&x);
	}
	close_sess(&x);
	test_session_end();
	test_frozen();
	test_early_exec();
	test_stress();
	test_connect_timeout();
	test_garbage_peer();

	if (tap_failed)
		dump_log();
	event_free(log_ev);
	event_base_free(base);
	cleanup();
	return tap_done();
}
