/*
 * api: see api.h. Everything that reaches fleetd's state from outside comes
 * through api_dispatch(): the caller is identified from the kernel, the
 * route decides the handler, and the handler validates every field before
 * any state changes. This file must never act on agents itself.
 */
#include "api.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "db.h"
#include "fleetd.h"
#include "log.h"
#include "names.h"

struct api {
	struct fleetd *fleetd;
	struct evhttp *http;
	char *socket_path;
	gid_t group;		/* (gid_t)-1: root only */
	size_t max_body;
};

/* exec carries the command's stdin in its body. */
#define EXEC_MAX_BODY (16u << 20)

struct route {
	const char *method;
	const char *pattern;	/* ":name" matches one path segment */
	void (*handler)(struct api_call *c);
	const char *action;	/* audit action for calls that change state */
	size_t max_body;	/* 0: the configured max_body_bytes */
};

static const struct route routes[] = {
	{ "GET", "/v1/status", api_status_get, NULL, 0 },
	{ "GET", "/v1/audit", api_audit_get, NULL, 0 },
	{ "GET", "/v1/agents", api_agents_list, NULL, 0 },
	{ "POST", "/v1/agents", api_agents_create, "agent.create", 0 },
	{ "GET", "/v1/agents/:name", api_agent_get, NULL, 0 },
	{ "DELETE", "/v1/agents/:name", api_agent_delete, "agent.remove", 0 },
	{ "PATCH", "/v1/agents/:name", api_agent_update, "agent.update", 0 },
	{ "POST", "/v1/agents/:name/health", api_agent_health, NULL, 0 },
	{ "POST", "/v1/agents/:name/start", api_agent_start, "agent.start", 0 },
	{ "POST", "/v1/agents/:name/stop", api_agent_stop, "agent.stop", 0 },
	{ "POST", "/v1/agents/:name/restart", api_agent_restart, "agent.restart", 0 },
	{ "POST", "/v1/agents/:name/exec", api_agent_exec, "agent.exec", EXEC_MAX_BODY },
	{ "GET", "/v1/agents/:name/console", api_agent_console, NULL, 0 },
	{ "GET", "/v1/agents/:name/snapshots", api_snapshots_list, NULL, 0 },
	{ "POST", "/v1/agents/:name/snapshots", api_snapshot_create, "snapshot.create", 0 },
	{ "DELETE", "/v1/agents/:name/snapshots/:snap", api_snapshot_delete, "snapshot.remove", 0 },
	{ "PATCH", "/v1/agents/:name/snapshots/:snap", api_snapshot_update, "snapshot.update", 0 },
	{ "POST", "/v1/agents/:name/restore", api_snapshot_restore, "snapshot.restore", 0 },
	{ "POST", "/v1/agents/:name/runs", api_run_trigger, "run.trigger", 0 },
	{ "GET", "/v1/agents/:name/runs", api_runs_list, NULL, 0 },
	{ "GET", "/v1/agents/:name/runs/:id", api_run_get, NULL, 0 },
	{ "POST", "/v1/agents/:name/upgrade", api_agent_upgrade, "agent.upgrade", 0 },
	{ "GET", "/v1/images", api_images_list, NULL, 0 },
	{ "DELETE", "/v1/images/:id", api_image_delete, "image.remove", 0 },
};

static const char *method_name(enum evhttp_cmd_type t)
{
	switch (t) {
	case EVHTTP_REQ_GET: return "GET";
	case EVHTTP_REQ_POST: return "POST";
	case EVHTTP_REQ_PUT: return "PUT";
	case EVHTTP_REQ_DELETE: return "DELETE";
	case EVHTTP_REQ_PATCH: return "PATCH";
	case EVHTTP_REQ_HEAD: return "HEAD";
	default: return "OTHER";
	}
}

/* Printable, bounded copy of something a caller sent, safe for logs and the audit table. */
static char *sanitize(const char *s)
{
	size_t n = s ? strnlen(s, 110) : 0;
	char *out = xmalloc(n + 1);

	for (size_t i = 0; i < n; i++)
		out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	out[n] = '\0';
	return out;
}

void api_audit(struct api_call *c, const char *outcome, const char *detail)
{
	_cleanup_free_ char *clean = sanitize(c->target ? c->target : c->param);
	int r;

	if (!c->action)
		return;
	r = db_audit_add(c->fleetd->db, (long)c->uid, c->action, clean, outcome, detail);
	if (r < 0)
		log_error("audit: cannot record %s of '%s' by uid %ld: %s", c->action, clean, (long)c->uid,
			  strerror(-r));
}

void api_reply(struct api_call *c, int status, json_t *body)
{
	struct evbuffer *buf = evbuffer_new();
	char *text = json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII);
	const char *reason = status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";

	if (!buf || !text)
		abort();
	evbuffer_add_printf(buf, "%s\n", text);
	if (c->action) {
		json_t *err = status >= 300 ? json_object_get(body, "error") : NULL;
		const char *outcome = status < 300 ? "ok" : status < 500 ? "refused" : "failed";

		api_audit(c, outcome, err ? json_string_value(err) : NULL);
	}
	evhttp_add_header(evhttp_request_get_output_headers(c->req), "Content-Type", "application/json");
	evhttp_send_reply(c->req, status, reason, buf);
	evbuffer_free(buf);
	free(text);
	json_decref(body);
	c->replied = true;
	if (c->deferred)
		free(c);
}

struct api_call *api_defer(struct api_call *c)
{
	struct api_call *d = xmalloc(sizeof(*d));

	*d = *c;
	d->deferred = true;
	d->replied = false;
	if (c->param) {
		snprintf(d->param_buf, sizeof(d->param_buf), "%s", c->param);
		d->param = d->param_buf;
	}
	if (c->param2) {
		snprintf(d->param2_buf, sizeof(d->param2_buf), "%s", c->param2);
		d->param2 = d->param2_buf;
	}
	if (c->target) {
		snprintf(d->target_buf, sizeof(d->target_buf), "%s", c->target);
		d->target = d->target_buf;
	}
	c->replied = true;	/* the answer is the deferred copy's to give */
	return d;
}

static void api_verror(struct api_call *c, int status, const char *code, const char *fmt, va_list ap)
{
	_cleanup_free_ char *msg = NULL;

	if (vasprintf(&msg, fmt, ap) < 0)
		abort();
	api_reply(c, status, json_pack("{s:s, s:s}", "error", msg, "code", code));
}

void api_error(struct api_call *c, int status, const char *code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	api_verror(c, status, code, fmt, ap);
	va_end(ap);
}

void api_error_errno(struct api_call *c, int r, const char *fmt, ...)
{
	int status = 500;
	const char *code = "internal";
	va_list ap;

	switch (-r) {
	case ENOENT: status = 404; code = "not_found"; break;
	case EEXIST: status = 409; code = "exists"; break;
	case EBUSY: status = 409; code = "busy"; break;
	case EINVAL: status = 400; code = "invalid"; break;
	case EACCES: case EPERM: status = 403; code = "forbidden"; break;
	case ENOSPC: status = 507; code = "no_space"; break;
	case EOPNOTSUPP: status = 501; code = "unsupported"; break;
	}
	va_start(ap, fmt);
	api_verror(c, status, code, fmt, ap);
	va_end(ap);
}

bool api_query(struct api_call *c, const char *key, char *buf, size_t len)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(c->req);
	const char *q = uri ? evhttp_uri_get_query(uri) : NULL;
	struct evkeyvalq kv = { 0 };
	const char *v;
	bool found = false;

	if (!q || evhttp_parse_query_str(q, &kv) < 0)
		return false;
	v = evhttp_find_header(&kv, key);
	if (v && strlen(v) < len) {
		memcpy(buf, v, strlen(v) + 1);
		found = true;
	}
	evhttp_clear_headers(&kv);
	return found;
}

json_t *api_body_object(struct api_call *c, const char *const *spec)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(c->req);
	const char *ctype = evhttp_find_header(evhttp_request_get_input_headers(c->req), "Content-Type");
	size_t len = evbuffer_get_length(in);
	size_t cap = c->max_body ? c->max_body : c->fleetd->api->max_body;
	json_error_t jerr;
	const char *key;
	json_t *obj, *val;

	if (ctype && strncmp(ctype, "application/json", 16) != 0) {
		api_error(c, 415, "unsupported_media_type", "request body must be application/json, not '%.64s'", ctype);
		return NULL;
	}
	if (len > cap) {
		api_error(c, 413, "too_large", "request body is %zu bytes; the limit is %zu", len, cap);
		return NULL;
	}
	if (len == 0) {
		api_error(c, 400, "bad_request", "request body is empty; a JSON object is expected");
		return NULL;
	}
	obj = json_loadb((const char *)evbuffer_pullup(in, -1), len, JSON_REJECT_DUPLICATES, &jerr);
	if (!obj) {
		api_error(c, 400, "bad_json", "invalid JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
		return NULL;
	}
	if (!json_is_object(obj)) {
		json_decref(obj);
		api_error(c, 400, "bad_json", "request body must be a JSON object");
		return NULL;
	}
	json_object_foreach(obj, key, val) {
		const char *const *s;
		size_t klen = strlen(key);
		char type = 0;

		for (s = spec; *s; s++)
			if (strncmp(*s, key, klen) == 0 && (*s)[klen] == ':') {
				type = (*s)[klen + 1];
				break;
			}
		if (!type) {
			api_error(c, 400, "unknown_field", "unknown field '%.64s'", key);
			json_decref(obj);
			return NULL;
		}
		if ((type == 's' && !json_is_string(val)) || (type == 'i' && !json_is_integer(val)) ||
		    (type == 'b' && !json_is_boolean(val)) || (type == 'a' && !json_is_array(val)) ||
		    (type == 'o' && !json_is_object(val))) {
			api_error(c, 400, "wrong_type", "field '%s' must be %s", key,
				  type == 's' ? "a string" : type == 'i' ? "an integer" : type == 'b' ? "true or false" :
				  type == 'a' ? "an array" : "an object");
			json_decref(obj);
			return NULL;
		}
	}
	return obj;
}

bool api_check_name_param(struct api_call *c)
{
	const char *why;

	if (agent_name_check(c->param, &why) < 0) {
		api_error(c, 400, "invalid_name", "invalid agent name: %s", why);
		return false;
	}
	return true;
}

/* Defence in depth beside the socket's mode: root, our own uid, or a member of the socket group. */
static bool peer_allowed(struct api *api, uid_t uid)
{
	struct passwd *pw;
	gid_t groups[256];
	int n = (int)ARRAY_SIZE(groups);

	if (uid == 0 || uid == geteuid())
		return true;
	if (api->group == (gid_t)-1 || !(pw = getpwuid(uid)))
		return false;
	if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0)
		return false;
	for (int i = 0; i < n; i++)
		if (groups[i] == api->group)
			return true;
	return false;
}

/*
 * Match path against pattern segment by segment; a pattern segment starting
 * with ':' matches any one non-empty path segment, which is percent-decoded
 * into bufs[k] and pointed to by params[k] (at most two). A segment that
 * decodes to something containing NUL, or is too long, becomes "\x01", which
 * no name check accepts.
 */
static bool route_match(const char *pattern, const char *path, char bufs[2][256], const char *params[2])
{
	int k = 0;

	params[0] = params[1] = NULL;
	for (;;) {
		const char *pe = strchrnul(pattern, '/'), *se = strchrnul(path, '/');
		size_t plen = (size_t)(pe - pattern), slen = (size_t)(se - path);

		if (plen > 0 && pattern[0] == ':') {
			char *raw, *decoded;
			size_t dlen = 0;

			if (slen == 0 || k >= 2)
				return false;
			raw = xstrndup(path, slen);
			decoded = evhttp_uridecode(raw, 0, &dlen);
			free(raw);
			if (!decoded)
				return false;
			if (dlen != strlen(decoded) || dlen >= 256)
				snprintf(bufs[k], 256, "%s", "\x01");
			else
				memcpy(bufs[k], decoded, dlen + 1);
			free(decoded);
			params[k] = bufs[k];
			k++;
		} else if (plen != slen || strncmp(pattern, path, plen) != 0) {
			return false;
		}
		if (!*pe || !*se)
			return !*pe && !*se;
		pattern = pe + 1;
		path = se + 1;
	}
}

static void api_dispatch(struct evhttp_request *req, void *arg)
{
	struct api *api = arg;
	struct api_call c = { .fleetd = api->fleetd, .req = req, .uid = (uid_t)-1 };
	struct evhttp_connection *conn = evhttp_request_get_connection(req);
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	const char *method = method_name(evhttp_request_get_command(req));
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	char bufs[2][256];
	bool path_known = false;
	int fd;

	if (api_exec_claim(req))
		return;		/* libevent reporting a write error on a stream: exec's done() ends it */
	fd = bufferevent_getfd(evhttp_connection_get_bufferevent(conn));
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		log_warning("api: cannot read the caller's credentials: %s", strerror(errno));
		api_error(&c, 403, "forbidden", "caller credentials unavailable");
		return;
	}
	c.uid = cred.uid;
	c.pid = cred.pid;
	if (!peer_allowed(api, c.uid)) {
		log_notice("api: refused uid %ld (pid %ld): not root and not in the socket group",
			   (long)cred.uid, (long)cred.pid);
		api_error(&c, 403, "forbidden", "uid %ld may not use fleetd", (long)cred.uid);
		return;
	}
	if (!path)
		path = "";
	for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
		const char *p[2];

		if (!route_match(routes[i].pattern, path, bufs, p))
			continue;
		path_known = true;
		if (strcmp(routes[i].method, method) != 0)
			continue;
		c.param = p[0];
		c.param2 = p[1];
		c.action = routes[i].action;
		c.max_body = routes[i].max_body;
		log_debug("api: uid %ld %s %s", (long)c.uid, method, path);
		routes[i].handler(&c);
		if (!c.replied) {
			log_error("api: %s %s: handler sent no reply", method, path);
			api_error(&c, 500, "internal", "internal error");
		}
		return;
	}
	if (path_known)
		api_error(&c, 405, "method_not_allowed", "%s is not allowed on this path", method);
	else
		api_error(&c, 404, "not_found", "no such API path; see /v1/status");
}

/* Refuse to steal a socket another live process is serving. */
static int socket_claim(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_close_ int fd = -1;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		return -EADDRINUSE;
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static gid_t resolve_group(const struct config *cfg)
{
	const char *name = config_get(cfg, CFG_SOCKET_GROUP);
	struct group *gr;

	if (!*name || !(gr = getgrnam(name)))
		return (gid_t)-1;
	return gr->gr_gid;
}

static int socket_set_owner(struct api *api)
{
	gid_t gid = api->group == (gid_t)-1 ? 0 : api->group;

	if (chown(api->socket_path, 0, gid) < 0 && geteuid() == 0)
		return -errno;
	if (chmod(api->socket_path, 0660) < 0)
		return -errno;
	return 0;
}

void api_reload(struct api *api)
{
	const struct config *cfg = &api->fleetd->cfg;
	int r;

	api->group = resolve_group(cfg);
	api->max_body = (size_t)config_get_long(cfg, CFG_MAX_BODY);
	/*
	 * Bodies up to 4x the cap (at least the exec cap, 16 MiB) reach api_body_object, which
	 * answers 413 in our JSON shape; libevent cuts larger ones off itself
	 * (a plain 413) before buffering them.
	 */
	evhttp_set_max_body_size(api->http, (ev_ssize_t)(api->max_body * 4 > EXEC_MAX_BODY ? api->max_body * 4 : EXEC_MAX_BODY + 4096));
	if ((r = socket_set_owner(api)) < 0)
		log_error("api: cannot set owner of %s: %s", api->socket_path, strerror(-r));
}

int api_start(struct fleetd *fleetd, struct api **ret)
{
	const char *path = config_get(&fleetd->cfg, CFG_SOCKET);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct evconnlistener *lev;
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *dir = xstrdup(path);
	struct api *api;
	mode_t old;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	*strrchr(dir, '/') = '\0';
	if (*dir && (r = mkdir_p(dir, 0755)) < 0) {
		log_error("api: cannot create %s: %s", dir, strerror(-r));
		return r;
	}
	if ((r = socket_claim(path)) < 0) {
		if (r == -EADDRINUSE)
			log_error("api: %s is served by another running process; refusing to take it over", path);
		else
			log_error("api: cannot remove stale socket %s: %s", path, strerror(-r));
		return r;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* Never let the socket exist with looser permissions than 0660, not even briefly. */
	old = umask(0117);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0 || listen(fd, 64) < 0) {
		r = -errno;
		log_error("api: cannot listen on %s: %s", path, strerror(-r));
		return r;
	}
	api = xcalloc(1, sizeof(*api));
	api->fleetd = fleetd;
	api->socket_path = xstrdup(path);
	api->http = evhttp_new(fleetd->base);
	if (!api->http)
		abort();
	lev = evconnlistener_new(fleetd->base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, -1, fd);
	if (!lev || !evhttp_bind_listener(api->http, lev)) {
		log_error("api: cannot serve %s", path);
		api_stop(api);
		return -EIO;
	}
	TAKE_FD(fd);
	evhttp_set_allowed_methods(api->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
				   EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH | EVHTTP_REQ_HEAD);
	evhttp_set_max_headers_size(api->http, 16384);
	evhttp_set_timeout(api->http, 120);
	evhttp_set_gencb(api->http, api_dispatch, api);
	api_reload(api);
	if ((r = socket_set_owner(api)) < 0) {
		log_error("api: cannot set permissions on %s: %s", path, strerror(-r));
		api_stop(api);
		return r;
	}
	log_info("api: listening on %s (mode 0660, group %s)", path,
		 api->group == (gid_t)-1 ? "root only" : config_get(&fleetd->cfg, CFG_SOCKET_GROUP));
	*ret = api;
	return 0;
}

void api_stop(struct api *api)
{
	if (!api)
		return;
	if (api->http)
		evhttp_free(api->http);
	if (api->socket_path)
		unlink(api->socket_path);
	free(api->socket_path);
	free(api);
}
