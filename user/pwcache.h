/*
 * user/pwcache.h: the passwd entries (uid, gid, home) of the users fleet
 * looks up on every verb, kept between lookups (issue #16: getpwnam reads
 * /etc/passwd again each time, ~3 us with 30 users ahead of the one looked
 * for, ~60 us with 1000; an exec looked its agent's user up at least once).
 *
 * A cached entry is what getpwnam said; it is used only while /etc/passwd
 * is the same file as when it was read: its device, inode, size, mtime and
 * ctime, taken by one stat() per lookup. Any difference (shadow's tools
 * rename a new file over it; an edit by hand changes the times) drops the
 * whole cache. A file changed less than PWCACHE_SETTLE_S ago fills
 * nothing: its times could still equal those of a later change made within
 * the same clock tick. A miss (no such user, an error) is never kept: a
 * user made by hand is seen at the next lookup. Callers that change users
 * themselves (user/account.c: useradd, userdel) also drop it outright.
 *
 * Entries come from getpwnam, so from whatever nsswitch.conf says; only
 * /etc/passwd is watched. A user served by another source (LDAP, userdb)
 * is cached until the next drop or change of /etc/passwd; fleet's own
 * users are made by useradd, in /etc/passwd.
 *
 * Bounded: at most the max given to pwcache_new entries (each a name and a
 * home); a fill when it is full drops them all first. Not thread-safe: one
 * cache is used from one thread only (fleetd's: the loop, see
 * user/internal.h), as getpwnam itself is not either.
 */
#ifndef FLEET_USER_PWCACHE_H
#define FLEET_USER_PWCACHE_H

#include <stddef.h>
#include <sys/types.h>

#define PWCACHE_PASSWD "/etc/passwd"
/* A passwd file whose mtime or ctime is this recent (or in the future) is not cached from. */
#define PWCACHE_SETTLE_S 1

struct pwcache;

/* What a cache did, for tests and benchmarks. */
struct pwcache_stats {
	unsigned long hits;	/* answered from the cache */
	unsigned long fills;	/* looked up and kept */
	unsigned long misses;	/* looked up and not kept: no such user, an error, a recent file, no stat */
	unsigned long drops;	/* the whole cache dropped: a change of the file, pwcache_drop, full */
	size_t entries;		/* kept now */
};

/* A cache of at most max (>= 1) entries; never fails (xmalloc). */
struct pwcache *pwcache_new(size_t max);
void pwcache_free(struct pwcache *c);

/*
 * The passwd entry of name: 0 with *uid, *gid and *home (the cache's, valid
 * until the next call on c), -ENOENT when there is no such user, -errno
 * when getpwnam failed.
 */
int pwcache_get(struct pwcache *c, const char *name, uid_t *uid, gid_t *gid, const char **home);

/* Forget every entry (users were changed: useradd, userdel). */
void pwcache_drop(struct pwcache *c);

void pwcache_get_stats(const struct pwcache *c, struct pwcache_stats *ret);

#endif
