/*
 * dir_count: how many entries a directory holds (never . or ..), for the
 * tests that check what a command left beside or inside a store.
 */
#ifndef FLEET_TESTS_DIR_COUNT_H
#define FLEET_TESTS_DIR_COUNT_H

#include <dirent.h>
#include <string.h>

/* Entries of dir whose names start with prefix (NULL: any) and are not skip (NULL: none); -1 if unreadable. */
static int dir_count(const char *dir, const char *prefix, const char *skip)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		     (!prefix || strncmp(e->d_name, prefix, strlen(prefix)) == 0) && (!skip || strcmp(e->d_name, skip));
	closedir(d);
	return n;
}

#endif
