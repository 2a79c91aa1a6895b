/*
 * secret_files: an agent's secrets as the files of an exec (exec_request's
 * files, written by the backend onto a tmpfs inside the environment), for
 * `exec --secret-files`. The values stay here until freed, wiped then.
 */
#ifndef FLEET_CORE_SECRET_FILES_H
#define FLEET_CORE_SECRET_FILES_H

#include <stddef.h>

#include "backend/backend.h"

struct fleetd;
struct secret_values;

struct secret_files {
	struct exec_file *files;	/* point into values */
	size_t n;
	struct secret_values *values;
};

/* 0 and *ret (free with secret_files_free), or -errno with *why (as secrets_load()). */
int secret_files_load(struct fleetd *f, const char *agent, struct secret_files **ret, char **why);
void secret_files_free(struct secret_files *s);
static inline void secret_files_freep(struct secret_files **s) { secret_files_free(*s); }

#endif
