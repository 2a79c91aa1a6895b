/*
 * core/hooks.c on a real database: routes made by their first subscriber
 * and gone with their last (also when the agent is removed), secrets as
 * given and as decoded (whsec_), the route table the listener gets (with
 * the previous secret only while a rotation's grace lasts, `now` passed in),
 * the pruning of old events and delivery ids, and recording verified
 * deliveries (core/deliveries.c): deduplication per route, fan-out through
 * the subscribers' filters, a full queue refusing the whole delivery with
 * no row left, ping and challenge, and a group committed together where a
 * refused delivery spoils none of the others and a failing store all.
 */
#include <sqlite3.h>

#include "core/deliveries.h"
#include "core/hooks.h"
#include "hooks/route.h"
#include "tests/fakes/core_fixture.h"
#include "tests/tap.h"

static struct fixture X;
#define F (&X.f)

static const char *const settings[] = { "hooks_public_url", "https://hooks.example.com", "events_keep_days", "10", NULL };

static void add_agent(const char *name)
{
	_cleanup_(agent_freep) struct agent *a = fixture_agent(name, RESTART_NEVER);

	a->command = xstrdup("true");	/* a webhook queues runs only for agents with a command */
	if (db_agent_insert(F->db, a) < 0) {
		fprintf(stderr, "cannot insert agent %s\n", name);
		exit(1);
	}
}

/* hooks_add with the fields a test varies; the rest unset. */
static int add(const char *agent, const char *source, const char *route, const char *secret, bool *created,
	       char **why)
{
	struct hooks_add_req req = { .agent = agent, .source = source, .route = route, .secret = secret };
	_cleanup_free_ char *name = NULL;

	free(*why);
	*why = NULL;
	return hooks_add(F, &req, &name, created, why);
}

/*
 * hooks_rotate and hooks_remove as the tests call them: each failure sets
 * *why anew, so the message of the call before is freed first (its owner
 * is the caller: reusing why without this leaked them, LSan in an ASan build).
 */
static int rotate(const char *route, const char *secret, long grace_s, time_t now, time_t *until, char **why)
{
	free(*why);
	*why = NULL;
	return hooks_rotate(F, route, secret, grace_s, now, until, why);
}

static int unsubscribe(const char *route, const char *agent, bool *removed, char **why)
{
	free(*why);
	*why = NULL;
	return hooks_remove(F, route, agent, removed, why);
}

static const struct hook_route *find(const struct hooks_route_table *t, const char *name)
{
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->routes[i].name, name) == 0)
			return &t->routes[i];
	return NULL;
}

static bool secret_is(const struct hook_route *r, int i, const void *want, size_t len)
{
	return r && i < r->n_secrets && r->secret_lens[i] == len && memcmp(r->secrets[i], want, len) == 0;
}

static size_t n_routes(time_t now)
{
	struct hooks_route_table *t = NULL;
	size_t n;

	if (hooks_route_table(F, now, &t) < 0)
		return (size_t)-1;
	n = t->n;
	hooks_route_table_free(t);
	return n;
}

static void test_routes(void)
{
	const char *gh = "0123456789abcdef-github", *gh2 = "fedcba9876543210-github";
	/* whsec_ + base64 of the 24 bytes "standard-webhooks-secret" */
	const char *whsec = "whsec_c3RhbmRhcmQtd2ViaG9va3Mtc2VjcmV0";
	_cleanup_free_ char *why = NULL;
	struct hooks_route_table *t = NULL;
	const struct hook_route *r;
	bool created = false, removed = false;
	time_t until = 0;

	fixture_open(&X, 0, settings);
	add_agent("alpha");
	add_agent("beta");
	add_agent("gamma");

	is_int(add("alpha", "github", NULL, gh, &created, &why), 0, "a github route is created with its secret");
	ok(created, "it is new");
	is_int(add("alpha", "standard", "std", whsec, &created, &why), 0, "a Standard Webhooks route takes whsec_");
	is_int(add("alpha", "hmac", "ci", "a-plain-text-secret!", &created, &why), 0, "an hmac route");

	/* Refused, and nothing stored. */
	is_int(add("alpha", "standard", "std2", "whsec_not base64!", &created, &why), -EINVAL, "a bad whsec_ is refused");
	ok(why && strstr(why, "base64") && !strstr(why, "not base64!"), "saying why, without the secret: %s", why);
	is_int(add("alpha", "standard", "std2", "c3RhbmRhcmQtd2ViaG9va3Mtc2VjcmV0", &created, &why), -EINVAL,
	       "a standard secret without whsec_ is refused");
	is_int(add("alpha", "slack", "short", "tooshort", &created, &why), -EINVAL, "a secret under 16 bytes is refused");
	ok(why && strstr(why, "16"), "saying the minimum: %s", why);
	is_int(add("alpha", "gitlab", "x", gh, &created, &why), -EINVAL, "an unknown source is refused");
	is_int(add("alpha", "github", "Bad/Name", gh, &created, &why), -EINVAL, "a bad route name is refused");
	is_int(add("alpha", "github", "new-route", NULL, &created, &why), -EINVAL, "a new route without a secret is refused");
	is_int(add("nobody", "github", "nobody-route", gh, &created, &why), -ENOENT, "an unknown agent is refused");
	is_int(n_routes(1000), 3, "none of them stored a route");

	/* Fan-out: a second subscriber of the same route, without a secret. */
	is_int(add("beta", "github", "alpha-github", NULL, &created, &why), 0, "beta subscribes to alpha-github");
	ok(!created, "to the existing route");
	is_int(add("beta", "github", "alpha-github", NULL, &created, &why), -EEXIST, "not twice");
	is_int(add("gamma", "github", "alpha-github", gh2, &created, &why), -EEXIST,
	       "a secret for an existing route is refused (rotate changes it)");
	is_int(add("gamma", "slack", "alpha-github", NULL, &created, &why), -EEXIST, "a route of another source is refused");

	if (hooks_route_table(F, 1000, &t) < 0)
		{ ok(0, "the route table"); return; }
	is_int(t->n, 3, "the route table has the three routes");
	r = find(t, "alpha-github");
	ok(r && r->source == HOOK_GITHUB && r->n_secrets == 1 && secret_is(r, 0, gh, strlen(gh)),
	   "alpha-github: github, its one secret");
	is_str(r ? r->public_url : NULL, "https://hooks.example.com", "with hooks_public_url as its base URL");
	ok(r && r->max_body == HOOK_MAX_BODY_DEFAULT, "and its body limit (the listener refuses a table without)");
	r = find(t, "std");
	ok(secret_is(r, 0, "standard-webhooks-secret", 24), "std: the whsec_ secret decoded");
	r = find(t, "ci");
	ok(r && r->source == HOOK_HMAC && r->header && strcmp(r->header, "X-Signature") == 0 && r->encoding == HOOK_HEX,
	   "ci: hmac with the default header and hex");
	hooks_route_table_free(t);
	t = NULL;

	/* Rotation: both secrets until the grace ends, then the new one only. */
	is_int(rotate("alpha-github", gh2, 100, 1000, &until, &why), 0, "rotate with 100 s of grace at t=1000");
	is_int(until, 1100, "the old secret works until t=1100");
	is_int(rotate("alpha-github", "short", 100, 1000, &until, &why), -EINVAL, "a short new secret is refused");
	is_int(rotate("no-such", gh2, 100, 1000, &until, &why), -ENOENT, "rotating an unknown route fails");
	if (hooks_route_table(F, 1099, &t) < 0)
		{ ok(0, "the route table"); return; }
	r = find(t, "alpha-github");
	ok(r && r->n_secrets == 2 && secret_is(r, 0, gh2, strlen(gh2)) && secret_is(r, 1, gh, strlen(gh)),
	   "at t=1099: the new secret first, the old one second");
	hooks_route_table_free(t);
	if (hooks_route_table(F, 1100, &t) < 0)
		{ ok(0, "the route table"); return; }
	r = find(t, "alpha-github");
	ok(r && r->n_secrets == 1 && secret_is(r, 0, gh2, strlen(gh2)), "at t=1100 the grace is over: the new one only");
	hooks_route_table_free(t);

	/* The route goes with its last subscriber. */
	is_int(unsubscribe("alpha-github", "alpha", &removed, &why), 0, "alpha unsubscribes");
	ok(!removed, "the route stays: beta is subscribed");
	is_int(unsubscribe("alpha-github", "alpha", &removed, &why), -ENOENT, "not twice");
	is_int(unsubscribe("alpha-github", "beta", &removed, &why), 0, "beta unsubscribes");
	ok(removed, "it was the last: the route is removed");
	is_int(n_routes(1000), 2, "the table no longer has it");

	/* Removing the agent removes its subscriptions, and routes it was the last subscriber of. */
	is_int(add("gamma", "hmac", "ci", NULL, &created, &why), 0, "gamma subscribes to ci too");
	is_int(db_agent_delete(F->db, "alpha"), 0, "alpha is removed");
	is_int(n_routes(1000), 1, "std (alpha's alone) went with it; ci stays for gamma");
	ok(hooks_route_table(F, 1000, &t) == 0 && find(t, "ci") && !find(t, "std"), "the one left is ci");
	hooks_route_table_free(t);
	fixture_close(&X);
}

/* events and delivery ids as the listener will write them (the store has no writer yet). */
static void insert_rows(const char *path, long now)
{
	_cleanup_free_ char *sql = xasprintf(
		"INSERT INTO hook_routes (name, source, secret, created_at) VALUES ('r', 'github', x'00', 0);"
		"INSERT INTO events (source, route, delivery_id, received_at) VALUES"
		" ('github', 'r', 'old', %ld), ('github', 'r', 'new', %ld);"
		"INSERT INTO hook_deliveries (route_id, delivery_id, received_at) VALUES"
		" (1, 'd-old', %ld), (1, 'd-8days', %ld), (1, 'd-new', %ld);",
		now - 11 * 86400, now - 9 * 86400, now - 11 * 86400, now - 8 * 86400, now - 3600);
	sqlite3 *h = NULL;

	ok(sqlite3_open(path, &h) == SQLITE_OK && sqlite3_exec(h, sql, NULL, NULL, NULL) == SQLITE_OK, "test rows in");
	sqlite3_close(h);
}

/* The first column of the first row of sql on the test's database, as text in got (size bytes; "" when there is none). */
static void text_of(const char *sql, char *got, size_t size)
{
	_cleanup_free_ char *path = xasprintf("%s/fleet.db", X.dir);
	sqlite3_stmt *st = NULL;
	sqlite3 *h = NULL;

	got[0] = '\0';
	if (sqlite3_open(path, &h) == SQLITE_OK && sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
		snprintf(got, size, "%s", sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	sqlite3_close(h);
}

static void test_prune(void)
{
	_cleanup_free_ char *path = xasprintf("%s/fleet.db", X.dir);
	struct db_event *ev = NULL;
	size_t n = 0;
	long now = 2000000000L;
	char got[64];

	fixture_open(&X, 0, settings);
	insert_rows(path, now);
	is_int(hooks_prune(F, now), 0, "prune with events_keep_days 10");
	is_int(db_events_list(F->db, NULL, 0, &ev, &n), 0, "list events");
	ok(n == 1 && strcmp(ev[0].delivery_id, "new") == 0, "the 11-day-old event is gone, the 9-day-old one kept");
	db_events_free(ev, n);
	fixture_close(&X);
	text_of("SELECT group_concat(delivery_id) FROM (SELECT delivery_id FROM hook_deliveries ORDER BY received_at)",
		got, sizeof(got));
	is_str(got, "d-8days,d-new", "delivery ids older than 10 days go, younger ones stay");
	/* Dedup keys live at least 7 days whatever events_keep_days says. */
	{
		static const char *const short_keep[] = { "events_keep_days", "1", NULL };

		fixture_open(&X, 0, short_keep);
		is_int(hooks_prune(F, now), 0, "prune with events_keep_days 1");
		is_int(db_events_list(F->db, NULL, 0, &ev, &n), 0, "list events");
		is_int(n, 0, "every event older than a day is gone");
		db_events_free(ev, n);
		fixture_close(&X);
	}
	text_of("SELECT group_concat(delivery_id) FROM hook_deliveries", got, sizeof(got));
	is_str(got, "d-new", "but a delivery id is kept 7 days: only the 8-day-old one went");
}

/* The first column of the first row of sql on the test's database, as a number; -1 on error. */
static long count(const char *sql)
{
	_cleanup_free_ char *path = xasprintf("%s/fleet.db", X.dir);
	sqlite3_stmt *st = NULL;
	sqlite3 *h = NULL;
	long n = -1;

	if (sqlite3_open(path, &h) == SQLITE_OK && sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		n = (long)sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(h);
	return n;
}

static int exec_sql(const char *sql)
{
	_cleanup_free_ char *path = xasprintf("%s/fleet.db", X.dir);
	sqlite3 *h = NULL;
	int rc = sqlite3_open(path, &h) == SQLITE_OK ? sqlite3_exec(h, sql, NULL, NULL, NULL) : SQLITE_ERROR;

	sqlite3_close(h);
	return rc == SQLITE_OK ? 0 : -1;
}

static long runs_of(const char *agent)
{
	_cleanup_free_ char *sql = xasprintf("SELECT count(*) FROM runs r JOIN agents a ON a.id = r.agent_id"
					     " WHERE a.name = '%s' AND r.trigger = 'github'", agent);
	return count(sql);
}

static long rows_of(const char *route, const char *id)
{
	_cleanup_free_ char *sql = xasprintf("SELECT (SELECT count(*) FROM events WHERE route = '%s' AND delivery_id = '%s')"
					     " + (SELECT count(*) FROM hook_deliveries d JOIN hook_routes r ON r.id = d.route_id"
					     " WHERE r.name = '%s' AND d.delivery_id = '%s')", route, id, route, id);
	return count(sql);
}

static struct hook_delivery dlv(uint64_t seq, const char *route, const char *id, const char *type)
{
	static const char body[] = "{\"action\":\"opened\"}";
	static const struct hook_header headers[] = { { "X-GitHub-Event", "pull_request" } };	/* borrowed by each */

	return (struct hook_delivery){ .seq = seq, .route = route, .delivery_id = id, .event_type = type,
				       .received_at = time(NULL), .headers = headers, .n_headers = 1,
				       .body = (const unsigned char *)body, .body_len = sizeof(body) - 1 };
}

static void answers_clear(struct hook_answer *a, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(a[i].body);
		free(a[i].content_type);
		memset(&a[i], 0, sizeof(a[i]));
	}
}

/* One delivery alone: its status, its body in *body (static until the next call). */
static int deliver1(struct hook_delivery d, const char **body)
{
	static char last[512];
	struct hook_answer a;
	int status;

	(void)deliveries_commit(F, &d, 1, &a);
	snprintf(last, sizeof(last), "%s", a.body ? a.body : "");
	status = a.status;
	ok(a.seq == d.seq, "(its answer carries its seq)");
	answers_clear(&a, 1);
	if (body)
		*body = last;
	return status;
}

static void sub(const char *agent, const char *route, const char *events, const char *secret)
{
	struct hooks_add_req req = { .agent = agent, .source = "github", .route = route, .events = events,
				     .secret = secret };
	_cleanup_free_ char *name = NULL, *why = NULL;
	bool created;

	if (hooks_add(F, &req, &name, &created, &why) < 0) {
		fprintf(stderr, "cannot subscribe %s to %s: %s\n", agent, route, why);
		exit(1);
	}
}

static void test_deliveries(void)
{
	const char *gh = "0123456789abcdef-github", *body = NULL;
	_cleanup_(agent_freep) struct agent *full = fixture_agent("dc", RESTART_NEVER);
	struct hook_delivery d;
	struct hook_delivery group[4];
	struct hook_answer ans[4];
	struct db_event *ev = NULL;
	size_t nev = 0;

	fixture_open(&X, 0, settings);
	add_agent("da");
	add_agent("db");
	full->max_queued = 1;
	full->command = xstrdup("true");
	if (db_agent_insert(F->db, full) < 0)
		exit(1);
	sub("da", "gh", "pull_request", gh);
	sub("db", "gh", "push", NULL);
	sub("dc", "gh", NULL, NULL);
	sub("db", "gh2", "push", gh);

	/* Fan-out through the filters. */
	is_int(deliver1(dlv(1, "gh", "id-1", "pull_request.opened"), &body), 202, "a delivery is accepted (202)");
	is_str(body, "{\"status\":\"accepted\",\"delivery\":\"id-1\",\"runs\":2}", "saying so, with its runs");
	is_int(runs_of("da"), 1, "da's pull_request filter takes pull_request.opened: one run");
	is_int(runs_of("db"), 0, "db's push filter does not: none");
	is_int(runs_of("dc"), 1, "dc has no filter: one run");
	is_int(db_events_list(F->db, "gh", 0, &ev, &nev), 0, "list the route's events");
	ok(nev == 1 && strcmp(ev[0].outcome, "queued") == 0 && ev[0].runs && strchr(ev[0].runs, ','),
	   "one event, outcome queued, two runs");
	db_events_free(ev, nev);
	is_int(count("SELECT count(*) FROM events WHERE route = 'gh' AND delivery_id = 'id-1' AND body IS NOT NULL"
		     " AND source = 'github' AND event_type = 'pull_request.opened'"), 1,
	       "the event keeps its source, type and body (the runs' stdin)");

	/* Dedup per route. */
	is_int(deliver1(dlv(2, "gh", "id-1", "pull_request.opened"), &body), 200, "a redelivery is answered 200");
	is_str(body, "{\"status\":\"duplicate\",\"delivery\":\"id-1\"}", "as a duplicate");
	is_int(runs_of("da") + runs_of("dc"), 2, "and queues nothing new");
	is_int(count("SELECT count(*) FROM events WHERE delivery_id = 'id-1' AND outcome = 'duplicate' AND body IS NULL"),
	       1, "it is noted as an event with outcome duplicate, without its body");
	is_int(deliver1(dlv(3, "gh2", "id-1", "pull_request.opened"), &body), 202,
	       "the same delivery id on another route is a delivery of its own");
	is_int(count("SELECT count(*) FROM events WHERE route = 'gh2' AND delivery_id = 'id-1'"
		     " AND outcome = 'no-subscriber'"), 1, "stored, with no subscriber whose filter takes it");
	is_str(body, "{\"status\":\"accepted\",\"delivery\":\"id-1\",\"runs\":0}", "accepted, no run");

	/* A full queue refuses the whole delivery, leaving no row. */
	is_int(deliver1(dlv(4, "gh", "id-2", "push"), &body), 429, "dc's queue is full (max_queued 1): 429");
	ok(strstr(body, "\"queue_full\"") && strstr(body, "'dc'"), "naming the agent: %s", body);
	is_int(rows_of("gh", "id-2"), 0, "no event and no delivery id were kept");
	is_int(runs_of("db"), 0, "nor db's run, which had room");

	/* Ping and Slack-style challenge: stored, answered, nothing queued. */
	d = dlv(5, "gh", "id-3", "ping");
	d.no_run = true;
	is_int(deliver1(d, &body), 200, "a ping is answered 200");
	is_str(body, "{\"status\":\"no-run\",\"delivery\":\"id-3\",\"runs\":0}", "saying no run");
	is_int(count("SELECT count(*) FROM events WHERE delivery_id = 'id-3' AND outcome = 'no-run'"), 1,
	       "stored with outcome no-run");
	d = dlv(6, "gh", "id-4", NULL);
	d.no_run = true;
	d.reply_body = (char *)"the-challenge";
	d.reply_type = (char *)"text/plain";
	is_int(deliver1(d, &body), 200, "a challenge is answered 200");
	is_str(body, "the-challenge", "with its reply body");
	is_int(runs_of("da") + runs_of("db") + runs_of("dc"), 2, "neither queued a run");

	/* A group: the refused one spoils none of the others; the same id twice in it is a duplicate. */
	group[0] = dlv(10, "gh2", "id-5", "push");
	group[1] = dlv(11, "gh", "id-6", "push");
	group[2] = dlv(12, "gh2", "id-5", "push");
	group[3] = dlv(13, "nope", "id-7", "push");
	is_int((int)deliveries_commit(F, group, 4, ans), 2, "a group of four: two answered 2xx");
	ok(ans[0].status == 202 && ans[1].status == 429 && ans[2].status == 200 && ans[3].status == 404,
	   "202, 429 (dc's queue), 200 (the same id again), 404 (no such route): %d %d %d %d", ans[0].status,
	   ans[1].status, ans[2].status, ans[3].status);
	ok(ans[0].seq == 10 && ans[1].seq == 11 && ans[2].seq == 12 && ans[3].seq == 13, "each answer has its seq");
	answers_clear(ans, 4);
	is_int(runs_of("db"), 1, "the accepted one queued db's run");
	is_int(rows_of("gh", "id-6"), 0, "the refused one left no row");
	is_int(rows_of("nope", "id-7"), 0, "nor did the one of no route");

	/* A store failure in a group: all of it 503, nothing of it kept. */
	ok(exec_sql("CREATE TRIGGER boom BEFORE INSERT ON events WHEN NEW.delivery_id = 'boom'"
		    " BEGIN SELECT RAISE(FAIL, 'boom'); END;") == 0, "(make the store fail on delivery 'boom')");
	group[0] = dlv(20, "gh2", "id-8", "push");
	group[1] = dlv(21, "gh2", "boom", "push");
	is_int((int)deliveries_commit(F, group, 2, ans), 0, "a group whose store fails: none answered 2xx");
	ok(ans[0].status == 503 && ans[1].status == 503 && ans[0].seq == 20 && ans[1].seq == 21, "both 503");
	answers_clear(ans, 2);
	is_int(rows_of("gh2", "id-8"), 0, "the one before the failure was rolled back too");
	is_int(runs_of("db"), 1, "with its run");
	ok(exec_sql("DROP TRIGGER boom") == 0, "(the store works again)");
	is_int(deliver1(dlv(22, "gh2", "id-8", "push"), NULL), 202, "the sender's retry is a new delivery, not a duplicate");
	is_int(runs_of("db"), 2, "and queues its run");

	/* Once dc's queue has room, the refused delivery's retry is accepted (not a duplicate). */
	ok(exec_sql("UPDATE runs SET state = 'succeeded' WHERE agent_id = (SELECT id FROM agents WHERE name = 'dc')") == 0,
	   "(dc's run ends)");
	is_int(deliver1(dlv(23, "gh", "id-2", "push"), &body), 202, "the retry of the refused delivery is accepted");
	is_str(body, "{\"status\":\"accepted\",\"delivery\":\"id-2\",\"runs\":2}", "with db's and dc's runs");
	fixture_close(&X);
}

static int changes;
static void on_change(struct fleetd *f)
{
	(void)f;
	changes++;
}

/* Every change of the routes reaches the listener's callback (it sends the table again); a refused one does not. */
static void test_change_callback(void)
{
	const char *gh = "0123456789abcdef-github";
	_cleanup_free_ char *why = NULL;
	_cleanup_(agent_freep) struct agent *a = NULL;
	bool created = false, removed = false;
	time_t until;

	fixture_open(&X, 0, settings);
	is_int(hooks_init(F), 0, "hooks_init");
	hooks_on_change(F, on_change);
	add_agent("ca");
	add_agent("cb");
	is_int(add("ca", "github", "cr", gh, &created, &why), 0, "a route is made");
	is_int(changes, 1, "the callback is called");
	is_int(add("cb", "github", "cr", NULL, &created, &why), 0, "a second subscriber");
	is_int(changes, 2, "called again");
	is_int(add("cb", "github", "cr", NULL, &created, &why), -EEXIST, "a refused subscription");
	is_int(changes, 2, "is no change");
	is_int(rotate("cr", "fedcba9876543210-github", 60, 1000, &until, &why), 0, "a rotation");
	is_int(changes, 3, "called again");
	is_int(unsubscribe("cr", "cb", &removed, &why), 0, "an unsubscription");
	is_int(changes, 4, "called again");
	is_int(db_agent_get(F->db, "ca", &a), 0, "read agent ca");
	is_int(lifecycle_destroy(F, NULL, a, false, &why), 0, "remove agent ca (its route goes with it)");
	is_int(changes, 5, "called again");
	hooks_on_change(F, NULL);
	hooks_shutdown(F);
	fixture_close(&X);
}

int main(void)
{
	void (*tests[])(void) = { test_routes, test_prune, test_deliveries, test_change_callback };

	log_setup("test_core_hooks", LOG_ERR);
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		fixture_mkdir(&X);
		tests[i]();
		fixture_cleanup(&X);
	}
	return tap_done();
}
