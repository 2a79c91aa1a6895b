/*
 * redaction: an agent's secrets taken out of what fleet keeps and shows of
 * its output (core/redact.h does the matching): the redactor of one agent,
 * for a run's log, and one text redacted, for a health detail or a log
 * line that quotes the agent. Output of an agent whose secrets cannot be
 * read is withheld, never shown unredacted.
 */
#ifndef FLEET_CORE_REDACTION_H
#define FLEET_CORE_REDACTION_H

#include <stdbool.h>
#include <stddef.h>

struct fleetd;
struct redactor;

/*
 * agent's redactor (*ret) and how many secrets it has (*ret_n; those too
 * short to redact are logged). 0, or -errno with *why: its secrets cannot
 * be read (secrets_load()). The values themselves are wiped before this
 * returns; the redactor wipes what it derived from them when freed.
 */
int redaction_load(struct fleetd *f, const char *agent, struct redactor **ret, size_t *ret_n, char **why);

/*
 * text with agent's secrets redacted (malloc'd; NULL stays NULL); cut: it
 * was cut at a size limit (redact_text_cut). A note that it was withheld if
 * they cannot be read.
 */
char *redaction_text(struct fleetd *f, const char *agent, const char *text, bool cut);

#endif
