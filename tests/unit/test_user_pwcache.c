/*
 * test_user_pwcache: account_lookup's cache of passwd entries
 * (user/pwcache.h), on the real /etc/passwd written by shadow's real tools
 * and by hand, in a mount namespace of the test's own with an overlay on
 * /etc (etc_overlay.h: the host's files are never touched):
 *   - a lookup of a settled file is kept, the next one is a hit;
 *   - a miss is never kept: a user made by hand is found at once;
 *   - usermod (a new file renamed over) drops the cache;
 *   - a uid changed by hand in place (same inode, same size: only the times
 *     differ) is seen at the next lookup, the new uid returned;
 *   - account_pwcache_drop and fleet's own useradd/userdel drop it;
 *   - account_lookup's checks run on a cached entry (a uid range changed);
 *   - a full cache starts again, bounded.
 * And, as TAP comments (no assertion), what a lookup costs with 30 and
 * with 1000 users ahead of the agent's in /etc/passwd: getpwnam, the
 * cache's hit, account_lookup.
 * Agent names start with "pwc" so they collide with no other test's.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "model/agent.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "user/internal.h"
#include "user/pwcache.h"
#include "../tap.h"
#include "etc_overlay.h"

static struct fleetd F;

static struct agent *mk_agent(const char *name)
{
	struct agent *a = xcalloc(1, sizeof(*a));

	a->name = xstrdup(name);
	a->backend = BACKEND_USER;
	return a;
}

static struct pwcache_stats stats(void)
{
	struct pwcache_stats s;

	pwcache_get_stats(account_pwcache(), &s);
	return s;
}

/* Until /etc/passwd changed long enough ago to be cached from (PWCACHE_SETTLE_S). */
static void settle(void)
{
	for (int i = 0; i < 100; i++) {
		struct stat sb;
		time_t now = time(NULL);

		if (stat("/etc/passwd", &sb) == 0 && sb.st_mtime < now - PWCACHE_SETTLE_S - 1 &&
		    sb.st_ctime < now - PWCACHE_SETTLE_S - 1)
			return;
		usleep(100 * 1000);
	}
}

/* Run a shell command line; its exit status. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	_cleanup_free_ char *cmd = NULL;
	va_list ap;
	int st;

	va_start(ap, fmt);
	if (vasprintf(&cmd, fmt, ap) < 0)
		cmd = NULL;
	va_end(ap);
	if (!cmd)
		return -1;
	st = system(cmd);
	return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

/*
 * Rewrite the uid and gid of name's line in /etc/passwd in place, as an
 * edit by hand that keeps the length: same inode, same size, new times.
 */
static int edit_ids_in_place(const char *name, long old, long new)
{
	_cleanup_free_ char *text = NULL, *from = xasprintf("%s:x:%ld:%ld:", name, old, old);
	_cleanup_free_ char *to = xasprintf("%s:x:%ld:%ld:", name, new, new);
	_cleanup_close_ int fd = open("/etc/passwd", O_RDWR | O_CLOEXEC);
	struct stat sb;
	char *at;

	if (fd < 0 || fstat(fd, &sb) < 0 || strlen(from) != strlen(to))
		return -1;
	text = xmalloc((size_t)sb.st_size + 1);
	if (pread(fd, text, (size_t)sb.st_size, 0) != sb.st_size)
		return -1;
	text[sb.st_size] = '\0';
	if (!(at = strstr(text, from)) || (at != text && at[-1] != '\n'))
		return -1;
	return pwrite(fd, to, strlen(to), at - text) == (ssize_t)strlen(to) ? 0 : -1;
}

/*
 * /etc/passwd with ahead lines before the first fleet-pwc one: the host's,
 * then made-up users (uids above the test's range, no group needed) to
 * make up the number. Written aside and renamed over, as shadow does.
 * The number of lines ahead (the host's may be more), or -1.
 */
static int passwd_with_ahead(int ahead, long filler_uid)
{
	FILE *in = fopen("/etc/passwd", "re"), *out = fopen("/etc/passwd.pwc", "we");
	char line[512], ours[16][512];
	int n = 0, n_ours = 0, r = 0;

	if (!in || !out)
		r = -1;
	while (r == 0 && fgets(line, sizeof(line), in)) {
		if (strncmp(line, "fleet-pwc", 9) == 0) {
			if (n_ours < 16)
				memcpy(ours[n_ours++], line, sizeof(line));
		} else if (strncmp(line, "pwcfill", 7) != 0) {
			fputs(line, out);
			n++;
		}
	}
	for (int i = 0; r == 0 && n < ahead; i++, n++)
		fprintf(out, "pwcfill%d:x:%ld:%ld:filler:/nonexistent:/usr/sbin/nologin\n", i, filler_uid + i,
			filler_uid + i);
	for (int i = 0; i < n_ours; i++)
		fputs(ours[i], out);
	if (in)
		fclose(in);
	if (out && fclose(out) != 0)
		r = -1;
	if (r == 0 && (chmod("/etc/passwd.pwc", 0644) < 0 || rename("/etc/passwd.pwc", "/etc/passwd") < 0))
		r = -1;
	return r < 0 ? -1 : n;
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Per-lookup cost of getpwnam, of the cache's hit and of account_lookup, with ahead users before the agent's. */
static void measure(int ahead, long filler_uid)
{
	enum { K = 2000 };
	const char *home;
	uid_t u;
	gid_t g;
	double t0, t_pw, t_hit, t_acct, t_stat;
	struct stat sb;
	int bad = 0, n;

	if ((n = passwd_with_ahead(ahead, filler_uid)) < 0) {
		printf("# cannot write /etc/passwd with %d users ahead: not measured\n", ahead);
		return;
	}
	settle();
	t0 = now_us();
	for (int i = 0; i < K; i++)
		bad += !getpwnam("fleet-pwca");
	t_pw = (now_us() - t0) / K;
	(void)pwcache_get(account_pwcache(), "fleet-pwca", &u, &g, &home);
	t0 = now_us();
	for (int i = 0; i < K; i++)
		bad += pwcache_get(account_pwcache(), "fleet-pwca", &u, &g, &home) != 0;
	t_hit = (now_us() - t0) / K;
	t0 = now_us();
	for (int i = 0; i < K; i++)
		bad += account_lookup(&F, "pwca", &u) != 0;
	t_acct = (now_us() - t0) / K;
	t0 = now_us();
	for (int i = 0; i < K; i++)
		bad += stat("/etc/passwd", &sb) != 0;
	t_stat = (now_us() - t0) / K;
	printf("# %4d users ahead: getpwnam %.2f us, pwcache hit %.2f us, account_lookup (cached) %.2f us per lookup"
	       " (of it stat(/etc/passwd) %.2f us)%s\n", n, t_pw, t_hit, t_acct, t_stat, bad ? " (some lookups failed)" : "");
}

int main(void)
{
	static const char *const tools[] = { "useradd", "usermod", "userdel", "groupadd", "groupdel", NULL };
	_cleanup_free_ char *home_b = NULL;
	struct pwcache_stats s0, s1;
	struct etc_overlay eo;
	const char *why_c, *skip, *home;
	struct agent *a, *b;
	char *why = NULL;
	uid_t uid = 0, u = 0;
	gid_t g;
	long min, uid_b;
	int r;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if ((skip = etc_overlay_enter(&eo, "pwc", 4400000, tools)))
		tap_skip_all(skip);
	if (etc_overlay_config(&eo, &F.cfg) < 0)
		return 1;
	min = eo.uid_min;

	/* fleet's own useradd drops the cache. */
	a = mk_agent("pwca");
	s0 = stats();
	r = account_check_free(&F, a, &why);
	if (r == 0)
		r = account_create(&F, a, &uid, &why);
	is_int(r, 0, "account_create pwca (%s)", why ? why : "no error");
	if (r < 0) {
		etc_overlay_leave(&eo);
		return tap_done();
	}
	s1 = stats();
	ok(s1.drops > s0.drops && s1.entries == 0, "its useradd dropped the cache (drops %lu -> %lu)", s0.drops,
	   s1.drops);

	/* A hit: the second lookup of a settled file. */
	settle();
	s0 = stats();
	is_int(account_lookup(&F, "pwca", &u), 0, "pwca looked up");
	is_int(u, uid, "its uid");
	s1 = stats();
	ok(s1.fills == s0.fills + 1 && s1.entries == 1, "the entry is kept");
	u = 0;
	is_int(account_lookup(&F, "pwca", &u), 0, "looked up again");
	is_int(u, uid, "the same uid");
	s0 = stats();
	ok(s0.hits == s1.hits + 1 && s0.fills == s1.fills, "from the cache (a hit, no fill)");

	/* The checks run on a cached entry: a range that no longer holds the uid. */
	{
		_cleanup_free_ char *above = xasprintf("%ld", (long)uid + 1), *back = xasprintf("%ld", min);

		config_set(&F.cfg, CFG_USER_UID_MIN, above, CFG_FROM_CMDLINE, 0, &why_c);
		is_int(account_lookup(&F, "pwca", &u), -EPERM, "with uid_min above its uid, the cached entry is refused");
		s1 = stats();
		ok(s1.hits == s0.hits + 1, "and that was a hit: the check ran on the cached values");
		config_set(&F.cfg, CFG_USER_UID_MIN, back, CFG_FROM_CMDLINE, 0, &why_c);
	}

	/* A miss is never kept: made by hand after it, the user is found at once. */
	uid_b = min + 90;
	s0 = stats();
	is_int(account_lookup(&F, "pwcb", &u), -ENOENT, "pwcb: no such user");
	is_int(account_lookup(&F, "pwcb", &u), -ENOENT, "still none");
	s1 = stats();
	ok(s1.misses == s0.misses + 2 && s1.entries == s0.entries && s1.hits == s0.hits,
	   "both were misses, neither kept (%zu entries)", s1.entries);
	home_b = xasprintf("%s/users/pwcb", eo.state_dir);
	is_int(sh("groupadd -g %ld fleet-pwcb && useradd --system -M -N -l -u %ld -g %ld -d %s -s /usr/sbin/nologin "
		  "fleet-pwcb", uid_b, uid_b, uid_b, home_b), 0, "fleet-pwcb made by hand (uid %ld)", uid_b);
	u = 0;
	is_int(account_lookup(&F, "pwcb", &u), 0, "found at the next lookup");
	is_int(u, uid_b, "with its uid");

	/* usermod (a new file renamed over /etc/passwd) drops the cache. */
	settle();
	(void)account_lookup(&F, "pwca", &u);
	s0 = stats();
	is_int(account_lookup(&F, "pwca", &u), 0, "pwca again");
	s1 = stats();
	ok(s1.hits == s0.hits + 1, "a hit");
	is_int(sh("usermod -c 'changed by hand' fleet-pwca"), 0, "usermod -c on fleet-pwca");
	s0 = stats();
	is_int(account_lookup(&F, "pwca", &u), 0, "pwca after the usermod");
	s1 = stats();
	ok(s1.drops == s0.drops + 1 && s1.hits == s0.hits, "the change dropped the cache: looked up anew");
	is_str(getpwnam("fleet-pwca") ? getpwnam("fleet-pwca")->pw_gecos : NULL, "changed by hand",
	       "(the change is in /etc/passwd)");

	/* A uid changed by hand in place: same inode, same size, only the times tell. */
	settle();
	(void)account_lookup(&F, "pwca", &u);
	s0 = stats();
	is_int(account_lookup(&F, "pwca", &u), 0, "pwca, settled");
	s1 = stats();
	ok(s1.hits == s0.hits + 1 && u == uid, "a hit, uid %ld", (long)u);
	{
		struct stat before, after;
		long new_uid = min + 95;

		ok(stat("/etc/passwd", &before) == 0 && edit_ids_in_place("fleet-pwca", (long)uid, new_uid) == 0 &&
		   stat("/etc/passwd", &after) == 0, "uid and gid of fleet-pwca edited by hand: %ld -> %ld",
		   (long)uid, new_uid);
		ok(before.st_ino == after.st_ino && before.st_size == after.st_size,
		   "the same file, the same size (only its times changed)");
		u = 0;
		is_int(account_lookup(&F, "pwca", &u), 0, "pwca after the edit");
		is_int(u, new_uid, "the new uid is returned");
		s0 = stats();
		ok(s0.drops == s1.drops + 1, "the cache was dropped");
		ok(edit_ids_in_place("fleet-pwca", new_uid, (long)uid) == 0, "and edited back to %ld", (long)uid);
		is_int(account_lookup(&F, "pwca", &u), 0, "pwca");
		is_int(u, uid, "its old uid again, at once");
	}

	/* account_pwcache_drop: the next lookup reads the file again. */
	settle();
	(void)account_lookup(&F, "pwca", &u);
	s0 = stats();
	ok(s0.entries >= 1, "an entry is kept");
	account_pwcache_drop();
	s1 = stats();
	ok(s1.drops == s0.drops + 1 && s1.entries == 0, "account_pwcache_drop: nothing is kept");
	is_int(account_lookup(&F, "pwca", &u), 0, "pwca after it");
	s0 = stats();
	ok(s0.fills == s1.fills + 1 && s0.hits == s1.hits, "read again (a fill, no hit)");

	/* fleet's own userdel drops it. */
	b = mk_agent("pwcb");
	(void)account_lookup(&F, "pwcb", &u);
	s0 = stats();
	is_int(account_remove(&F, b, (uid_t)uid_b, &why), 0, "account_remove pwcb (%s)", why ? why : "no error");
	s1 = stats();
	ok(s1.drops > s0.drops, "its userdel dropped the cache");
	is_int(account_lookup(&F, "pwcb", &u), -ENOENT, "pwcb is gone at once");
	agent_free(b);

	/* Bounded: a cache of 2 with 3 names keeps at most 2. */
	{
		struct pwcache *c = pwcache_new(2);
		struct pwcache_stats cs;
		static const char *const names[] = { "root", "fleet-pwca", "root", "fleet-pwca", NULL };
		int bad = 0;

		settle();
		for (const char *const *n = names; *n; n++)
			bad += pwcache_get(c, *n, &u, &g, &home) != 0;
		if (getpwnam("nobody"))
			bad += pwcache_get(c, "nobody", &u, &g, &home) != 0;
		pwcache_get_stats(c, &cs);
		ok(!bad && cs.hits == 2 && cs.entries <= 2, "a cache of 2: hits %lu, %zu entries", cs.hits, cs.entries);
		bad = pwcache_get(c, "root", &u, &g, &home) != 0 || u != 0 || strcmp(home, "/root") != 0;
		ok(!bad, "root after it was full: uid 0, home %s", home);
		pwcache_free(c);
	}

	/* What a lookup costs (comments, no assertion). */
	measure(30, min + 200000);
	measure(1000, min + 200000);

	free(why);
	why = NULL;
	(void)passwd_with_ahead(0, 0);
	is_int(account_remove(&F, a, uid, &why), 0, "account_remove pwca (%s)", why ? why : "no error");
	agent_free(a);
	free(why);
	account_pwcache_free();
	etc_overlay_leave(&eo);
	return tap_done();
}
