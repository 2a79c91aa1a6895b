/*
 * name_table: an enum's words, both ways, for the model's name tables
 * (agent.c, snapshot.c, run.c). names[i] is the word of value i; the words
 * are what the database stores and the API shows, so they never change.
 */
#ifndef FLEET_NAME_TABLE_H
#define FLEET_NAME_TABLE_H

#include <errno.h>
#include <string.h>

/* The word of value v, or "unknown" for a value outside the table. */
static inline const char *name_table_word(const char *const *names, int n, int v)
{
	return v >= 0 && v < n && names[v] ? names[v] : "unknown";
}

/* The value whose word is s; -EINVAL for NULL or a word not in the table (never a guess). */
static inline int name_table_value(const char *const *names, int n, const char *s)
{
	for (int i = 0; s && i < n; i++)
		if (names[i] && strcmp(names[i], s) == 0)
			return i;
	return -EINVAL;
}

#endif
