/* host: see host.h. */
#include <stdlib.h>

#include "model/host.h"

void host_facts_clear(struct host_facts *f)
{
	free(f->error);
	*f = (struct host_facts){ .free_memory_bytes = -1, .age_s = -1, .refreshing_s = -1 };
}

void host_clear(struct host *h)
{
	free(h->name);
	free(h->uri);
	host_facts_clear(&h->facts);
	*h = (struct host){ .facts.free_memory_bytes = -1, .facts.age_s = -1 };
}

void host_list_free(struct host *v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		host_clear(&v[i]);
	free(v);
}
