/*
 * fuzz_config: fleetd.conf (model/config.c) read as fleetd reads it at start
 * and on SIGHUP: config_load on a file (a memfd here, by its /proc path).
 * Checks: errors are counted and reported together (a count and a
 * message per error, each naming the file); a file read without errors
 * prints (config_print, `fleetd --print-config`), and its values written
 * back as "key = value" lines load again, without errors, to the same
 * values (config_print's own lines end in a "# source" comment, which
 * fleetd.conf has no syntax for after a value, so they are not reloaded).
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/config.h"

#define FAIL(what) do { fprintf(stderr, "fuzz_config: %s\n", what); abort(); } while (0)

static int in_fd = -1, out_fd = -1;

static void fd_path(int fd, char *path, size_t cap)
{
	snprintf(path, cap, "/proc/self/fd/%d", fd);
}

static size_t count_lines(const char *s)
{
	size_t n = 0;

	for (; s && *s; s++)
		n += *s == '\n';
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config c, again;
	char path[64], *errors = NULL;
	int nerr;

	if (in_fd < 0 && ((in_fd = memfd_create("fleetd.conf", 0)) < 0 || (out_fd = memfd_create("printed.conf", 0)) < 0))
		FAIL("memfd_create");
	if (ftruncate(in_fd, 0) < 0 || pwrite(in_fd, data, size, 0) != (ssize_t)size)
		FAIL("cannot write the input");
	fd_path(in_fd, path, sizeof(path));
	nerr = config_load(&c, path, true, NULL, &errors);
	if (nerr < 0 || (nerr > 0) != (errors != NULL) || count_lines(errors) < (size_t)nerr)
		FAIL("errors not counted as reported");
	if (errors && strncmp(errors, path, strlen(path)) != 0)
		FAIL("an error that does not name the file");
	free(errors);
	errors = NULL;
	if (nerr == 0) {
		FILE *f;
		char out_path[64];
		if (ftruncate(out_fd, 0) < 0 || lseek(out_fd, 0, SEEK_SET) < 0 || !(f = fdopen(dup(out_fd), "w")))
			FAIL("cannot print");
		for (int i = 0; i < CFG__COUNT; i++)
			if (c.source[i] == CFG_FROM_FILE)
				fprintf(f, "%s = %s\n", config_defs[i].key, config_get(&c, (enum config_key)i));
		fclose(f);
		f = fopen("/dev/null", "w");
		config_print(&c, f);
		fclose(f);
		fd_path(out_fd, out_path, sizeof(out_path));
		if (config_load(&again, out_path, true, NULL, &errors) != 0) {
			fprintf(stderr, "%s", errors ? errors : "");
			FAIL("a printed configuration does not load again");
		}
		for (int i = 0; i < CFG__COUNT; i++)
			if (strcmp(config_get(&c, (enum config_key)i), config_get(&again, (enum config_key)i)) != 0) {
				fprintf(stderr, "%s: '%s' became '%s'\n", config_defs[i].key,
					config_get(&c, (enum config_key)i), config_get(&again, (enum config_key)i));
				FAIL("a value changed through config_print");
			}
		config_free(&again);
	}
	free(errors);
	config_free(&c);
	return 0;
}
