/*
 * test_virt_facts: a host's facts (vm/virt.c virt_facts, what `host ls` and
 * placement read) are read again only when a reader finds them old, on a
 * worker, one read at a time; nothing reads them while nobody asks.
 * libvirt's test driver (test:///FILE, in-process): this checks the
 * adapter's bookkeeping, not a VM feature (tests/vm/hosts-blackhole.sh
 * counts the reads of an idle fleetd against a real libvirtd).
 *
 * - The connect reads them once; idle past FACTS_FRESH_S (5 s), nothing
 *   starts a read.
 * - A read that finds them 5 s old answers at once with them and their age,
 *   and starts one read; a second read meanwhile starts none.
 * - Once that read is in, they are fresh: a read starts none.
 */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/tap.h"
#include "common/util.h"
#include "tests/unit/virt_fixture.h"
#include "vm/virt.h"

int main(void)
{
	struct virt_fixture f;
	struct virt *v = NULL;
	struct virt_facts facts;
	const char *error = NULL;
	long long age = -1;
	char *why = NULL;
	int r;

	if (virt_fixture_setup(&f, "test_virt_facts") < 0)
		return printf("not ok 1 - setup\n1..1\n"), 1;
	ok(virt_fixture_write_node(f.path) == 0, "the host's definition is written");
	r = virt_open(f.base, f.uri, virt_fixture_on_event, NULL, &v, &why);
	is_int(r, 0, "connected: %s", why ? why : "");
	if (r < 0)
		return tap_done();

	/* Nobody reads: nothing is read, however long. */
	virt_fixture_run_for(f.base, 5600);
	is_int((int)virt_facts_reads(v), 0, "idle 5.6 s with nobody reading: no read started");
	ok(!virt_facts_refreshing(v), "and none under way");

	/* A reader finds them old: it gets them now, and one read starts. */
	is_int(virt_facts(v, &facts, &age, &error), 0, "the connect's facts are there");
	ok(age >= 5, "5 s old or more: %lld s", age);
	ok(strchr(facts.libvirt, '.') != NULL, "libvirt's version: %s", facts.libvirt);
	ok(virt_facts_refreshing(v), "the read of old facts started a read");
	is_int((int)virt_facts_reads(v), 1, "one");
	is_int(virt_facts(v, &facts, &age, &error), 0, "a second reader meanwhile gets them too");
	is_int((int)virt_facts_reads(v), 1, "and starts no second read");

	for (int i = 0; i < 100 && virt_facts_refreshing(v); i++)
		virt_fixture_run_for(f.base, 100);
	ok(!virt_facts_refreshing(v), "the read is in");
	is_int(virt_facts(v, &facts, &age, &error), 0, "a reader after it");
	ok(age >= 0 && age < 5, "gets fresh facts: %lld s old", age);
	ok(error == NULL, "the read did not fail");
	ok(!virt_facts_refreshing(v), "and starts no read (they are fresh)");
	is_int((int)virt_facts_reads(v), 1, "still one read in all");

	virt_close(v);
	free(why);
	virt_fixture_cleanup(&f);
	return tap_done();
}
