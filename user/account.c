/*
 * user/account.c: the Unix side of a user agent: its user and group
 * fleet-NAME (uid == gid, from user_uid_min..user_uid_max, never handed out
 * twice: the high-water mark), its home <state_dir>/users/NAME with memory/
 * and work/, and their removal. It also runs the backend's host tools
 * (useradd, userdel, rm) through backend/spawn with a fixed environment,
 * and makes fleet's own root-only directories in the state dir.
 *
 * It must never touch a user, group or directory it did not create: a
 * fleet-NAME that is not in the uid range or whose home is elsewhere is
 * someone else's and is left alone.
 */
#include "user/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/spawn.h"
#include "common/log.h"
#include "common/util.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "user/backend.h"
#include "user/pwcache.h"

static const char *const tool_path_dirs[] = { "/usr/sbin", "/sbin", "/usr/bin", "/bin", NULL };

char *account_user_name(const char *agent)
{
	return xasprintf(USER_PREFIX "%s", agent);
}

char *account_users_dir(struct fleetd *f)
{
	return xasprintf("%s/users", config_get(&f->cfg, CFG_STATE_DIR));
}

char *account_home_dir(struct fleetd *f, const char *agent)
{
	return xasprintf("%s/users/%s", config_get(&f->cfg, CFG_STATE_DIR), agent);
}

char *account_find_tool(const char *name)
{
	return spawn_which(name, tool_path_dirs);
}

/*
 * Run a host tool (useradd, rm, ...) with a fixed environment; returns its
 * exit status (or 128+signal), with the end of what it printed in *out.
 * Short and synchronous, as backend.h allows for provision and destroy;
 * the snapshot workers use it too.
 */
int account_run_tool(const char *const *argv, char **out)
{
	static const char *const env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL };
	const struct spawn_opts o = { .envp = env, .search = tool_path_dirs, .output_max = 4095, .keep_tail = true };
	int r = spawn_tool(argv, &o, out);
	size_t len;

	if (r >= 0 && *out) {
		len = strlen(*out);
		while (len > 0 && (*out)[len - 1] == '\n')
			(*out)[--len] = '\0';
	}
	return r;
}

/*
 * shadow's tools (useradd, groupadd, userdel, groupdel) refuse at once,
 * "cannot lock /etc/group; try again later." (exit 10, or 1 for passwd),
 * while another of them holds the lock file, for the few milliseconds its
 * own change takes (a second fleetd, an admin, parallel tests). So such a
 * refusal is tried again after 25, 50, ... 1000 ms: LOCK_TRIES runs over
 * about 5.6 s at most, on the loop (provision and destroy are synchronous),
 * no longer than glibc's lckpwdf() waits inside the tool itself.
 */
#define LOCK_TRIES 11
#define LOCK_BACKOFF_MS 25
#define LOCK_BACKOFF_MAX_MS 1000

/* Run a tool and fold a failure into *why; 0 or the (positive) exit status. */
static int tool(char **why, const char *const *argv)
{
	_cleanup_free_ char *out = NULL;
	int r, delay = LOCK_BACKOFF_MS;

	for (int attempt = 1;; attempt++) {
		free(out);
		out = NULL;
		r = account_run_tool(argv, &out);
		if (r <= 0 || !out || !strstr(out, "cannot lock ") || attempt == LOCK_TRIES)
			break;
		log_info("user: %s: %s (attempt %d of %d; again in %d ms)", argv[0], out, attempt, LOCK_TRIES, delay);
		(void)usleep((useconds_t)delay * 1000);
		delay = delay * 2 > LOCK_BACKOFF_MAX_MS ? LOCK_BACKOFF_MAX_MS : delay * 2;
	}
	if (r < 0) {
		if (why && !*why)
			*why = xasprintf("cannot run %s: %s", argv[0], strerror(-r));
		return 126;
	}
	if (r != 0) {
		log_debug("user: %s exited %d: %s", argv[0], r, out ? out : "");
		if (why && !*why && out && strstr(out, "cannot lock "))
			*why = xasprintf("%s failed (exit %d): %s (still locked after %d tries over about 5 s)", argv[0], r,
					 out, LOCK_TRIES);
		else if (why && !*why)
			*why = xasprintf("%s failed (exit %d): %s", argv[0], r, out && *out ? out : "no message");
	}
	return r;
}

/*
 * The passwd entries of the agents' users, kept between lookups (pwcache.h:
 * dropped when /etc/passwd changes, and here whenever fleet runs useradd or
 * userdel). Only account_lookup reads it, on fleetd's loop thread, as every
 * caller of it runs there (user/internal.h); freed at the backend's
 * shutdown.
 */
#define ACCOUNT_PWCACHE_MAX 4096
static struct pwcache *pwc;

struct pwcache *account_pwcache(void)
{
	if (!pwc)
		pwc = pwcache_new(ACCOUNT_PWCACHE_MAX);
	return pwc;
}

void account_pwcache_drop(void)
{
	pwcache_drop(pwc);
}

void account_pwcache_free(void)
{
	pwcache_free(pwc);
	pwc = NULL;
}

/*
 * The passwd entry of an agent's user, if it is fleet's: in the uid range,
 * gid == uid, home where fleet puts it. -ENOENT when there is no such user,
 * -EPERM when the name belongs to someone else. The entry may be the
 * cache's; these checks run on it every time (the range is configuration).
 */
int account_lookup(struct fleetd *f, const char *agent, uid_t *uid)
{
	_cleanup_free_ char *name = account_user_name(agent), *home = account_home_dir(f, agent);
	long min = config_get_long(&f->cfg, CFG_USER_UID_MIN), max = config_get_long(&f->cfg, CFG_USER_UID_MAX);
	const char *pw_home;
	uid_t pw_uid;
	gid_t pw_gid;
	int r;

	if ((r = pwcache_get(account_pwcache(), name, &pw_uid, &pw_gid, &pw_home)) < 0)
		return r;
	if ((long)pw_uid < min || (long)pw_uid > max || pw_gid != pw_uid || strcmp(pw_home, home) != 0)
		return -EPERM;
	*uid = pw_uid;
	return 0;
}

static int cmp_id(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;

	return (x > y) - (x < y);
}

struct id_set {
	long *v;
	size_t n, cap;
};

static void id_add(struct id_set *s, long id, long min, long max)
{
	if (id < min || id > max)
		return;
	if (s->n == s->cap)
		s->v = xrealloc(s->v, (s->cap = s->cap ? 2 * s->cap : 64) * sizeof(*s->v));
	s->v[s->n++] = id;
}

/* The first id in [min, max] that is neither a uid nor a gid; -ENOSPC. min may lie above max. */
static int pick_id(long min, long max, long *ret)
{
	struct id_set used = { 0 };
	struct passwd *pw;
	struct group *gr;
	long want = min;

	setpwent();
	while ((pw = getpwent()))
		id_add(&used, (long)pw->pw_uid, min, max);
	endpwent();
	setgrent();
	while ((gr = getgrent()))
		id_add(&used, (long)gr->gr_gid, min, max);
	endgrent();
	if (used.n)
		qsort(used.v, used.n, sizeof(*used.v), cmp_id);
	for (size_t i = 0; i < used.n && used.v[i] <= want; i++)
		if (used.v[i] == want)
			want++;
	free(used.v);
	if (want > max)
		return -ENOSPC;
	*ret = want;
	return 0;
}

/*
 * The uid high-water mark: <state_dir>/user-uid-next holds the lowest uid
 * this fleetd may still hand out. Uids are never reused: a new agent must
 * not inherit what a removed one left anywhere on the host under its uid
 * (files in shared places, a stray process). It is raised, durably, before
 * useradd runs. Missing: nothing handed out yet (or a state dir from before
 * the mark existed).
 */
static char *uid_mark_path(struct fleetd *f)
{
	return xasprintf("%s/user-uid-next", config_get(&f->cfg, CFG_STATE_DIR));
}

/* The mark in *ret (0 if there is none yet); -errno with *why if it cannot be read or makes no sense. */
static int uid_mark_read(struct fleetd *f, long *ret, char **why)
{
	_cleanup_free_ char *path = uid_mark_path(f);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	char buf[32], *end;
	struct stat st;
	ssize_t n;
	long v;

	*ret = 0;
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0 || fstat(fd, &st) < 0 || (n = read(fd, buf, sizeof(buf) - 1)) < 0) {
		int r = -errno;
		*why = xasprintf("cannot read %s: %s", path, strerror(-r));
		return r;
	}
	buf[n] = '\0';
	errno = 0;
	v = strtol(buf, &end, 10);
	if (!S_ISREG(st.st_mode) || st.st_uid != 0 || errno || end == buf || (*end && *end != '\n') || v < 0) {
		*why = xasprintf("%s is not root's file holding a uid; fix or remove it", path);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

/* Set the mark to next: written aside, synced, renamed over, directory synced. */
static int uid_mark_write(struct fleetd *f, long next, char **why)
{
	_cleanup_free_ char *path = uid_mark_path(f), *tmp = xasprintf("%s.tmp", path), *text = xasprintf("%ld\n", next);
	_cleanup_free_ char *dir = xstrdup(config_get(&f->cfg, CFG_STATE_DIR));
	_cleanup_close_ int dfd = -1;
	int fd, r = 0;

	(void)unlink(tmp);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
		r = -errno;
	else {
		if (write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0)
			r = -errno;
		if (close(fd) < 0 && r == 0)
			r = -errno;
	}
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r == 0 && ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || fsync(dfd) < 0))
		r = -errno;
	if (r < 0) {
		(void)unlink(tmp);
		*why = xasprintf("cannot record the next free uid in %s: %s", path, strerror(-r));
	}
	return r;
}

void account_sweep(struct fleetd *f)
{
	_cleanup_free_ char *path = uid_mark_path(f), *tmp = xasprintf("%s.tmp", path);

	/* A fleetd killed between writing the mark aside and renaming it: the mark itself is intact. */
	if (unlink(tmp) == 0)
		log_info("user backend: removed %s, left by an interrupted write", tmp);
}

/*
 * dir: a real directory, root's, with exactly mode (made if missing). Opened
 * without following a link, so the mode is set on what was checked. 0 or
 * -errno with *why.
 */
static int root_dir(const char *dir, mode_t mode, char **why)
{
	_cleanup_close_ int fd = -1;
	struct stat st;
	int r;

	if (mkdir(dir, mode) < 0 && errno != EEXIST) {
		r = -errno;
		*why = xasprintf("cannot create %s: %s", dir, strerror(-r));
		return r;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0) {
		*why = xasprintf("%s is not a directory owned by root", dir);
		return -EPERM;
	}
	/* mkdir's mode went through the umask; an old one may have been looser. */
	if ((st.st_mode & 07777) != mode && fchmod(fd, mode) < 0) {
		r = -errno;
		*why = xasprintf("cannot chmod %s: %s", dir, strerror(-r));
		return r;
	}
	return 0;
}

/* <state_dir>/users: agents traverse it, cannot list it. */
static int ensure_users_dir(struct fleetd *f, char **why)
{
	_cleanup_free_ char *dir = account_users_dir(f);

	return root_dir(dir, 0711, why);
}

bool account_mount_point(const char *dir)
{
	struct statx sx, px;
	_cleanup_free_ char *parent = xasprintf("%s/..", dir);

	if (statx(AT_FDCWD, dir, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &sx) < 0)
		return false;
	if (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)
		return (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
	return (sx.stx_mask & STATX_MNT_ID) && statx(AT_FDCWD, parent, 0, STATX_MNT_ID, &px) == 0 &&
	       (px.stx_mask & STATX_MNT_ID) && px.stx_mnt_id != sx.stx_mnt_id;
}

/*
 * What an older fleetd mounted at lower/NAME/sub (NAME/ itself: sub NULL)
 * in the mount below dir's own mount (lower: dir opened before that went on
 * top): their copies above, made with it, hold the same file systems (or
 * namespaces), so these only pin them. Detached through the fd: no path
 * reaches below a mount.
 */
static void own_mount_drop_below(const char *dir, int lower, const char *sub, const char *what)
{
	const char *base = strrchr(dir, '/');
	_cleanup_close_ int dfd = dup(lower);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	struct dirent *de;
	int n = 0;

	if (!d)
		return;
	dfd = -1;	/* the DIR has it */
	while ((de = readdir(d))) {
		char p[64 + 256];

		if (de->d_name[0] == '.')
			continue;	/* ".", "..", the trash: never an agent's */
		snprintf(p, sizeof(p), "/proc/self/fd/%d/%s%s%s", lower, de->d_name, sub ? "/" : "", sub ? sub : "");
		if (umount2(p, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
			n++;
	}
	closedir(d);
	if (n > 0)
		log_info("user backend: %d %s%s moved into the %s mount", n, what, n == 1 ? "" : "s", base ? base + 1 : dir);
}

int account_own_mount(const char *dir, const char *sub, const char *what, char **why)
{
	_cleanup_close_ int lower = -1, tree = -1;
	int r;

	if (account_mount_point(dir))
		return 0;	/* ours from an earlier start (also a killed one), or one of the host's */
	/*
	 * A copy of the directory and whatever is mounted below it (what an
	 * older fleetd mounted there), attached on top of it: those stay the
	 * same file systems or namespaces, never mounted twice.
	 */
	if ((lower = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    (tree = (int)open_tree(AT_FDCWD, dir, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE |
					       AT_SYMLINK_NOFOLLOW)) < 0 ||
	    move_mount(tree, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) < 0) {
		r = -errno;
		*why = xasprintf("cannot make %s a mount point: %s", dir, strerror(-r));
		return r;
	}
	own_mount_drop_below(dir, lower, sub, what);
	log_info("user backend: %s is a mount of its own (sandboxes keep no other agent's %s)", dir, what);
	return 0;
}

int account_users_mount(struct fleetd *f, char **why)
{
	_cleanup_free_ char *dir = account_users_dir(f);
	int r;

	if ((r = root_dir(dir, 0711, why)) < 0)
		return r;
	return account_own_mount(dir, "memory", "memory store", why);
}

static int make_home(const char *home, uid_t uid, char **why)
{
	static const char *const subdirs[] = { "memory", "work" };
	_cleanup_close_ int fd = -1;
	int r;

	if (mkdir(home, 0700) < 0) {
		r = -errno;
		*why = r == -EEXIST ? xasprintf("home %s already exists", home)
				    : xasprintf("cannot create home %s: %s", home, strerror(-r));
		return r;
	}
	fd = open(home, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fchown(fd, uid, uid) < 0 || fchmod(fd, 0700) < 0)
		goto fail;
	for (size_t i = 0; i < ARRAY_SIZE(subdirs); i++)
		if (mkdirat(fd, subdirs[i], 0700) < 0 || fchownat(fd, subdirs[i], uid, uid, AT_SYMLINK_NOFOLLOW) < 0 ||
		    fchmodat(fd, subdirs[i], 0700, 0) < 0)
			goto fail;
	return 0;
fail:
	r = -errno;
	*why = xasprintf("cannot set up home %s: %s", home, strerror(-r));
	return r;
}

/* Remove a home tree as root without following links or leaving the file system. */
static int remove_home(const char *home, char **why)
{
	const char *const argv[] = { "rm", "-rf", "--one-file-system", "--", home, NULL };

	return tool(why, argv) == 0 ? 0 : -EIO;
}

static int remove_user(const char *user, char **why)
{
	const char *const del_user[] = { "userdel", user, NULL };
	const char *const del_group[] = { "groupdel", user, NULL };
	int r = 0;

	account_pwcache_drop();	/* whatever happens below, the user's entry is not to be trusted */
	if (getpwnam(user) && tool(why, del_user) != 0)
		r = -EIO;
	if (getgrnam(user) && tool(why, del_group) != 0)
		r = -EIO;
	return r;
}

int account_check_free(struct fleetd *f, const struct agent *a, char **why)
{
	_cleanup_free_ char *user = account_user_name(a->name), *home = account_home_dir(f, a->name);
	int r;

	if (strlen(a->name) > USER_AGENT_NAME_MAX) {
		*why = xasprintf("name is too long for a user agent (at most %d characters, so that '%s' + name "
				 "is a valid user name)", USER_AGENT_NAME_MAX, USER_PREFIX);
		return -ENAMETOOLONG;
	}
	if (getpwnam(user)) {
		*why = xasprintf("a system user '%s' already exists", user);
		return -EEXIST;
	}
	if (getgrnam(user)) {
		*why = xasprintf("a system group '%s' already exists", user);
		return -EEXIST;
	}
	if ((r = ensure_users_dir(f, why)) < 0)
		return r;
	if (access(home, F_OK) == 0) {
		*why = xasprintf("home %s already exists", home);
		return -EEXIST;
	}
	return 0;
}

int account_create(struct fleetd *f, const struct agent *a, uid_t *uid, char **why)
{
	_cleanup_free_ char *user = account_user_name(a->name), *home = account_home_dir(f, a->name);
	long min = config_get_long(&f->cfg, CFG_USER_UID_MIN), max = config_get_long(&f->cfg, CFG_USER_UID_MAX);
	long id = 0, mark = 0, from = min;
	int r;

	if ((r = uid_mark_read(f, &mark, why)) < 0)
		return r;
	if (mark > from)
		from = mark;
	/* Another fleetd may take the same id between the scan and useradd: try the next one. */
	for (int attempt = 0;; attempt++, from = id + 1) {
		char ids[32];
		_cleanup_free_ char *gecos = xasprintf("fleet agent %s", a->name);

		if (pick_id(from, max, &id) < 0) {
			*why = xasprintf("no free uid/gid left in user_uid_min..user_uid_max (%ld..%ld): the uids of removed "
					 "agents are never handed out again; widen the range", min, max);
			return -ENOSPC;
		}
		/* Burnt before use: a crash after useradd must not hand this uid out twice. */
		if ((r = uid_mark_write(f, id + 1, why)) < 0)
			return r;
		snprintf(ids, sizeof(ids), "%ld", id);
		const char *const groupadd[] = { "groupadd", "-g", ids, user, NULL };
		const char *const useradd[] = {
			"useradd", "--system", "-u", ids, "-g", ids, "-M", "-N", "-l",
			"-d", home, "-s", "/usr/sbin/nologin", "-c", gecos, user, NULL,
		};
		_cleanup_free_ char *gwhy = NULL, *uwhy = NULL;

		r = tool(&gwhy, groupadd);
		if (r == 4 && attempt < 8)	/* GID not unique */
			continue;
		if (r != 0) {
			*why = r == 9 ? xasprintf("a system group '%s' already exists", user) : TAKE_PTR(gwhy);
			return r == 9 ? -EEXIST : -EIO;
		}
		r = tool(&uwhy, useradd);
		account_pwcache_drop();	/* a new user, or what a failed useradd left */
		if (r == 0)
			break;
		(void)remove_user(user, NULL);	/* the group just made */
		if (r == 4 && attempt < 8)	/* UID already in use */
			continue;
		*why = r == 9 ? xasprintf("a system user '%s' already exists", user) : TAKE_PTR(uwhy);
		return r == 9 ? -EEXIST : -EIO;
	}

	if ((r = make_home(home, (uid_t)id, why)) < 0) {
		(void)remove_user(user, NULL);
		return r;
	}
	*uid = (uid_t)id;
	return 0;
}

void account_undo(struct fleetd *f, const struct agent *a)
{
	_cleanup_free_ char *user = account_user_name(a->name), *home = account_home_dir(f, a->name);

	(void)remove_home(home, NULL);
	(void)remove_user(user, NULL);
}

int account_remove(struct fleetd *f, const struct agent *a, uid_t uid, char **why)
{
	_cleanup_free_ char *user = account_user_name(a->name), *home = account_home_dir(f, a->name);
	struct stat st;
	int r, ret = 0;

	/* Only a home that belongs to the agent's uid is ours (a pre-existing one made provision fail). */
	if (uid != 0 && lstat(home, &st) == 0 && st.st_uid == uid && (r = remove_home(home, why)) < 0)
		ret = r;
	/*
	 * Its user was deleted by hand (the agent is 'missing'): the home is
	 * still ours if its owner is a uid of fleet's range that no user has
	 * any more (fleet never hands a uid out twice); anything else is left.
	 */
	if (uid == 0 && lstat(home, &st) == 0 && S_ISDIR(st.st_mode) &&
	    (long)st.st_uid >= config_get_long(&f->cfg, CFG_USER_UID_MIN) &&
	    (long)st.st_uid <= config_get_long(&f->cfg, CFG_USER_UID_MAX) && !getpwuid(st.st_uid) &&
	    (r = remove_home(home, ret ? NULL : why)) < 0 && ret == 0)
		ret = r;
	if (uid != 0 && (r = remove_user(user, ret ? NULL : why)) < 0 && ret == 0)
		ret = r;
	return ret;
}

int account_private_dir(const char *dir, char **why)
{
	return root_dir(dir, 0700, why);
}
