/*
 * dns: the /etc/resolv.conf a NAT user agent's sandbox shows (see
 * model/resolvers.h). Read from the host's files at each launch, so a
 * change of the host's resolvers reaches the next sandbox.
 */
#include "user/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
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

char *user_resolv_conf(struct fleetd *f)
{
	static bool warned;
	const char *conf = config_get(&f->cfg, CFG_USER_DNS), *why = NULL;
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
