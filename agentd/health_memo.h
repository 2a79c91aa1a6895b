/*
 * health_memo: the health service's memory of a start of /bin/sh that
 * passed, so that its next checks skip the shell's start (10 ms of the
 * check's 11 under TCG, docs/benchmarks.md) while nothing it depends on
 * has changed, and run it again as soon as anything has.
 *
 * What a start depends on, read before each check as the checking user
 * (the key): who runs it (uid, gid, groups); /bin/sh's resolved path; the
 * stat (device, inode, mode, owner, size, mtime, ctime) of every directory
 * on /bin/sh's path and on that resolved path, and of the file itself; the
 * flags and id of its file system (noexec, a remount). A key that cannot be
 * read (a path gone, too long) holds nothing: the shell runs. Only a
 * static ELF file is remembered (no PT_INTERP): a dynamic shell's loader
 * and libraries are not in the key, so it runs every time; nor a key with
 * a time less than a second old (a file's times move by the kernel's
 * coarse tick: two changes within one could leave the same ctime). A check
 * whose shell did not run forgets what was kept.
 *
 * The memo is one shared page the service maps before it forks its
 * children (health_server.c); each child reads and updates it. It lives
 * in the guest's memory, so a checkpoint of the guest holds it with the
 * disk it describes, and a boot starts without one. A busy page (another
 * child updating it) counts as no memo: the shell runs. Only the service
 * and its children map it: a child that dropped to the user is not
 * dumpable (its uid changed), so the user cannot reach it through ptrace
 * or /proc/PID/mem, and the shell's exec leaves it behind.
 */
#ifndef FLEET_AGENTD_HEALTH_MEMO_H
#define FLEET_AGENTD_HEALTH_MEMO_H

#include <stdbool.h>

struct health_memo;
struct health_memo_key;

/* A new, empty memo shared with the caller's children to come; NULL if it cannot be mapped. */
struct health_memo *health_memo_new(void);

/* The key of a start of shell (an absolute path: /bin/sh) by the caller, now; NULL when it cannot be read. free() it. */
struct health_memo_key *health_memo_key_read(const char *shell);

/* Whether a start with key k passed before and nothing in k has changed since. */
bool health_memo_holds(struct health_memo *m, const struct health_memo_key *k);

/*
 * After a start read with key k (read before it): keep k if it passed,
 * every time in k is a second old and the shell is a static ELF file; else
 * forget what was kept.
 */
void health_memo_update(struct health_memo *m, const struct health_memo_key *k, bool passed);

#endif
