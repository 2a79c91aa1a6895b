/* secret_files: see secret_files.h. */
#include "core/secret_files.h"

#include <errno.h>
#include <string.h>

#include "common/util.h"
#include "core/secrets.h"

int secret_files_load(struct fleetd *f, const char *agent, struct secret_files **ret, char **why)
{
	struct secret_files *s;
	struct secret_values *v = NULL;
	int r;

	if ((r = secrets_load(f, agent, &v)) < 0) {
		*why = r == -EBADMSG ? xasprintf("agent '%s': a stored secret does not decrypt (another host key, a row "
						 "copied from another agent or key, or damage); nothing was started",
						 agent)
				     : xasprintf("agent '%s': cannot load its secrets: %s", agent, strerror(-r));
		return r;
	}
	s = xcalloc(1, sizeof(*s));
	s->values = v;
	s->n = v->n;
	s->files = xcalloc(v->n ? v->n : 1, sizeof(*s->files));
	for (size_t i = 0; i < v->n; i++)
		s->files[i] = (struct exec_file){ v->v[i].key, v->v[i].value, v->v[i].len };
	*ret = s;
	return 0;
}

void secret_files_free(struct secret_files *s)
{
	if (!s)
		return;
	secret_values_free(s->values);	/* wipes them */
	free(s->files);
	free(s);
}
