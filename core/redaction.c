/* redaction: see redaction.h. */
#include "core/redaction.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "core/redact.h"
#include "core/secrets.h"

/*
 * Whether "agent/key" was not warned about yet in this process (and now is):
 * the warning once per fleetd run, not at every run and health check. Past
 * SHORT_SEEN_MAX pairs, every further one is warned about again.
 */
#define SHORT_SEEN_MAX 256
static bool short_first_time(const char *agent, const char *key)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static char *seen[SHORT_SEEN_MAX];
	static size_t n_seen;
	_cleanup_free_ char *pair = xasprintf("%s/%s", agent, key);
	bool first = true;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < n_seen && first; i++)
		first = strcmp(seen[i], pair) != 0;
	if (first && n_seen < SHORT_SEEN_MAX)
		seen[n_seen++] = TAKE_PTR(pair);
	pthread_mutex_unlock(&lock);
	return first;
}

int redaction_load(struct fleetd *f, const char *agent, struct redactor **ret, size_t *ret_n, char **why)
{
	_cleanup_(secret_values_freep) struct secret_values *s = NULL;
	const char *const *shorts;
	size_t n_short;
	int r;

	if ((r = secrets_load(f, agent, &s)) < 0) {
		*why = xasprintf("cannot read agent '%s''s secrets to redact its output: %s", agent,
				 r == -EBADMSG ? "a value does not authenticate under this host's key" : strerror(-r));
		return r;
	}
	*ret = redactor_new(s);
	*ret_n = s->n;
	n_short = redactor_short_keys(*ret, &shorts);
	for (size_t i = 0; i < n_short; i++)
		if (short_first_time(agent, shorts[i]))
			log_warning("agent '%s': secret '%s' is shorter than %d bytes: it is not redacted from its output",
				    agent, shorts[i], REDACT_MIN_LEN);
	return 0;
}

char *redaction_text(struct fleetd *f, const char *agent, const char *text, bool cut)
{
	_cleanup_(redactor_freep) struct redactor *r = NULL;
	_cleanup_free_ char *why = NULL;
	size_t n;

	if (!text)
		return NULL;
	if (redaction_load(f, agent, &r, &n, &why) < 0) {
		log_error("%s", why);
		return xstrdup("[fleet: withheld: the agent's secrets could not be read to redact it]");
	}
	return cut ? redact_text_cut(r, text, strlen(text), NULL) : redact_text(r, text, strlen(text), NULL);
}
