/*
 * virt_fixture: what the unit tests of vm/virt.c on libvirt's test driver
 * (test:///FILE, in-process) share: a temporary directory and event base,
 * one host's node definition with one domain (fleet-a), a domain event
 * callback that ignores every event, and a way to run the loop a while.
 */
#ifndef FLEET_TESTS_VIRT_FIXTURE_H
#define FLEET_TESTS_VIRT_FIXTURE_H

#include <event2/event.h>

#include "vm/virt.h"

/* One test's host: its directory, loop, and the test:// URI of its definition. */
struct virt_fixture {
	char dir[64];			/* /tmp/NAME.XXXXXX */
	struct event_base *base;
	char *path;			/* DIR/node.xml: setup does not write it (the host is not up yet) */
	char *uri;			/* test://PATH */
};

/* Make f's directory (/tmp/NAME.XXXXXX) and event base and name its host; 0,
 * or -1 with nothing left to clean up. */
int virt_fixture_setup(struct virt_fixture *f, const char *name);

/* Remove f's host definition and directory, free the rest. */
void virt_fixture_cleanup(struct virt_fixture *f);

/* Run base's events for ms milliseconds (the loop a reader lives on). */
void virt_fixture_run_for(struct event_base *base, int ms);

/* The host test:///FILE reads: one domain, fleet-a. */
extern const char virt_fixture_node_xml[];

/* Write virt_fixture_node_xml to path (the host "comes up"); 0, or -1. */
int virt_fixture_write_node(const char *path);

/* A virt_event_fn for virt_open: these tests watch no domain event. */
void virt_fixture_on_event(void *userdata, const char *domain, enum virt_event_kind kind);

#endif
