/*
 * virt_fixture: what the unit tests of vm/virt.c on libvirt's test driver
 * (test:///FILE, in-process) share: one host's node definition with one
 * domain (fleet-a) and a domain event callback that ignores every event.
 */
#ifndef FLEET_TESTS_VIRT_FIXTURE_H
#define FLEET_TESTS_VIRT_FIXTURE_H

#include "vm/virt.h"

/* The host test:///FILE reads: one domain, fleet-a. */
extern const char virt_fixture_node_xml[];

/* Write virt_fixture_node_xml to path (the host "comes up"); 0, or -1. */
int virt_fixture_write_node(const char *path);

/* A virt_event_fn for virt_open: these tests watch no domain event. */
void virt_fixture_on_event(void *userdata, const char *domain, enum virt_event_kind kind);

#endif
