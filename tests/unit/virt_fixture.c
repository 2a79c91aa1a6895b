/* virt_fixture: see virt_fixture.h. */
#include "tests/unit/virt_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/util.h"

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

int virt_fixture_setup(struct virt_fixture *f, const char *name)
{
	*f = (struct virt_fixture){ 0 };
	if (snprintf(f->dir, sizeof(f->dir), "/tmp/%s.XXXXXX", name) >= (int)sizeof(f->dir) || !mkdtemp(f->dir))
		return -1;
	if (!(f->base = event_base_new())) {
		rmdir(f->dir);
		return -1;
	}
	f->path = xasprintf("%s/node.xml", f->dir);
	f->uri = xasprintf("test://%s", f->path);
	return 0;
}

void virt_fixture_cleanup(struct virt_fixture *f)
{
	unlink(f->path);
	rmdir(f->dir);
	free(f->path);
	free(f->uri);
	event_base_free(f->base);
	*f = (struct virt_fixture){ 0 };
}

void virt_fixture_run_for(struct event_base *base, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
}
