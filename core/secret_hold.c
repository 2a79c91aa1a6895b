/* secret_hold: see secret_hold.h. */
#include "core/secret_hold.h"

#include <string.h>

#include "common/util.h"
#include "model/fleetd.h"

struct secret_hold {
	struct secret_hold *next;
	char *agent;
	char *what;
};

void secret_hold_enter(struct fleetd *f, const char *agent, const char *what)
{
	struct secret_hold *h = xcalloc(1, sizeof(*h)), **p = &f->secret_holds;

	h->agent = xstrdup(agent);
	h->what = xstrdup(what);
	while (*p)	/* at the end: the oldest holder is found first */
		p = &(*p)->next;
	*p = h;
}

void secret_hold_leave(struct fleetd *f, const char *agent)
{
	for (struct secret_hold **p = &f->secret_holds; *p; p = &(*p)->next)
		if (strcmp((*p)->agent, agent) == 0) {
			struct secret_hold *h = *p;

			*p = h->next;
			free(h->agent);
			free(h->what);
			free(h);
			return;
		}
}

const char *secret_hold_who(struct fleetd *f, const char *agent)
{
	for (struct secret_hold *h = f->secret_holds; h; h = h->next)
		if (strcmp(h->agent, agent) == 0)
			return h->what;
	return NULL;
}

void secret_hold_free(struct fleetd *f)
{
	while (f->secret_holds)
		secret_hold_leave(f, f->secret_holds->agent);
}
