/*
 * user_snapshot: the file-tree half of user-agent snapshots. It copies a
 * home into a snapshot, sharing what did not change with the previous
 * snapshot, and a snapshot back into a new home. The backend
 * (backend_user.c) decides when, where and with which processes frozen;
 * this file only knows how to copy a tree.
 *
 * Pure functions of their arguments (directory fds and options): no fleetd
 * state, no logging, no process started, so they run on a worker thread
 * and tests drive them directly. They never follow a symlink, never leave
 * the file system the tree starts on, and keep owners and modes exactly. A
 * restore (prev_fd -1) never hard-links out of the tree: every file of a
 * restored home is a new inode (or a reflink, which is copy-on-write), so
 * the agent cannot reach a snapshot through it.
 */
#ifndef FLEET_USER_SNAPSHOT_H
#define FLEET_USER_SNAPSHOT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>
#include <time.h>

/* Deepest directory nesting copied; deeper trees fail (3 fds are open per level). */
#define USER_SNAPSHOT_DEPTH_MAX 128

struct user_snapshot_copy {
	int src_dir;		/* src_name in src_dir is the tree to copy (a directory) */
	const char *src_name;
	int dst_dir;		/* dst_name in dst_dir is created; it must not exist */
	const char *dst_name;
	/*
	 * -1, or an earlier copy of the same tree whose files nobody writes (the
	 * previous snapshot): a regular file whose size, mtime (to the
	 * nanosecond), mode, uid and gid equal those of the file at the same
	 * path there, and whose mtime is before prev_before, is hard-linked to
	 * it instead of copied. prev_before is when that copy began, less a
	 * margin: a file written in the same clock tick as the copy began
	 * could change again without its mtime moving, so it is never trusted.
	 */
	int prev_fd;
	struct timespec prev_before;
	bool tolerant;		/* the tree may change under the walk: skip what vanishes or fails, never fail */
	bool top_root;		/* leave the top directory root:root 0700 (the caller hands it over later) */
	/*
	 * NULL, or the name of a directory right under the top that may be
	 * another file system (a user agent's memory store, user/memfs.c):
	 * it is walked too, where any other mount point is skipped.
	 */
	const char *mount_child;
	/* NULL, or the name of a directory right under the top that is created (owner, mode, times) but left empty */
	const char *empty_child;
	const atomic_bool *cancel;	/* NULL, or set to stop early with -ECANCELED */
};

/* What a copy did. bytes_added: blocks of the copies and directories it made (reflinks count nothing). */
struct user_snapshot_stats {
	long long files, dirs, symlinks, others;
	long long shared;	/* hard links to the previous snapshot */
	long long reflinked;	/* FICLONE: shares blocks, copy-on-write */
	long long copied;	/* plain copies (holes kept) */
	long long inner_links;	/* hard links inside the tree, kept as such */
	long long skipped;	/* sockets, device nodes, other file systems */
	long long bytes_added;
};

/* Copy a tree as described; 0, or -errno with *why naming the path (relative to the tree). */
int user_snapshot_copy(const struct user_snapshot_copy *c, struct user_snapshot_stats *st, char **why);

/*
 * What the tree in dir holds alone, in bytes of blocks: directories, and
 * every inode whose names are all inside it (what removing it would free).
 * For a new snapshot: what it added.
 */
int user_snapshot_usage(int dir, long long *ret);

/* The most recently completed snapshot in dir (entries not starting with '.', newest mtime); -ENOENT if none. */
int user_snapshot_newest(int dir, char **ret);

#endif
