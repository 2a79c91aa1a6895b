/* user/pwcache.c: see pwcache.h. */
#include "user/pwcache.h"

#include <errno.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/util.h"

struct pw_entry {
	struct pw_entry *next;	/* in its bucket */
	uid_t uid;
	gid_t gid;
	char *home;
	char name[];
};

/* What tells one /etc/passwd from another. */
struct pw_stamp {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
};

struct pwcache {
	struct pw_entry **buckets;
	size_t n_buckets;	/* a power of two */
	size_t max;
	struct pw_stamp stamp;	/* of the file the entries were read from */
	bool have_stamp;
	char *last_home;	/* the home of an answer not kept */
	struct pwcache_stats st;
};

struct pwcache *pwcache_new(size_t max)
{
	struct pwcache *c = xcalloc(1, sizeof(*c));

	c->max = max ? max : 1;
	c->n_buckets = 16;
	while (c->n_buckets < c->max && c->n_buckets < 4096)
		c->n_buckets *= 2;
	c->buckets = xcalloc(c->n_buckets, sizeof(*c->buckets));
	return c;
}

static void clear(struct pwcache *c)
{
	for (size_t i = 0; i < c->n_buckets; i++)
		while (c->buckets[i]) {
			struct pw_entry *e = c->buckets[i];

			c->buckets[i] = e->next;
			free(e->home);
			free(e);
		}
	c->st.entries = 0;
}

void pwcache_drop(struct pwcache *c)
{
	if (!c)
		return;
	clear(c);
	c->have_stamp = false;
	c->st.drops++;
}

void pwcache_free(struct pwcache *c)
{
	if (!c)
		return;
	clear(c);
	free(c->buckets);
	free(c->last_home);
	free(c);
}

void pwcache_get_stats(const struct pwcache *c, struct pwcache_stats *ret)
{
	*ret = c->st;
}

static size_t hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;	/* FNV-1a */

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return (size_t)h;
}

static bool ts_eq(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

static bool stamp_eq(const struct pw_stamp *a, const struct pw_stamp *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size && ts_eq(&a->mtime, &b->mtime) &&
	       ts_eq(&a->ctime, &b->ctime);
}

/* Changed less than PWCACHE_SETTLE_S ago, or in the future (a clock set back): a change to come could look the same. */
static bool stamp_recent(const struct pw_stamp *s)
{
	struct timespec now;
	time_t newest = s->mtime.tv_sec > s->ctime.tv_sec ? s->mtime.tv_sec : s->ctime.tv_sec;

	if (clock_gettime(CLOCK_REALTIME, &now) < 0)
		return true;
	return newest >= now.tv_sec - PWCACHE_SETTLE_S;
}

int pwcache_get(struct pwcache *c, const char *name, uid_t *uid, gid_t *gid, const char **home)
{
	struct pw_stamp now = { 0 };
	struct pw_entry *e, **b = &c->buckets[hash(name) & (c->n_buckets - 1)];
	struct passwd *pw;
	struct stat sb;
	bool keep;
	size_t len;

	/* Stat first, read after: a change between the two shows in the next lookup's stat. */
	keep = stat(PWCACHE_PASSWD, &sb) == 0;
	if (keep) {
		now = (struct pw_stamp){ .dev = sb.st_dev, .ino = sb.st_ino, .size = sb.st_size, .mtime = sb.st_mtim,
					 .ctime = sb.st_ctim };
		keep = !stamp_recent(&now);
	}
	if (c->have_stamp && (!keep || !stamp_eq(&c->stamp, &now)))
		pwcache_drop(c);
	if (keep) {
		c->stamp = now;
		c->have_stamp = true;
		for (e = *b; e; e = e->next)
			if (strcmp(e->name, name) == 0) {
				c->st.hits++;
				*uid = e->uid;
				*gid = e->gid;
				*home = e->home;
				return 0;
			}
	}

	errno = 0;
	if (!(pw = getpwnam(name))) {
		c->st.misses++;
		return errno && errno != ENOENT && errno != ESRCH ? -errno : -ENOENT;
	}
	*uid = pw->pw_uid;
	*gid = pw->pw_gid;
	if (!keep) {
		c->st.misses++;
		free(c->last_home);
		*home = c->last_home = xstrdup(pw->pw_dir);
		return 0;
	}
	if (c->st.entries >= c->max) {
		clear(c);	/* full: start again, with the stamp kept */
		c->st.drops++;
	}
	len = strlen(name);
	e = xmalloc(sizeof(*e) + len + 1);
	memcpy(e->name, name, len + 1);
	e->uid = pw->pw_uid;
	e->gid = pw->pw_gid;
	e->home = xstrdup(pw->pw_dir);
	e->next = *b;
	*b = e;
	c->st.entries++;
	c->st.fills++;
	*home = e->home;
	return 0;
}
