/*
 * users: a user and its groups as /etc/passwd and /etc/group say, read with
 * glibc's own line parsers (fgetpwent_r, fgetgrent_r) and nothing else.
 * Not getpwnam and friends: agentd is linked statically (configure.ac), and
 * a static glibc's NSS loads the modules nsswitch.conf names (libnss_systemd,
 * sss...) into the static program, which crashed it (SIGSEGV on run-as of an
 * unknown user). agentd's users (the guest image's root and agent, a user
 * agent's fleet-NAME made by useradd) are all in the files. fleetctl, static
 * too where it can be (configure.ac), names the control socket's group in
 * doctor with it: a group known only through NSS (sssd, userdb) is shown by
 * number there.
 *
 * The paths are parameters for the unit test (tests/unit/test_users.c);
 * the programs pass USERS_PASSWD and USERS_GROUP.
 */
#ifndef FLEET_COMMON_USERS_H
#define FLEET_COMMON_USERS_H

#include <pwd.h>
#include <stddef.h>
#include <sys/types.h>

#define USERS_PASSWD "/etc/passwd"
#define USERS_GROUP "/etc/group"

/* One passwd entry; pw's strings point into buf, which the holder frees with user_free. */
struct user {
	struct passwd pw;
	char *buf;
};

/*
 * The first entry of the passwd file at path named name (or with uid uid):
 * 0 and *ret filled, -ENOENT when there is none, another -errno when the
 * file cannot be read (a symlink, not a regular file, a line over 1 MiB).
 */
int user_by_name(const char *path, const char *name, struct user *ret);
int user_by_uid(const char *path, uid_t uid, struct user *ret);
void user_free(struct user *u);

/*
 * What initgroups(3) would give user, from the group file at path: gid
 * (the passwd entry's) first, then the gid of every group that lists user
 * as a member, each once. *ret is malloc'ed, the caller's; *n its count.
 * 0 or -errno (the file cannot be read).
 */
int user_groups(const char *path, const char *user, gid_t gid, gid_t **ret, size_t *n);

/*
 * The name of the first group with gid gid in the group file at path, copied
 * into buf (size bytes, NUL-terminated): 0, -ENOENT when no line has that
 * gid, -ERANGE when the name does not fit in buf (buf is then ""), another
 * -errno when the file cannot be read (as user_by_name). buf is "" on every
 * failure, so a caller may show the number instead.
 */
int group_name_by_gid(const char *path, gid_t gid, char *buf, size_t size);

#endif
