/*
 * test_virt_open_async: the first connect of `host add` made on a worker
 * (vm/virt.c virt_open_async), answered on the loop once, and bounded; and
 * the facts `host ls` shows read with that connect, never on the loop.
 * libvirt's test driver (test:///FILE, in-process) for the answers, and a
 * loopback TCP socket that listens but never speaks for a host that does
 * not answer: this checks the adapter's threading and its bound, not a VM
 * feature (tests/vm/hosts-blackhole.sh does, against a real libvirtd).
 *
 * - Never answered before virt_open_async returns; answered once.
 * - A URI that fails says so in libvirt's words, naming the URI.
 * - One that answers is connected, with its facts already read.
 * - A host that never answers is refused as unreachable when the bound
 *   passes, while the loop runs other events meanwhile; its worker is
 *   left to end by itself and its late result dropped.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/tap.h"
#include "common/util.h"
#include "tests/unit/virt_fixture.h"
#include "vm/virt.h"

struct answer {
	int calls;
	int r;
	char *why;
};

static void on_opened(void *arg, int r, const char *why)
{
	struct answer *a = arg;

	a->calls++;
	a->r = r;
	free(a->why);
	a->why = why ? xstrdup(why) : NULL;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	(*(int *)arg)++;
}

/* Run base until a is answered (or 30 s of loop passed: then the test fails, it does not hang). */
static void run_until_answered(struct event_base *base, struct answer *a)
{
	for (int i = 0; i < 300 && !a->calls; i++)
		virt_fixture_run_for(base, 100);
}

int main(void)
{
	struct virt_fixture f;
	struct answer a = { 0 };
	struct virt *v = NULL;
	struct virt_facts facts;
	const char *error = NULL;
	long long age = -1;
	char *why = NULL, *missing;
	int r;

	if (virt_fixture_setup(&f, "test_virt_open_async") < 0)
		return printf("not ok 1 - setup\n1..1\n"), 1;

	/* A URI that fails: libvirt's words, naming it. */
	missing = xasprintf("test://%s/no-such.xml", f.dir);
	r = virt_open_async(f.base, missing, virt_fixture_on_event, NULL, 10, on_opened, &a, &v, &why);
	is_int(r, 0, "virt_open_async starts: %s", why ? why : "");
	is_int(a.calls, 0, "and has not answered before it returned");
	run_until_answered(f.base, &a);
	is_int(a.calls, 1, "it answers once");
	is_int(a.r, -ENOTCONN, "a URI that fails: -ENOTCONN");
	ok(a.why && strstr(a.why, missing) && strstr(a.why, "no-such.xml: "), "in libvirt's words, naming the URI: %s",
	   a.why ? a.why : "(null)");
	virt_close(v);
	v = NULL;

	/* One that answers: connected, its facts read on the worker with the connect. */
	ok(virt_fixture_write_node(f.path) == 0, "the host's definition is written");
	free(a.why);
	a = (struct answer){ 0 };
	r = virt_open_async(f.base, f.uri, virt_fixture_on_event, NULL, 10, on_opened, &a, &v, &why);
	is_int(r, 0, "virt_open_async of a host that answers starts");
	run_until_answered(f.base, &a);
	is_int(a.calls, 1, "it answers once");
	is_int(a.r, 0, "connected");
	ok(virt_is_connected(v), "the connection is live");
	is_int(virt_facts(v, &facts, &age, &error), 0, "its facts are there at once (read on the worker)");
	ok(strchr(facts.libvirt, '.') != NULL, "libvirt's version: %s", facts.libvirt);
	ok(age >= 0 && age < 60, "their age in seconds: %lld", age);
	ok(error == NULL, "the read did not fail");
	virt_close(v);
	v = NULL;

	/* A host that never answers: a loopback socket that listens and never speaks. */
	{
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t len = sizeof(sa);
		int ticks = 0, lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct event *tick = event_new(f.base, -1, EV_PERSIST, on_tick, &ticks);
		struct timeval every = { 0, 100000 };
		char *silent;

		ok(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 4) == 0 &&
		   getsockname(lfd, (struct sockaddr *)&sa, &len) == 0, "a silent listener on 127.0.0.1");
		silent = xasprintf("qemu+tcp://127.0.0.1:%d/system", ntohs(sa.sin_port));
		free(a.why);
		a = (struct answer){ 0 };
		event_add(tick, &every);
		r = virt_open_async(f.base, silent, virt_fixture_on_event, NULL, 1, on_opened, &a, &v, &why);
		is_int(r, 0, "virt_open_async of a silent host starts");
		run_until_answered(f.base, &a);
		is_int(a.calls, 1, "it answers once");
		is_int(a.r, -ENOTCONN, "unreachable: -ENOTCONN");
		ok(a.why && strstr(a.why, "no answer within 1 s"), "past its bound: %s", a.why ? a.why : "(null)");
		ok(ticks >= 5, "the loop ran other events meanwhile (%d ticks of 100 ms)", ticks);
		virt_close(v);	/* its worker still waits: dropped when it ends */
		v = NULL;
		close(lfd);	/* the queued connection is reset: the orphaned worker ends */
		virt_fixture_run_for(f.base, 2000);
		is_int(a.calls, 1, "the orphaned worker's late result is dropped, not answered again");
		event_free(tick);
		free(silent);
	}

	free(a.why);
	free(why);
	free(missing);
	virt_fixture_cleanup(&f);
	return tap_done();
}
