/*
 * test_virt_conn: who may (re)connect a host's libvirt connection, and that
 * a worker's connection outlives the loop letting go of it (vm/virt.c).
 * libvirt's own test driver (test:///FILE, in-process, no libvirtd): this
 * checks the threading rule of the adapter, not a VM feature.
 *
 * - A worker thread never connects: with the host unreachable it gets
 *   -ENOTCONN and the connection's generation stays as it was (a worker that
 *   reconnected would race the loop's own reconnect).
 * - Once the loop has connected, the worker's calls work.
 * - A worker holding virt_conn()'s reference keeps a usable connection
 *   after the loop closed its own (as a lost connection's disconnect does):
 *   under ASan or valgrind the former borrowed pointer was a use after free.
 */
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/tap.h"
#include "common/util.h"
#include "tests/unit/virt_fixture.h"
#include "vm/virt.h"
#include "vm/virt_conn.h"

/* What a worker thread did, for the loop's thread to check after the join. */
struct probe {
	struct virt *v;
	int list_r;
	size_t listed;
	char *first;
	char *why;
};

static void *list_on_worker(void *arg)
{
	struct probe *p = arg;
	char **names = NULL;

	p->list_r = virt_domain_list(p->v, "fleet-", false, &names);
	if (p->list_r == 0) {
		while (names[p->listed])
			p->listed++;
		p->first = p->listed ? xstrdup(names[0]) : NULL;
		strv_free(names);
	} else {
		int r = virt_connect(p->v, &p->why);	/* nor does an explicit connect on a worker */

		if (r != -ENOTCONN)
			p->list_r = r;
	}
	return NULL;
}

static int run_worker(void *(*fn)(void *), struct probe *p)
{
	pthread_t t;

	if (pthread_create(&t, NULL, fn, p) != 0)
		return -1;
	return pthread_join(t, NULL);
}

/* A worker that took its reference before the loop closed the connection, and uses it after. */
struct holder {
	struct virt *v;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int stage;		/* 1 the reference is taken, 2 the loop closed its connection */
	int ref_r;
	int domains;		/* what the connection answered after the loop let go */
};

static void *hold_on_worker(void *arg)
{
	struct holder *h = arg;
	virConnectPtr c = NULL;
	char *why = NULL;

	h->ref_r = virt_conn(h->v, &c, &why);
	free(why);
	pthread_mutex_lock(&h->lock);
	h->stage = 1;
	pthread_cond_broadcast(&h->cond);
	while (h->stage < 2)
		pthread_cond_wait(&h->cond, &h->lock);
	pthread_mutex_unlock(&h->lock);
	if (h->ref_r == 0) {
		h->domains = virConnectNumOfDomains(c);
		virConnectClose(c);
	}
	return NULL;
}

int main(void)
{
	struct virt_fixture f;
	struct virt *v = NULL;
	struct probe p = { 0 };
	char *why = NULL;
	int r;

	if (virt_fixture_setup(&f, "test_virt_conn") < 0)
		return printf("not ok 1 - setup\n1..1\n"), 1;

	/* The host is unreachable at first: its definition does not exist yet. */
	r = virt_open(f.base, f.uri, virt_fixture_on_event, NULL, &v, &why);
	is_int(r, -ENOTCONN, "virt_open against an unreachable host fails with -ENOTCONN");
	ok(v != NULL, "but gives the handle, to reconnect later");
	free(why);
	why = NULL;
	if (!v)
		return tap_done();
	is_int(virt_generation(v), 0, "never connected: generation 0");

	/* The host comes back; only the loop may notice. */
	ok(virt_fixture_write_node(f.path) == 0, "the host's definition is written");
	p.v = v;
	ok(run_worker(list_on_worker, &p) == 0, "a worker thread ran");
	is_int(p.list_r, -ENOTCONN, "on a worker, a list while disconnected fails with -ENOTCONN");
	ok(p.why && strstr(p.why, "fleetd reconnects"), "and says the loop reconnects: %s", p.why ? p.why : "(null)");
	is_int(virt_generation(v), 0, "the worker did not connect");
	ok(!virt_is_connected(v), "still not connected");
	free(p.why);

	is_int(virt_connect(v, NULL), 0, "the loop connects");
	is_int(virt_generation(v), 1, "generation 1");
	p = (struct probe){ .v = v };
	ok(run_worker(list_on_worker, &p) == 0, "a worker thread ran");
	is_int(p.list_r, 0, "a worker's list works once the loop connected");
	is_int(p.listed, 1, "and sees the one domain");
	is_str(p.first, "fleet-a", "by its name");
	free(p.first);
	free(p.why);

	/* A worker's reference outlives the loop's close. */
	struct holder h = { .v = v, .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
	pthread_t t;

	ok(pthread_create(&t, NULL, hold_on_worker, &h) == 0, "a worker takes a reference");
	pthread_mutex_lock(&h.lock);
	while (h.stage < 1)
		pthread_cond_wait(&h.cond, &h.lock);
	pthread_mutex_unlock(&h.lock);
	is_int(h.ref_r, 0, "virt_conn on the worker gives the live connection");
	virt_close(v);	/* the loop lets go of its connection, as after a lost one */
	pthread_mutex_lock(&h.lock);
	h.stage = 2;
	pthread_cond_broadcast(&h.cond);
	pthread_mutex_unlock(&h.lock);
	pthread_join(t, NULL);
	is_int(h.domains, 1, "the worker's connection still answers after the loop closed its own");

	virt_fixture_cleanup(&f);
	return tap_done();
}
