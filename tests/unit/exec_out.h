/*
 * exec_out: what the user backend's unit tests keep of one exec, through the
 * exec callbacks (backend/backend.h): its stdout and stderr, cut at the
 * buffers' size and always NUL-terminated, and its result with its reason.
 */
#ifndef FLEET_TESTS_EXEC_OUT_H
#define FLEET_TESTS_EXEC_OUT_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"

struct exec_out {
	char out[65536], err[8192];
	size_t lo, le;
	bool done;
	struct exec_result res;		/* res.why points at why, or is NULL */
	char why[512];
};

/* exec_callbacks.on_output: append to o->out or o->err, what fits. */
static inline void exec_out_on_output(void *ud, enum exec_stream s, const char *data, size_t len)
{
	struct exec_out *o = ud;
	char *buf = s == EXEC_STDOUT ? o->out : o->err;
	size_t cap = s == EXEC_STDOUT ? sizeof(o->out) : sizeof(o->err), *l = s == EXEC_STDOUT ? &o->lo : &o->le;

	if (*l + len >= cap)
		len = cap - 1 - *l;
	memcpy(buf + *l, data, len);
	*l += len;
	buf[*l] = '\0';
}

/* exec_callbacks.on_done: o is done, with r and a copy of its reason. */
static inline void exec_out_on_done(void *ud, const struct exec_result *r)
{
	struct exec_out *o = ud;

	o->done = true;
	o->res = *r;
	snprintf(o->why, sizeof(o->why), "%s", r->why ? r->why : "");
	o->res.why = o->why;
}

#endif
