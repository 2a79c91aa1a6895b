/* hooks: see hooks.h. */
#include "core/hooks.h"

#include <errno.h>
#include <event2/event.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/base64.h"
#include "common/log.h"
#include "common/names.h"
#include "common/util.h"
#include "hooks/route.h"
#include "model/config.h"
#include "model/fleetd.h"
#include "store/db.h"

#define PRUNE_INTERVAL_S (24 * 3600)
#define DEDUP_KEEP_DAYS_MIN 7	/* a redelivery within a week is always recognised */

struct hooks {
	struct event *tick;
	void (*on_change)(struct fleetd *f);	/* the listener's: send the routes again */
};

void hooks_on_change(struct fleetd *f, void (*cb)(struct fleetd *f))
{
	if (f->hooks)
		f->hooks->on_change = cb;
}

void hooks_changed(struct fleetd *f)
{
	if (f->hooks && f->hooks->on_change)
		f->hooks->on_change(f);
}

static int fail(char **why, int r, const char *fmt, ...) _printf_(3, 4);
static int fail(char **why, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(why, fmt, ap) < 0)
		*why = NULL;
	va_end(ap);
	return r;
}

int hooks_secret_parse(enum hook_source source, const char *text, unsigned char **ret, size_t *len,
		       const char **why)
{
	size_t n = text ? strlen(text) : 0;

	if (source == HOOK_STANDARD) {
		if (n < 6 || strncmp(text, "whsec_", 6) != 0) {
			*why = "a Standard Webhooks secret is whsec_ followed by base64";
			return -EINVAL;
		}
		if (base64_decode(text + 6, n - 6, ret, len) < 0) {
			*why = "the part after whsec_ is not valid base64";
			return -EINVAL;
		}
		if (*len < HOOK_SECRET_MIN || *len > HOOK_SECRET_MAX) {
			explicit_bzero(*ret, *len);
			free(*ret);
			*ret = NULL;
			*why = "a whsec_ secret decodes to 16 to 512 bytes";
			return -EINVAL;
		}
		return 0;
	}
	if (n < HOOK_SECRET_MIN || n > HOOK_SECRET_MAX) {
		*why = "a secret is 16 to 512 bytes";
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)text[i] < 0x20 || text[i] == 0x7f) {
			*why = "a secret may not hold control characters (a newline inside it?)";
			return -EINVAL;
		}
	*ret = xmalloc(n);
	memcpy(*ret, text, n);
	*len = n;
	return 0;
}

/*
 * The base URL a route's sender is given: its own, else hooks_public_url,
 * else where the listener listens (a wildcard address as loopback), so that
 * with another port than 8470, or port 0, the URL printed works and Twilio's
 * signature covers the URL the sender was given. Allocated.
 */
static char *base_url(const struct fleetd *f, const char *public_url)
{
	const char *base = public_url && *public_url ? public_url : config_get(&f->cfg, CFG_HOOKS_PUBLIC_URL);
	const char *bound = f->hooks_bound;

	if (base && *base)
		return xstrdup(base);
	if (!*bound)
		return xstrdup(HOOKS_DEFAULT_PUBLIC_URL);
	if (strncmp(bound, "0.0.0.0:", 8) == 0)
		return xasprintf("http://127.0.0.1:%s", bound + 8);
	if (strncmp(bound, "[::]:", 5) == 0)
		return xasprintf("http://[::1]:%s", bound + 5);
	return xasprintf("http://%s", bound);
}

char *hooks_url(const struct fleetd *f, const char *public_url, const char *route)
{
	_cleanup_free_ char *base = base_url(f, public_url);

	return xasprintf("%s/hooks/%s", base, route);
}

/* A short printable word (prefix, delivery field): 1 to 64 of [A-Za-z0-9_.=:-]. */
static bool word_ok(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && n <= 64 &&
	       strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.=:-") == n;
}

/* Check the route settings of req against its source; 0 or -EINVAL with *why. */
static int check_settings(enum hook_source src, const struct hooks_add_req *req, char **why)
{
	const char *w;

	if (req->header && (src != HOOK_HMAC && src != HOOK_DATADOG))
		return fail(why, -EINVAL, "--header applies to hmac and datadog routes only");
	if (req->header && hook_header_check(req->header, &w) < 0)
		return fail(why, -EINVAL, "--header: %s", w);
	if ((req->encoding || req->prefix) && src != HOOK_HMAC)
		return fail(why, -EINVAL, "--encoding and --prefix apply to hmac routes only");
	if (req->encoding && strcmp(req->encoding, "hex") != 0 && strcmp(req->encoding, "base64") != 0)
		return fail(why, -EINVAL, "--encoding is hex or base64");
	if (req->prefix && !word_ok(req->prefix))
		return fail(why, -EINVAL, "--prefix is 1 to 64 letters, digits or '_.=:-'");
	if ((req->datadog_auth || req->delivery_field) && src != HOOK_DATADOG)
		return fail(why, -EINVAL, "--auth and --delivery-field apply to datadog routes only");
	if (req->datadog_auth && strcmp(req->datadog_auth, "header") != 0 && strcmp(req->datadog_auth, "basic") != 0)
		return fail(why, -EINVAL, "--auth is header or basic");
	if (req->datadog_auth && strcmp(req->datadog_auth, "basic") == 0 && req->header)
		return fail(why, -EINVAL, "--header is for --auth header only");
	if (req->delivery_field && !word_ok(req->delivery_field))
		return fail(why, -EINVAL, "--delivery-field is 1 to 64 letters, digits or '_.=:-'");
	if (req->public_url && config_defs[CFG_HOOKS_PUBLIC_URL].check(req->public_url, &w) < 0)
		return fail(why, -EINVAL, "--public-url %s", w);
	if (req->public_url && !*req->public_url)
		return fail(why, -EINVAL, "--public-url is empty");
	if (req->max_body && (req->max_body < 1024 || req->max_body > (16L << 20)))
		return fail(why, -EINVAL, "--max-body is a number of bytes from 1024 to 16777216");
	return 0;
}

static bool has_settings(const struct hooks_add_req *req)
{
	return req->header || req->encoding || req->prefix || req->datadog_auth || req->delivery_field ||
	       req->public_url || req->max_body;
}

static int create_route(struct fleetd *f, enum hook_source src, const char *name, const struct hooks_add_req *req,
			char **why)
{
	struct db_hook_route rt = {
		.name = (char *)name,
		.source = (char *)hook_source_to_string(src),
		.header = (char *)req->header,
		.encoding = (char *)req->encoding,
		.prefix = (char *)req->prefix,
		.datadog_auth = (char *)req->datadog_auth,
		.delivery_field = (char *)req->delivery_field,
		.public_url = (char *)req->public_url,
		.max_body = req->max_body ? req->max_body : HOOK_MAX_BODY_DEFAULT,
	};
	const char *w;
	int r;

	if (!req->secret)
		return fail(why, -EINVAL, "route '%s' does not exist: a new route needs its secret", name);
	if (hooks_secret_parse(src, req->secret, &rt.secret, &rt.secret_len, &w) < 0)
		return fail(why, -EINVAL, "%s", w);
	/* The sources' defaults, stored so the route keeps them whatever a later fleetd defaults to. */
	if (src == HOOK_HMAC && !rt.header)
		rt.header = "X-Signature";
	if (src == HOOK_DATADOG && !rt.delivery_field)
		rt.delivery_field = "id";
	if (src == HOOK_DATADOG && !rt.header && !(req->datadog_auth && strcmp(req->datadog_auth, "basic") == 0))
		rt.header = "X-Fleet-Secret";
	r = db_hook_route_insert(f->db, &rt, req->agent, req->events);
	explicit_bzero(rt.secret, rt.secret_len);
	free(rt.secret);
	if (r == -ENOENT)
		return fail(why, r, "agent '%s': no such agent", req->agent);
	if (r == -EEXIST)
		return fail(why, r, "route '%s' was just created by another call; try again", name);
	if (r < 0)
		return fail(why, r, "cannot store route '%s': %s", name, strerror(-r));
	log_info("webhook route '%s' (%s) created for agent '%s'", name, rt.source, req->agent);
	hooks_changed(f);
	return 0;
}

int hooks_add(struct fleetd *f, const struct hooks_add_req *req, char **route_ret, bool *created, char **why)
{
	_cleanup_(db_hook_route_freep) struct db_hook_route *rt = NULL;
	_cleanup_free_ char *name = NULL;
	struct agent *a = NULL;
	const char *w, *what;
	int src, r;

	if (agent_name_check(req->agent, &w) < 0)
		return fail(why, -EINVAL, "invalid agent name: %s", w);
	if ((src = hook_source_from_string(req->source)) < 0)
		return fail(why, -EINVAL, "unknown source '%s': github, slack, twilio, datadog, standard or hmac",
			    req->source);
	name = req->route ? xstrdup(req->route) : xasprintf("%s-%s", req->agent, req->source);
	if (hook_route_name_check(name, &w) < 0)
		return fail(why, -EINVAL, "invalid route name: %s", w);
	if (req->events && hook_events_check(req->events, &w) < 0)
		return fail(why, -EINVAL, "--events: %s", w);
	if ((r = check_settings((enum hook_source)src, req, why)) < 0)
		return r;
	if ((r = db_agent_get(f->db, req->agent, &a)) < 0)
		return fail(why, r, "agent '%s': %s", req->agent, r == -ENOENT ? "no such agent" : strerror(-r));
	agent_free(a);

	r = db_hook_route_get(f->db, name, &rt);
	if (r == -ENOENT) {
		if ((r = create_route(f, (enum hook_source)src, name, req, why)) < 0)
			return r;
		*created = true;
		*route_ret = TAKE_PTR(name);
		return 0;
	}
	if (r < 0)
		return fail(why, r, "cannot read route '%s': %s", name, strerror(-r));
	if (strcmp(rt->source, req->source) != 0)
		return fail(why, -EEXIST, "route '%s' exists for source %s, not %s", name, rt->source, req->source);
	if (req->secret)
		return fail(why, -EEXIST, "route '%s' exists and keeps its secret (change it with 'fleetctl hook rotate')",
			    name);
	if (has_settings(req))
		return fail(why, -EEXIST, "route '%s' exists: its settings were fixed when it was made", name);
	r = db_hook_subscribe(f->db, name, req->agent, req->events, &what);
	if (r == -EEXIST)
		return fail(why, r, "agent '%s' is already subscribed to route '%s'", req->agent, name);
	if (r == -ENOENT)
		return fail(why, r, "%s", strcmp(what, "route") == 0 ? "the route was just removed; try again"
								     : "no such agent");
	if (r < 0)
		return fail(why, r, "cannot subscribe '%s' to route '%s': %s", req->agent, name, strerror(-r));
	log_info("agent '%s' subscribed to webhook route '%s'", req->agent, name);
	hooks_changed(f);
	*created = false;
	*route_ret = TAKE_PTR(name);
	return 0;
}

int hooks_remove(struct fleetd *f, const char *route, const char *agent, bool *route_removed, char **why)
{
	const char *w;
	int r;

	if (hook_route_name_check(route, &w) < 0)
		return fail(why, -EINVAL, "invalid route name: %s", w);
	if (agent_name_check(agent, &w) < 0)
		return fail(why, -EINVAL, "invalid agent name: %s", w);
	r = db_hook_unsubscribe(f->db, route, agent, route_removed);
	if (r == -ENOENT)
		return fail(why, r, "agent '%s' is not subscribed to route '%s'", agent, route);
	if (r < 0)
		return fail(why, r, "cannot unsubscribe '%s' from route '%s': %s", agent, route, strerror(-r));
	log_info("agent '%s' unsubscribed from webhook route '%s'%s", agent, route,
		 *route_removed ? "; it was the last subscriber, the route is removed" : "");
	hooks_changed(f);
	return 0;
}

int hooks_set_events(struct fleetd *f, const char *route, const char *agent, const char *events, char **why)
{
	const char *w;
	int r;

	if (hook_route_name_check(route, &w) < 0)
		return fail(why, -EINVAL, "invalid route name: %s", w);
	if (agent_name_check(agent, &w) < 0)
		return fail(why, -EINVAL, "invalid agent name: %s", w);
	if (events && hook_events_check(events, &w) < 0)
		return fail(why, -EINVAL, "events: %s", w);
	r = db_hook_set_events(f->db, route, agent, events);
	if (r == -ENOENT)
		return fail(why, r, "agent '%s' is not subscribed to route '%s'", agent, route);
	if (r < 0)
		return fail(why, r, "cannot change the events of '%s' on route '%s': %s", agent, route, strerror(-r));
	log_info("agent '%s' takes %s%s of webhook route '%s'", agent, events ? "the events " : "every event",
		 events ? events : "", route);
	hooks_changed(f);
	return 0;
}

int hooks_rotate(struct fleetd *f, const char *route, const char *secret, long grace_s, time_t now, time_t *until,
		 char **why)
{
	_cleanup_(db_hook_route_freep) struct db_hook_route *rt = NULL;
	unsigned char *raw = NULL;
	size_t len = 0;
	const char *w;
	int src, r;

	if (hook_route_name_check(route, &w) < 0)
		return fail(why, -EINVAL, "invalid route name: %s", w);
	if (grace_s < 0 || grace_s > HOOKS_GRACE_MAX_S)
		return fail(why, -EINVAL, "the grace period is 0 to 30 days");
	if ((r = db_hook_route_get(f->db, route, &rt)) < 0)
		return fail(why, r, "route '%s': %s", route, r == -ENOENT ? "no such route" : strerror(-r));
	if ((src = hook_source_from_string(rt->source)) < 0)
		return fail(why, -EBADMSG, "route '%s' has the source '%s', which this fleetd does not know", route,
			    rt->source);
	if (hooks_secret_parse((enum hook_source)src, secret, &raw, &len, &w) < 0)
		return fail(why, -EINVAL, "%s", w);
	*until = now + grace_s;
	r = db_hook_rotate(f->db, route, raw, len, (int64_t)*until);
	explicit_bzero(raw, len);
	free(raw);
	if (r < 0)
		return fail(why, r, "route '%s': %s", route, r == -ENOENT ? "no such route" : strerror(-r));
	log_info("webhook route '%s': secret rotated; the previous one works for %ld more seconds", route, grace_s);
	hooks_changed(f);
	return 0;
}

void hooks_route_table_free(struct hooks_route_table *t)
{
	if (!t)
		return;
	db_hook_routes_free(t->rows);	/* wipes the secrets */
	for (size_t i = 0; i < t->n; i++)
		free(t->urls[i]);
	free(t->urls);
	free(t->routes);
	free(t);
}

int hooks_route_table(struct fleetd *f, time_t now, struct hooks_route_table **ret)
{
	struct hooks_route_table *t = xcalloc(1, sizeof(*t));
	size_t n = 0;
	int r;

	if ((r = db_hook_route_list(f->db, &t->rows, &n)) < 0) {
		free(t);
		return r;
	}
	t->routes = xcalloc(n ? n : 1, sizeof(*t->routes));
	t->urls = xcalloc(n ? n : 1, sizeof(*t->urls));
	for (size_t i = 0; i < n; i++) {
		struct db_hook_route *row = t->rows[i];
		struct hook_route *hr = &t->routes[t->n];
		int src = hook_source_from_string(row->source);

		if (src < 0 || !row->secret) {
			/* Never guess how to verify: the listener answers 404 for it, the log says why. */
			log_error("webhook route '%s': source '%s' unknown to this fleetd or no secret; not served",
				  row->name, row->source);
			continue;
		}
		t->urls[t->n] = base_url(f, row->public_url);
		*hr = (struct hook_route){
			.name = row->name,
			.source = (enum hook_source)src,
			.secrets = { row->secret },
			.secret_lens = { row->secret_len },
			.n_secrets = 1,
			.header = row->header,
			.encoding = row->encoding && strcmp(row->encoding, "base64") == 0 ? HOOK_BASE64 : HOOK_HEX,
			.prefix = row->prefix,
			.datadog_auth = row->datadog_auth && strcmp(row->datadog_auth, "basic") == 0
						? HOOK_DATADOG_BASIC : HOOK_DATADOG_HEADER,
			.delivery_field = row->delivery_field,
			.public_url = t->urls[t->n],
			.max_body = row->max_body,	/* the listener refuses a table without it */
		};
		if (row->prev_secret && row->prev_until > (int64_t)now) {
			hr->secrets[1] = row->prev_secret;
			hr->secret_lens[1] = row->prev_len;
			hr->n_secrets = 2;
		}
		t->n++;
	}
	*ret = t;
	return 0;
}

int hooks_prune(struct fleetd *f, time_t now)
{
	long days = config_get_long(&f->cfg, CFG_EVENTS_KEEP_DAYS);
	long key_days = days > DEDUP_KEEP_DAYS_MIN ? days : DEDUP_KEEP_DAYS_MIN;
	int events = 0, keys = 0, r;

	r = db_events_prune(f->db, (int64_t)now - days * 86400, (int64_t)now - key_days * 86400, &events, &keys);
	if (r < 0) {
		log_warning("cannot prune old webhook events: %s", strerror(-r));
		return r;
	}
	if (events || keys)
		log_info("pruned %d event(s) older than %ld days and %d delivery id(s) older than %ld days", events,
			 days, keys, key_days);
	return 0;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)hooks_prune(arg, time(NULL));
}

int hooks_init(struct fleetd *f)
{
	struct timeval tv = { .tv_sec = PRUNE_INTERVAL_S };
	struct hooks *h = xcalloc(1, sizeof(*h));

	if (!(h->tick = event_new(f->base, -1, EV_PERSIST, on_tick, f)) || event_add(h->tick, &tv) < 0) {
		if (h->tick)
			event_free(h->tick);
		free(h);
		log_error("cannot start the daily pruning of events");
		return -ENOMEM;
	}
	f->hooks = h;
	(void)hooks_prune(f, time(NULL));
	return 0;
}

void hooks_shutdown(struct fleetd *f)
{
	if (!f->hooks)
		return;
	event_free(f->hooks->tick);
	free(f->hooks);
	f->hooks = NULL;
}
