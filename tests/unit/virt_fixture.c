/* virt_fixture: see virt_fixture.h. */
#include "tests/unit/virt_fixture.h"

#include <stdio.h>

const char virt_fixture_node_xml[] =
	"<node>\n"
	"  <domain type='test'>\n"
	"    <name>fleet-a</name>\n"
	"    <memory>65536</memory>\n"
	"    <os><type>hvm</type></os>\n"
	"  </domain>\n"
	"</node>\n";

int virt_fixture_write_node(const char *path)
{
	FILE *fp = fopen(path, "w");

	if (!fp)
		return -1;
	if (fputs(virt_fixture_node_xml, fp) < 0) {
		fclose(fp);
		return -1;
	}
	return fclose(fp) == 0 ? 0 : -1;
}

void virt_fixture_on_event(void *userdata, const char *domain, enum virt_event_kind kind)
{
	(void)userdata;
	(void)domain;
	(void)kind;
}
