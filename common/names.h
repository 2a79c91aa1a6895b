/*
 * names: the one definition of a valid agent (and snapshot) name, used by
 * fleetctl before sending and by fleetd before touching any state. Names
 * become Unix user names, libvirt domain names and directory names, so the
 * alphabet is deliberately narrow.
 */
#ifndef FLEET_NAMES_H
#define FLEET_NAMES_H

#include <stdbool.h>
#include <stddef.h>

#define AGENT_NAME_MAX 32

/* 0 when name is [a-z][a-z0-9-]{0,31}; else -EINVAL and *why says what is wrong. */
int agent_name_check(const char *name, const char **why);

/* Snapshot names: [a-zA-Z0-9][a-zA-Z0-9._-]{0,63}, no "..". */
int snapshot_name_check(const char *name, const char **why);

/*
 * An environment entry NAME=VALUE whose NAME is a shell variable name,
 * [A-Za-z_][A-Za-z0-9_]*: what every layer that passes an exec's
 * environment on (ssh.c, agentd run-as, the user launcher) accepts.
 */
bool env_entry_valid(const char *entry);

#define MEMORY_KEY_MAX 128

/*
 * A memory store key (agentd memory, the API, fleetctl): 1 to
 * MEMORY_KEY_MAX of [A-Za-z0-9._-], not starting with '.', so a plain file
 * name in ~/memory: no '/', no "..", never one of the store's dot-named
 * temp files.
 */
bool memory_key_valid(const char *key);

#endif
