/*
 * user/memfs.c: a user agent's memory store is a file system of its own, so
 * the kernel holds every write to the quota (#12), the agent's own included.
 *
 * <state_dir>/memfs                0700 root
 *   NAME.img                       ext4, root's 0600; loop-mounted on <home>/memory
 *   NAME.img.new                   an image being built (restore, migration); never mounted on a home
 *   .NAME.stage/                   where a new image is mounted while it is filled
 *
 * The image is outside the home: the agent can neither reach nor replace it.
 * The mount target is opened with O_NOFOLLOW from the home's fd and mounted
 * through /proc/self/fd, so a link the agent planted at ~/memory redirects
 * nothing; a non-directory there is removed first. Loop devices are
 * autoclear: unmounting (also the kernel at a reboot) frees them.
 * Everything here is short and synchronous (mkfs of at most 256 MiB), run on
 * the loop at provision, destroy, init and quota changes, and on a snapshot
 * worker for a restore's new image.
 */
#include "user/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "model/agent.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "user/snapshot.h"

#define LOOP_MAJOR_NR 7
#define MIB (1LL << 20)

long long memfs_quota(const struct agent *a)
{
	return (long long)(a->memory_quota_mib > 0 ? a->memory_quota_mib : MEMORY_QUOTA_DEFAULT) << 20;
}

char *memfs_dir(struct fleetd *f)
{
	return xasprintf("%s/memfs", config_get(&f->cfg, CFG_STATE_DIR));
}

static char *image_path(const char *dir, const char *agent, const char *suffix)
{
	return xasprintf("%s/%s.img%s", dir, agent, suffix);
}

/* Attach img to a free loop device (autoclear); its fd, or -errno. */
static int loop_attach(const char *img, char **why)
{
	_cleanup_close_ int ifd = open(img, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	int r = 0;

	if (ifd < 0 || ctl < 0) {
		r = -errno;
		*why = xasprintf("cannot open %s: %s", ifd < 0 ? img : "/dev/loop-control", strerror(-r));
		return r;
	}
	for (int tries = 0; tries < 20; tries++) {
		struct loop_config cfg = { .fd = (unsigned)ifd, .info.lo_flags = LO_FLAGS_AUTOCLEAR };
		char dev[32];
		int n = ioctl(ctl, LOOP_CTL_GET_FREE), lfd;

		if (n < 0) {
			r = -errno;
			break;
		}
		snprintf(dev, sizeof(dev), "/dev/loop%d", n);
		if ((lfd = open(dev, O_RDWR | O_CLOEXEC)) < 0) {
			r = -errno;
			break;
		}
		snprintf((char *)cfg.info.lo_file_name, sizeof(cfg.info.lo_file_name), "%s", img);
		if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0)
			return lfd;
		r = -errno;
		close(lfd);
		if (r != -EBUSY)
			break;	/* EBUSY: another process took that device first */
	}
	*why = xasprintf("cannot attach %s to a loop device: %s", img, strerror(-r));
	return r;
}

/* The loop device under a mounted image (its fd), checked to be it. */
static int loop_of(int mnt, char **why)
{
	struct stat st, ds;
	char dev[32];
	int lfd;

	if (fstat(mnt, &st) < 0)
		return -errno;
	snprintf(dev, sizeof(dev), "/dev/loop%u", minor(st.st_dev));
	if ((lfd = open(dev, O_RDWR | O_CLOEXEC)) < 0 || fstat(lfd, &ds) < 0 || ds.st_rdev != st.st_dev) {
		int r = lfd < 0 ? -errno : -ENODEV;
		if (lfd >= 0)
			close(lfd);
		*why = xasprintf("cannot find the loop device of the memory store: %s", strerror(-r));
		return r;
	}
	return lfd;
}

/* Is dir (opened) the root of img's loop mount? 1 yes, 0 it is no mount point, -EEXIST something else is mounted. */
static int mounted_here(int parent, int dir, const char *img)
{
	struct stat ps, ds;
	char sys[96], backing[4096];
	_cleanup_close_ int fd = -1;
	ssize_t n;

	if (fstat(parent, &ps) < 0 || fstat(dir, &ds) < 0)
		return -errno;
	if (ps.st_dev == ds.st_dev)
		return 0;
	if (major(ds.st_dev) != LOOP_MAJOR_NR)
		return -EEXIST;
	snprintf(sys, sizeof(sys), "/sys/dev/block/%u:%u/loop/backing_file", major(ds.st_dev), minor(ds.st_dev));
	if ((fd = open(sys, O_RDONLY | O_CLOEXEC)) < 0 || (n = read(fd, backing, sizeof(backing) - 1)) <= 0)
		return -EEXIST;
	backing[n] = '\0';
	if (backing[n - 1] == '\n')
		backing[n - 1] = '\0';
	return strcmp(backing, img) == 0 ? 1 : -EEXIST;
}

/* mount(2) on an fd's directory itself: a path would be resolved again, links and all. */
static int mount_on_fd(const char *dev, int target)
{
	char p[40];

	snprintf(p, sizeof(p), "/proc/self/fd/%d", target);
	return mount(dev, p, "ext4", MS_NOSUID | MS_NODEV, "") < 0 ? -errno : 0;
}

static int umount_fd(int target)
{
	char p[40];

	snprintf(p, sizeof(p), "/proc/self/fd/%d", target);
	/*
	 * detach: a sandbox that still holds a copy of the mount (the agent's
	 * own, a build thread's for a moment, any when users/ is no mount
	 * point) keeps it until it ends; the loop clears then
	 */
	return umount2(p, MNT_DETACH) < 0 ? -errno : 0;
}

/*
 * Grow the mounted file system until it can take quota bytes of data: the
 * image is sized to the quota first, then by what ext4's own metadata took,
 * online (loop capacity, resize2fs). So the kernel's limit is the quota, to
 * within a MiB, and what agentd counts and what fits agree.
 */
static int fit(int mnt, const char *img, long long quota, char **why)
{
	_cleanup_close_ int lfd = -1;

	for (int i = 0; i < 4; i++) {
		struct statvfs sv;
		struct stat st;
		long long avail, grow;
		char dev[32];
		_cleanup_free_ char *out = NULL;

		if (fstatvfs(mnt, &sv) < 0)
			return -errno;
		avail = (long long)sv.f_blocks * (long long)sv.f_frsize;	/* capacity for data: statfs leaves out ext4's metadata */
		if (avail >= quota)
			return 0;
		grow = (quota - avail + MIB - 1) / MIB * MIB;
		if (lfd < 0 && (lfd = loop_of(mnt, why)) < 0)
			return lfd;
		_cleanup_close_ int ifd = open(img, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (ifd < 0 || fstat(ifd, &st) < 0 || (errno = posix_fallocate(ifd, 0, st.st_size + grow)) != 0 ||
		    ioctl(lfd, LOOP_SET_CAPACITY, 0) < 0) {
			int r = -errno;
			*why = xasprintf("cannot grow %s: %s", img, strerror(-r));
			return r;
		}
		fstat(mnt, &st);
		snprintf(dev, sizeof(dev), "/dev/loop%u", minor(st.st_dev));
		const char *const argv[] = { "resize2fs", dev, NULL };
		int r = account_run_tool(argv, &out);
		if (r != 0) {
			*why = xasprintf("resize2fs %s failed: %s", dev, r < 0 ? strerror(-r) : out && *out ? out : "no message");
			return -EIO;
		}
	}
	*why = xstrdup("cannot make the memory store's file system as large as its quota");
	return -ENOSPC;
}

/* The root of a fresh or remounted store: the agent's, 0700, without mkfs's lost+found. */
static int own_root(int mnt, uid_t uid)
{
	if (fchown(mnt, uid, uid) < 0 || fchmod(mnt, 0700) < 0)
		return -errno;
	(void)unlinkat(mnt, "lost+found", AT_REMOVEDIR);	/* fails, and stays, if fsck put something there */
	return 0;
}

/* A new image file sized to quota, ext4; -errno with *why. */
static int make_image(const char *img, long long quota, char **why)
{
	_cleanup_free_ char *out = NULL;
	_cleanup_close_ int fd = -1;
	int r;

	(void)unlink(img);	/* a leftover of an earlier agent of this name or of a killed build */
	fd = open(img, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	/*
	 * Allocated, not sparse: a write into the store never needs room on the
	 * host's file system, which may be full (ext4 would turn read-only on
	 * the loop's write error).
	 */
	if (fd < 0 || (errno = posix_fallocate(fd, 0, quota)) != 0) {
		r = -errno;
		*why = xasprintf("cannot create %s: %s", img, strerror(-r));
		return r;
	}
	/* -m 0: no blocks reserved for root, none of the quota is out of the agent's reach */
	/* 4 KiB blocks: the kernel resizes no 1 KiB-block ext4 online, which mkfs picks for small ones */
	/* nodiscard: mkfs would punch the allocated blocks out of the image again */
	const char *const argv[] = { "mkfs.ext4", "-q", "-F", "-m", "0", "-b", "4096", "-E", "nodiscard", "-L", "fleet-memory",
				     img, NULL };
	if ((r = account_run_tool(argv, &out)) != 0) {
		*why = xasprintf("mkfs.ext4 %s failed: %s", img, r < 0 ? strerror(-r) : out && *out ? out : "no message");
		(void)unlink(img);
		return -EIO;
	}
	return 0;
}

/*
 * Mount img on dir (an fd: name in parent), fit it to quota, hand its root
 * to uid. A store that was not cleanly unmounted (a host crash) is checked
 * first: e2fsck -p repairs what is safe to, anything worse is refused.
 */
static int mount_image(const char *img, int parent, const char *name, int dir, uid_t uid, long long quota,
		       char **why)
{
	_cleanup_close_ int lfd = loop_attach(img, why), mnt = -1;
	char dev[32];
	struct stat st;
	int r;

	if (lfd < 0)
		return lfd;
	if (fstat(lfd, &st) < 0)
		return -errno;
	{
		_cleanup_free_ char *out = NULL;
		snprintf(dev, sizeof(dev), "/dev/loop%u", minor(st.st_rdev));
		const char *const argv[] = { "e2fsck", "-p", dev, NULL };
		if ((r = account_run_tool(argv, &out)) < 0 || r >= 4) {
			*why = xasprintf("e2fsck %s (%s) found errors it cannot repair alone: %s", dev, img,
					 r < 0 ? strerror(-r) : out && *out ? out : "no message");
			return -EIO;
		}
	}
	snprintf(dev, sizeof(dev), "/dev/loop%u", minor(st.st_rdev));
	if ((r = mount_on_fd(dev, dir)) < 0) {
		*why = xasprintf("cannot mount %s: %s", img, strerror(-r));
		return r;
	}
	/*
	 * The mount holds the loop device now; closing lfd leaves it attached
	 * until the unmount. dir itself is the covered directory: the root is
	 * the name looked up again (a mount point cannot be renamed or removed),
	 * checked to be the loop's.
	 */
	struct stat ms;
	mnt = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (mnt >= 0 && (fstat(mnt, &ms) < 0 || ms.st_dev != st.st_rdev)) {
		close(mnt);
		mnt = -1;
		errno = EXDEV;
	}
	if (mnt < 0 || (r = own_root(mnt, uid)) < 0 || (quota > 0 && (r = fit(mnt, img, quota, why)) < 0)) {
		if (mnt < 0 || r == 0)
			r = -errno;
		if (!*why)
			*why = xasprintf("cannot set up the memory store on %s: %s", img, strerror(-r));
		(void)umount_fd(dir);
		return r;
	}
	return 0;
}

/*
 * The home's memory directory, opened without following a link: whatever
 * else the agent left under that name (a link, a file) is removed and a
 * directory made, the agent's, 0700.
 */
static int open_target(int home, uid_t uid, char **why)
{
	int fd = openat(home, "memory", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;

	if (fd < 0 && (errno == ELOOP || errno == ENOTDIR || errno == ENOENT)) {
		if (errno != ENOENT && unlinkat(home, "memory", 0) < 0 && errno != ENOENT)
			goto fail;
		if ((mkdirat(home, "memory", 0700) < 0 && errno != EEXIST) ||
		    fchownat(home, "memory", uid, uid, AT_SYMLINK_NOFOLLOW) < 0)
			goto fail;
		fd = openat(home, "memory", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0 || fstat(fd, &st) < 0)
		goto fail;
	return fd;
fail:;
	int r = -errno;
	if (fd >= 0)
		close(fd);
	*why = xasprintf("cannot open the home's memory directory: %s", strerror(-r));
	return r;
}

static int open_home(struct fleetd *f, const char *agent, char **why)
{
	_cleanup_free_ char *home = account_home_dir(f, agent);
	int fd = open(home, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0) {
		int r = -errno;
		*why = xasprintf("cannot open home %s: %s", home, strerror(-r));
		return r;
	}
	return fd;
}

/*
 * Unmount the stage (nothing of ours is open on it any more). A sandbox's
 * clone copies fleetd's fd table, and so holds whatever another thread of
 * ours had open on the stage until its close_range: the umount would fail
 * EBUSY meanwhile (issue #16: a restore failed so while spares were made).
 * user_launch_clones_wait() outlasts every such clone. Other children of
 * fleetd (a spawned tool, a helper) hold their copy from their fork to
 * their exec, too briefly to track one by one: a few tries cover them.
 */
static int umount_stage(const char *stage)
{
	user_launch_clones_wait();
	for (int tries = 0;; tries++) {
		if (umount2(stage, UMOUNT_NOFOLLOW) == 0)
			return 0;
		if (errno != EBUSY || tries == 20)
			return -errno;
		usleep(5000);
	}
}

/*
 * Build NAME.img.new holding a copy of src_name in src_dir (or nothing: NULL):
 * mounted on a staging directory, filled with the snapshot copier (no link
 * followed, owners, modes and times kept), synced and unmounted again.
 * Runs in a mount namespace of its own (build_thread).
 */
static int build_staged(const char *memdir, const char *agent, uid_t uid, long long quota, int src_dir,
			const char *src_name, char **why)
{
	_cleanup_free_ char *img = image_path(memdir, agent, ".new");
	_cleanup_free_ char *stage = xasprintf("%s/.%s.stage", memdir, agent);
	_cleanup_free_ char *stage_name = xasprintf(".%s.stage", agent);
	_cleanup_close_ int sfd = -1, cfd = -1, mfd = -1;
	struct user_snapshot_stats stats;
	int r;

	if ((r = account_private_dir(memdir, why)) < 0)
		return r;
	(void)umount2(stage, MNT_DETACH | UMOUNT_NOFOLLOW);	/* a killed build's */
	(void)rmdir(stage);
	if (mkdir(stage, 0700) < 0 || (sfd = open(stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    (mfd = open(memdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		r = -errno;
		*why = xasprintf("cannot create %s: %s", stage, strerror(-r));
		goto fail;
	}
	/*
	 * Sized so that the file system holds the quota of data, no more: the
	 * image is made at the quota, what ext4's own metadata took measured
	 * (statfs leaves it out) and the image made again that much larger.
	 */
	for (long long size = quota, tries = 0;; tries++) {
		struct statvfs sv;
		long long cap;

		if ((r = make_image(img, size, why)) < 0)
			goto fail;
		if ((r = mount_image(img, mfd, stage_name, sfd, uid, 0, why)) < 0)
			goto fail;
		close(sfd);
		sfd = open(stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);	/* the mounted root now */
		if (sfd < 0 || fstatvfs(sfd, &sv) < 0) {
			r = -errno;
			goto fail_mounted;
		}
		cap = (long long)sv.f_blocks * (long long)sv.f_frsize;
		if (cap >= quota)
			break;
		if (tries == 3) {
			r = -ENOSPC;
			*why = xasprintf("cannot make a file system that holds %lld bytes", quota);
			goto fail_mounted;
		}
		size += (quota - cap + MIB - 1) / MIB * MIB;
		close(sfd);
		sfd = -1;
		if ((r = umount_stage(stage)) < 0)
			goto fail_mounted;
		if ((sfd = open(stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
			r = -errno;
			goto fail_mounted;
		}
	}
	if (src_name) {
		struct user_snapshot_copy c = { .src_dir = src_dir, .src_name = src_name, .dst_dir = sfd,
						.dst_name = ".fill", .prev_fd = -1 };
		struct stat st;
		DIR *d;
		struct dirent *de;

		if ((r = user_snapshot_copy(&c, &stats, why)) < 0)
			goto fail_mounted;
		/* the copy's entries up into the root, then the root gets the copy's owner, mode and times */
		if ((cfd = openat(sfd, ".fill", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
		    fstat(cfd, &st) < 0 || !(d = fdopendir(dup(cfd)))) {
			r = -errno;
			goto fail_mounted;
		}
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
			    renameat(cfd, de->d_name, sfd, de->d_name) < 0) {
				r = -errno;
				closedir(d);
				goto fail_mounted;
			}
		closedir(d);
		close(cfd);	/* nothing of the new file system may stay open: it is unmounted below */
		cfd = -1;
		struct timespec ts[2] = { st.st_atim, st.st_mtim };
		if (unlinkat(sfd, ".fill", AT_REMOVEDIR) < 0 || fchown(sfd, uid, uid) < 0 ||
		    fchmod(sfd, st.st_mode & 07777) < 0 || futimens(sfd, ts) < 0) {
			r = -errno;
			goto fail_mounted;
		}
	}
	if (syncfs(sfd) < 0) {
		r = -errno;
		goto fail_mounted;
	}
	close(sfd);
	sfd = -1;
	if ((r = umount_stage(stage)) < 0) {
		*why = xasprintf("cannot unmount %s: %s", stage, strerror(-r));
		goto fail;
	}
	(void)rmdir(stage);
	return 0;
fail_mounted:
	if (!*why)
		*why = xasprintf("cannot fill the new memory store: %s", strerror(-r));
	if (sfd >= 0)
		close(sfd);
	sfd = -1;
	(void)umount2(stage, MNT_DETACH | UMOUNT_NOFOLLOW);
fail:
	(void)rmdir(stage);
	(void)unlink(img);
	return r;
}

int memfs_mount(struct fleetd *f, const char *agent, uid_t uid, long long quota, char **why)
{
	_cleanup_free_ char *dir = memfs_dir(f), *img = image_path(dir, agent, "");
	_cleanup_close_ int home = open_home(f, agent, why), target = -1;
	int r;

	if (home < 0)
		return home;
	if ((target = open_target(home, uid, why)) < 0)
		return target;
	if ((r = mounted_here(home, target, img)) == 1)
		return 0;
	if (r < 0) {
		*why = xasprintf("something other than its store is mounted on the home's memory directory: %s",
				 strerror(-r));
		return r;
	}
	(void)quota;	/* sized when built (memfs_build) */
	return mount_image(img, home, "memory", target, uid, 0, why);
}

struct build_args {
	const char *memdir, *users_dir, *netns_dir, *agent, *src_name;
	uid_t uid;
	long long quota;
	int src_dir, r;
	char **why;
};

/*
 * The stage is mounted in a mount namespace of this thread's own, never in
 * fleetd's: so no sandbox cloned meanwhile (a spare, an exec's, a keeper)
 * gets a copy of it, which would keep the new image's file system alive
 * beside the one mounted on the home once it is swapped in (two ext4
 * instances on one file), and a fleetd killed during the build leaves no
 * stage mounted: the namespace ends with the thread.
 */
static void *build_thread(void *arg)
{
	struct build_args *b = arg;

	/* "none": ignored for a propagation change, but a NULL type reads as a bad pointer to valgrind */
	if (unshare(CLONE_FS | CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0) {
		b->r = -errno;
		*b->why = xasprintf("cannot make a mount namespace for the build: %s", strerror(-b->r));
		return NULL;
	}
	/*
	 * Nor does the build hold the stores (its copies of them would pin an
	 * old one unmounted meanwhile until the build ends): the users mount
	 * goes, every store with it (not one: EINVAL), and so does the netns
	 * mount with every agent's namespace. The source is an fd, opened in
	 * fleetd's namespace, whose lookups cross fleetd's mounts.
	 */
	if (b->users_dir)
		(void)umount2(b->users_dir, MNT_DETACH | UMOUNT_NOFOLLOW);
	if (b->netns_dir)
		(void)umount2(b->netns_dir, MNT_DETACH | UMOUNT_NOFOLLOW);
	b->r = build_staged(b->memdir, b->agent, b->uid, b->quota, b->src_dir, b->src_name, b->why);
	return NULL;
}

int memfs_build(const char *memdir, const char *users_dir, const char *netns_dir, const char *agent, uid_t uid,
		long long quota, int src_dir, const char *src_name, char **why)
{
	struct build_args b = { .memdir = memdir, .users_dir = users_dir, .netns_dir = netns_dir, .agent = agent,
				.src_name = src_name, .uid = uid, .quota = quota, .src_dir = src_dir, .why = why };
	sigset_t all, old;
	pthread_t t;
	int r;

	/* Signals are the loop thread's: the build blocks them all. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&t, NULL, build_thread, &b);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0) {
		*why = xasprintf("cannot start a thread for the build: %s", strerror(r));
		return -r;
	}
	pthread_join(t, NULL);
	return b.r;
}

int memfs_umount(struct fleetd *f, const char *agent, char **why_out)
{
	_cleanup_free_ char *own_why = NULL;
	char **why = why_out ? why_out : &own_why;
	_cleanup_free_ char *dir = memfs_dir(f), *img = image_path(dir, agent, "");
	_cleanup_close_ int home = open_home(f, agent, why), target = -1;
	int r;

	if (home == -ENOENT) {
		free(*why);	/* no home, so nothing mounted on it: not an error, and its message is no one's */
		*why = NULL;
		return 0;
	}
	if (home < 0)
		return home;
	target = openat(home, "memory", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (target < 0 || mounted_here(home, target, img) != 1)
		return 0;	/* not mounted (a link or nothing there is not a mount either) */
	/*
	 * The agent's spare has a copy of the store's mount, which would keep
	 * the old file system alive after a restore, a resize or a removal: it
	 * goes. No other sandbox has one (init.c drops the other agents' stores
	 * from below the users mount), unless the users dir is no mount point:
	 * then every spare has a copy of every store (its namespace is a copy
	 * of fleetd's), and they all go; keepers and commands keep theirs.
	 */
	if (us && us->users_mnt && account_mount_point(us->users_mnt))
		spare_drop(agent);
	else
		spares_drop_all();
	if ((r = umount_fd(target)) < 0)
		*why = xasprintf("cannot unmount the memory store: %s", strerror(-r));
	return r;
}

int memfs_create(struct fleetd *f, const char *agent, uid_t uid, long long quota, char **why)
{
	_cleanup_free_ char *dir = memfs_dir(f);
	_cleanup_free_ char *users = account_users_dir(f), *nsdir = netns_dir(f);
	_cleanup_free_ char *img = image_path(dir, agent, ""), *tmp = image_path(dir, agent, ".new");
	int r;

	if ((r = memfs_build(dir, users, nsdir, agent, uid, quota, -1, NULL, why)) == 0) {
		if (rename(tmp, img) < 0) {
			r = -errno;
			*why = xasprintf("cannot rename %s: %s", tmp, strerror(-r));
		} else {
			r = memfs_mount(f, agent, uid, quota, why);
		}
	}
	return r;
}

/*
 * At fleetd's start (after a reboot, or an unmount by hand): mount each
 * store that is not. An agent from before stores were file systems has no
 * image: one is built from its memory directory (copied, links not
 * followed), the directory emptied and the image mounted on it.
 */
int memfs_ensure(struct fleetd *f, const char *agent, uid_t uid, long long quota, char **why)
{
	_cleanup_free_ char *dir = memfs_dir(f);
	_cleanup_free_ char *users = account_users_dir(f), *nsdir = netns_dir(f);
	_cleanup_free_ char *img = image_path(dir, agent, ""), *tmp = image_path(dir, agent, ".new");
	_cleanup_free_ char *home = account_home_dir(f, agent), *mem = xasprintf("%s/memory", home), *out = NULL;
	_cleanup_close_ int hfd = -1;
	int r = 0;

	if (access(img, F_OK) < 0) {
		if ((hfd = open_home(f, agent, why)) < 0) {
			r = hfd;
			goto out;
		}
		if ((r = memfs_build(dir, users, nsdir, agent, uid, quota, hfd, "memory", why)) < 0)
			goto out;
		const char *const argv[] = { "rm", "-rf", "--one-file-system", "--", mem, NULL };
		if ((r = account_run_tool(argv, &out)) != 0 || rename(tmp, img) < 0) {
			*why = xasprintf("cannot move the memory store of %s into its file system: %s", agent,
					 r ? (out && *out ? out : "rm failed") : strerror(errno));
			r = -EIO;
			goto out;
		}
		log_info("agent '%s': memory store moved into its own file system (%s)", agent, img);
	}
	r = memfs_mount(f, agent, uid, quota, why);
out:
	return r;
}

/*
 * At fleetd's start, before any store is used: what a fleetd killed during
 * a build left (a resize's, a restore's, a migration's) goes, so it holds no
 * room on the state dir until that agent's next build. A stage is removed
 * (unmounted first, detached, if an older fleetd, which mounted stages in
 * its own namespace, left it mounted; a build's namespace ended with it), a
 * NAME.img.new removed: no build is under way yet, and none is ever
 * finished from its .new (a restore is done again from its snapshot). A
 * completed store, NAME.img, is never touched.
 */
void memfs_sweep(struct fleetd *f)
{
	_cleanup_free_ char *dir = memfs_dir(f);
	_cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d;
	struct dirent *de;

	if (dfd < 0 || !(d = fdopendir(dup(dfd))))
		return;	/* no store was ever made (or the directory is unreadable: builds will say so) */
	while ((de = readdir(d))) {
		const char *n = de->d_name;
		size_t len = strlen(n);

		if (n[0] == '.' && len > 7 && strcmp(n + len - 6, ".stage") == 0) {
			_cleanup_free_ char *p = xasprintf("%s/%s", dir, n);
			if (umount2(p, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
				log_info("user backend: unmounted %s, the stage of a build a killed fleetd left", p);
			else if (errno != EINVAL)	/* EINVAL: not mounted */
				log_warning("user backend: cannot unmount %s: %s", p, strerror(errno));
			if (unlinkat(dfd, n, AT_REMOVEDIR) < 0)
				log_warning("user backend: cannot remove %s: %s", p, strerror(errno));
		} else if (n[0] != '.' && len > 8 && strcmp(n + len - 8, ".img.new") == 0) {
			log_info("user backend: removing %s/%s, the image of a build a killed fleetd left", dir, n);
			if (unlinkat(dfd, n, 0) < 0)
				log_warning("user backend: cannot remove %s/%s: %s", dir, n, strerror(errno));
		}
	}
	closedir(d);
}

int memfs_remove(struct fleetd *f, const char *agent, char **why_out)
{
	_cleanup_free_ char *own_why = NULL;
	char **why = why_out ? why_out : &own_why;
	_cleanup_free_ char *dir = memfs_dir(f), *img = image_path(dir, agent, ""), *tmp = image_path(dir, agent, ".new");
	int r = memfs_umount(f, agent, why);

	if (r < 0)
		return r;
	(void)unlink(tmp);
	if (unlink(img) < 0 && errno != ENOENT) {
		r = -errno;
		*why = xasprintf("cannot remove %s: %s", img, strerror(-r));
	}
	return r;
}

int memfs_swap_in(struct fleetd *f, const char *agent, char **why)
{
	_cleanup_free_ char *dir = memfs_dir(f), *img = image_path(dir, agent, ""), *tmp = image_path(dir, agent, ".new");
	_cleanup_close_ int dfd = -1;

	if (rename(tmp, img) < 0) {
		int r = -errno;
		*why = xasprintf("cannot rename %s: %s", tmp, strerror(-r));
		return r;
	}
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0)
		(void)fsync(dfd);
	return 0;
}

/*
 * set --memory-quota. A running agent's store can only grow, online
 * (loop capacity, resize2fs: needs CAP_SYS_RESOURCE); a stopped agent's is
 * built again at the new size from what it holds (the snapshot copier, no
 * link followed) and swapped in, which shrinks it too, or fails with
 * -ENOSPC and changes nothing when the store holds more than that.
 */
int memfs_resize(struct fleetd *f, const char *agent, uid_t uid, long long old_quota, long long quota, bool running,
		 char **why)
{
	_cleanup_free_ char *dir = memfs_dir(f), *img = image_path(dir, agent, "");
	_cleanup_free_ char *users = account_users_dir(f), *nsdir = netns_dir(f);
	_cleanup_close_ int home = -1, target = -1;
	int r;

	if ((r = memfs_mount(f, agent, uid, old_quota, why)) < 0)
		return r;
	if ((home = open_home(f, agent, why)) < 0)
		return home;
	if (running) {
		_cleanup_free_ char *gwhy = NULL;

		if (quota < old_quota) {
			*why = xstrdup("a running agent's memory store cannot shrink; stop the agent first");
			return -EBUSY;
		}
		if ((target = open_target(home, uid, why)) < 0)
			return target;
		if ((r = fit(target, img, quota, &gwhy)) < 0) {
			*why = xasprintf("cannot grow the memory store online (%s); stop the agent first",
					 gwhy ? gwhy : strerror(-r));
			return -EBUSY;
		}
		return 0;
	}
	if ((r = memfs_build(dir, users, nsdir, agent, uid, quota, home, "memory", why)) < 0) {
		if (r == -ENOSPC) {
			free(*why);
			*why = xasprintf("the memory store holds more than %lld MiB; remove some of it first", quota >> 20);
		}
		return r;
	}
	if ((r = memfs_umount(f, agent, why)) < 0 || (r = memfs_swap_in(f, agent, why)) < 0)
		return r;
	return memfs_mount(f, agent, uid, quota, why);
}
