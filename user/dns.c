/*
 * dns: the /etc/resolv.conf a NAT user agent's sandbox shows (see
 * model/resolvers.h). Made from the host's files again whenever one of
 * them changed (its inode, size or mtime), so a change of the host's
 * resolvers reaches the next sandbox without reading them at every launch
 * (an edit that keeps the size within one mtime tick, a few ms, is missed
 * until the next change: resolver files are not edited that way).
 */
#include "user/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "model/resolvers.h"

#define RESOLV_CONF "/etc/resolv.conf"
/* systemd-resolved's list of its upstream servers, when the host's resolv.conf names only its stub */
#define RESOLVED_UPSTREAM "/run/systemd/resolve/resolv.conf"
#define RESOLV_CONF_MAX (64 * 1024)

/* The servers path names; none when it cannot be read. A host file: its links are followed. */
static void servers_of(const char *path, struct resolvers *r)
{
	char *buf = xmalloc(RESOLV_CONF_MAX);
	size_t len = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	r->n = 0;
	if (fd < 0) {
		free(buf);
		return;
	}
	while (len < RESOLV_CONF_MAX && (n = read(fd, buf + len, RESOLV_CONF_MAX - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	resolvers_from_resolv_conf(buf, len, r);
	free(buf);
}

/* What user_resolv_conf last made, and from what: one per fleetd (its loop's thread only). */
struct file_sig {
	bool present;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};
static struct {
	char *text;	/* owned here; callers get copies */
	char *conf;	/* user_dns it was made for */
	struct file_sig sig[2];
} cache;

static struct file_sig sig_of(const char *path)
{
	struct stat st;
	struct file_sig s = { .present = false };

	if (stat(path, &st) == 0) {
		s.present = true;
		s.dev = st.st_dev;
		s.ino = st.st_ino;
		s.size = st.st_size;
		s.mtime = st.st_mtim;
	}
	return s;
}

static bool sig_equal(const struct file_sig *a, const struct file_sig *b)
{
	if (a->present != b->present)
		return false;
	return !a->present || (a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
			       a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec);
}

static char *make_resolv_conf(const char *conf)
{
	static bool warned;
	const char *why = NULL;
	struct resolvers r = { .n = 0 };

	if (strcmp(conf, "auto") != 0) {
		if (resolvers_parse(conf, &r, &why) == 0)	/* checked when the config was read */
			return resolvers_render(&r, "user_dns in fleetd.conf");
		log_warning("user_dns %s: %s", conf, why);
	}
	servers_of(RESOLV_CONF, &r);
	if (r.n > 0)
		return resolvers_render(&r, "the host's " RESOLV_CONF " without its loopback servers");
	servers_of(RESOLVED_UPSTREAM, &r);
	if (r.n > 0)
		return resolvers_render(&r, "systemd-resolved's upstream servers, " RESOLVED_UPSTREAM);
	if (!warned) {
		warned = true;
		log_warning("user agents with --network nat get no DNS server: the host's are all on its loopback; "
			    "set user_dns in fleetd.conf");
	}
	return resolvers_render(&r, "user_dns auto");
}

char *user_resolv_conf(struct fleetd *f)
{
	const char *conf = config_get(&f->cfg, CFG_USER_DNS);
	struct file_sig now[2] = { sig_of(RESOLV_CONF), sig_of(RESOLVED_UPSTREAM) };

	if (!cache.text || strcmp(cache.conf, conf) != 0 || !sig_equal(&now[0], &cache.sig[0]) ||
	    !sig_equal(&now[1], &cache.sig[1])) {
		free(cache.text);
		free(cache.conf);
		cache.text = make_resolv_conf(conf);
		cache.conf = xstrdup(conf);
		cache.sig[0] = now[0];
		cache.sig[1] = now[1];
	}
	return xstrdup(cache.text);
}
