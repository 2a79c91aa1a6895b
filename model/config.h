/*
 * config: fleetd's settings. One table lists every key of fleetd.conf; the
 * same table gives each key its command-line option (state_dir is
 * --state-dir), its default, its check and whether SIGHUP may change it.
 * This file parses and validates; it never acts on a setting.
 */
#ifndef FLEET_CONFIG_H
#define FLEET_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

enum config_key {
	CFG_STATE_DIR,
	CFG_SOCKET,
	CFG_SOCKET_GROUP,
	CFG_LOG_LEVEL,
	CFG_LOG_FILE,
	CFG_MAX_BODY,
	CFG_USER_UID_MIN,
	CFG_USER_UID_MAX,
	CFG_LIBVIRT_URI,
	CFG_IMAGE_DIR,
	CFG_VM_BOOT_TIMEOUT,
	CFG_MAX_CONNECTIONS,
	CFG_REQUEST_TIMEOUT,
	CFG_VM_CONSOLE_MAX,
	CFG_RESTART_BACKOFF,
	CFG_RESTART_BACKOFF_MAX,
	CFG_HOOKS_PUBLIC_URL,
	CFG_EVENTS_KEEP_DAYS,
	CFG_MAX_CONCURRENT_RUNS,
	CFG_HOOKS_LISTEN,
	CFG_HOOKS_USER,
	CFG_HOOKS_MAX_CONNECTIONS,
	CFG_HOOKS_MAX_PER_SOURCE,
	CFG_HOOKS_REQUEST_TIMEOUT,
	CFG_HOOKS_HEADER_MAX,
	CFG_USER_NAT_SUBNET,
	CFG_USER_DNS,
	CFG_USER_NAT_SUBNET6,
	CFG_BOOT_CONCURRENCY,
	CFG_WATCH_BUFFER,
	CFG_METRICS_LISTEN,
	CFG_METRICS_ALLOW_REMOTE,
	CFG_HOST_POOL_DIR,
	CFG__COUNT,
};

enum config_source { CFG_FROM_DEFAULT, CFG_FROM_FILE, CFG_FROM_CMDLINE };

struct config_def {
	const char *key;	/* name in fleetd.conf */
	const char *option;	/* long option, without "--" */
	const char *metavar;
	const char *def;	/* default value */
	bool reloadable;	/* SIGHUP may change it */
	const char *help;
	/* 0 if value is acceptable, else -EINVAL with *why set. NULL for an integer key. */
	int (*check)(const char *value, const char **why);
	/*
	 * An integer key (what set): a whole number from min to max; else
	 * refused as "must be WHAT from MIN to MAX" ("a number of bytes").
	 */
	struct config_range {
		long min, max;
		const char *what;
	} range;
};

struct config {
	char *value[CFG__COUNT];
	enum config_source source[CFG__COUNT];
	int line[CFG__COUNT];	/* line in the file, when from the file */
	char *path;		/* the file read, or NULL */
};

extern const struct config_def config_defs[CFG__COUNT];

#define DEFAULT_CONFIG_PATH "/etc/fleet/fleetd.conf"

/* Start from the defaults. */
void config_init(struct config *c);
void config_free(struct config *c);
void config_copy(struct config *dst, const struct config *src);

/* Set key from the command line; -EINVAL (why set) or -ENOENT for an unknown key. */
int config_set(struct config *c, enum config_key key, const char *value,
	       enum config_source source, int line, const char **why);

/*
 * Read path over c. A missing file is fine when must_exist is false.
 * Returns the number of errors (0 on success); each error is appended to
 * *errors as "FILE:LINE: message\n" (caller frees).
 */
int config_read_file(struct config *c, const char *path, bool must_exist, char **errors);

/* Build the effective config: defaults, then the file, then overrides. Returns the error count. */
int config_load(struct config *out, const char *path, bool must_exist,
		const struct config *cmdline, char **errors);

const char *config_get(const struct config *c, enum config_key key);
long config_get_long(const struct config *c, enum config_key key);

/* Print the effective config in fleetd.conf syntax, with where each value came from. */
void config_print(const struct config *c, FILE *out);

#endif
