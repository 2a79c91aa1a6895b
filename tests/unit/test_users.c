/*
 * common/users.c: users and their groups from passwd and group files in a
 * temp dir, as agentd and fleetctl read /etc/passwd and /etc/group (no NSS):
 * the first entry wins, comments and malformed lines are skipped, a line
 * longer than the first buffer is read whole, an unknown user or gid is
 * -ENOENT, a group name too long for the caller's buffer is -ERANGE, and a
 * symlink or a FIFO in the file's place is refused, never followed or
 * waited on.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/users.h"
#include "tests/tap.h"

static char dir[] = "/tmp/test_users.XXXXXX";
static char passwd_path[64], group_path[64];

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(text, f) == EOF || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

/* The groups as "g1 g2 ...", or "error N". */
static const char *groups_of(const char *path, const char *user, gid_t gid)
{
	static char out[512];
	gid_t *v = NULL;
	size_t n = 0, len = 0;
	int r = user_groups(path, user, gid, &v, &n);

	if (r < 0) {
		snprintf(out, sizeof(out), "error %d", -r);
		return out;
	}
	out[0] = '\0';
	for (size_t i = 0; i < n && len < sizeof(out) - 16; i++)
		len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%u", i ? " " : "", (unsigned)v[i]);
	free(v);
	return out;
}

static void test_passwd(void)
{
	struct user u;
	char *big, *line;
	size_t gecos = 20000;

	write_file(passwd_path,
		   "# a comment\n"
		   "\n"
		   "root:x:0:0:root:/root:/usr/bin/agentd\n"
		   "broken line without colons\n"
		   "agent:x:1000:1000:fleet agent:/home/agent:/bin/sh\n"
		   "agent:x:1001:1001:a second agent, never seen:/elsewhere:/bin/false\n"
		   "nohome:x:1002:1002:::\n");
	is_int(user_by_name(passwd_path, "agent", &u), 0, "agent is found");
	is_int(u.pw.pw_uid, 1000, "  its uid");
	is_int(u.pw.pw_gid, 1000, "  its gid");
	is_str(u.pw.pw_dir, "/home/agent", "  its home (the first entry of that name wins)");
	is_str(u.pw.pw_shell, "/bin/sh", "  its shell");
	user_free(&u);
	is_int(user_by_uid(passwd_path, 0, &u), 0, "uid 0 is found");
	is_str(u.pw.pw_name, "root", "  as root");
	user_free(&u);
	is_int(user_by_name(passwd_path, "nohome", &u), 0, "an entry with empty fields is found");
	is_str(u.pw.pw_dir, "", "  its home is empty, not NULL");
	user_free(&u);
	is_int(user_by_name(passwd_path, "nosuch", &u), -ENOENT, "an unknown user: -ENOENT");
	is_int(user_by_uid(passwd_path, 4242, &u), -ENOENT, "an unknown uid: -ENOENT");
	is_int(user_by_name(passwd_path, "", &u), -ENOENT, "an empty name: -ENOENT");
	is_int(user_by_name(passwd_path, "broken line without colons", &u), -ENOENT, "a malformed line is no user");

	/* A GECOS of 20000 bytes: far over the first buffer (4096, a third of it for the line). */
	big = malloc(gecos + 1);
	line = malloc(gecos + 256);
	memset(big, 'g', gecos);
	big[gecos] = '\0';
	snprintf(line, gecos + 256, "root:x:0:0:root:/root:/bin/sh\nlong:x:77:78:%s:/home/long:/bin/sh\n", big);
	write_file(passwd_path, line);
	is_int(user_by_name(passwd_path, "long", &u), 0, "a 20000-byte line is read whole");
	is_int(strlen(u.pw.pw_gecos), gecos, "  its GECOS in full");
	is_str(u.pw.pw_dir, "/home/long", "  and the fields after it");
	user_free(&u);
	free(line);
	free(big);

	/* Over the 1 MiB cap: an error, not a user and not a crash. */
	big = malloc((2u << 20) + 64);
	memset(big, 'g', 2u << 20);
	memcpy(big, "huge:x:1:1:", 11);
	strcpy(big + (2u << 20), ":/h:/bin/sh\n");
	write_file(passwd_path, big);
	is_int(user_by_name(passwd_path, "huge", &u), -E2BIG, "a line over 1 MiB: -E2BIG");
	free(big);
}

static void test_groups(void)
{
	char many[8192];
	size_t len;

	write_file(group_path,
		   "root:x:0:\n"
		   "wheel:x:10:agent,other\n"
		   "# comment:x:11:agent\n"
		   "garbage\n"
		   "audio:x:29:other\n"
		   "agent:x:1000:agent\n"
		   "video:x:44:other,agent\n"
		   "wheel-again:x:10:agent\n"
		   "agentish:x:50:agent2\n");
	is_str(groups_of(group_path, "agent", 1000), "1000 10 44",
	       "agent: its own gid first, then each group naming it, once (not agent2's)");
	is_str(groups_of(group_path, "other", 500), "500 10 29 44", "other: likewise");
	is_str(groups_of(group_path, "nobody", 65534), "65534", "a user in no group: its gid alone");

	/* More groups than the first array holds, and a line longer than the first buffer. */
	len = (size_t)snprintf(many, sizeof(many), "root:x:0:\n");
	for (int g = 0; g < 40; g++)
		len += (size_t)snprintf(many + len, sizeof(many) - len, "g%d:x:%d:agent\n", g, 2000 + g);
	write_file(group_path, many);
	{
		gid_t *v;
		size_t n;

		is_int(user_groups(group_path, "agent", 1000, &v, &n), 0, "40 groups are read");
		is_int(n, 41, "  all of them, and the gid");
		is_int(v[40], 2039, "  in file order");
		free(v);
	}
	{
		char *line = malloc(60000), *p = line;

		p += sprintf(p, "crowd:x:300:");
		for (int i = 0; i < 5000; i++)
			p += sprintf(p, "u%d,", i);
		strcpy(p, "agent\n");
		write_file(group_path, line);
		free(line);
	}
	is_str(groups_of(group_path, "agent", 1000), "1000 300", "a member at the end of a 30000-byte line is seen");
}

/* The name of a gid, as fleetctl doctor shows the control socket's group. */
static void test_group_name(void)
{
	char name[32], tiny[4], *line;
	size_t len;

	write_file(group_path,
		   "# fleet:x:4242:\n"
		   "garbage\n"
		   "root:x:0:\n"
		   "fleet:x:4242:alice,bob\n"
		   "fleet-again:x:4242:\n"
		   "longname-group:x:4343:\n");
	is_int(group_name_by_gid(group_path, 4242, name, sizeof(name)), 0, "gid 4242 is named");
	is_str(name, "fleet", "  by its first line, not a comment's");
	is_int(group_name_by_gid(group_path, 0, name, sizeof(name)), 0, "gid 0 is named");
	is_str(name, "root", "  root");
	strcpy(name, "stale");
	is_int(group_name_by_gid(group_path, 5555, name, sizeof(name)), -ENOENT, "a gid without a line: -ENOENT");
	is_str(name, "", "  and the buffer is empty, not what it held");
	is_int(group_name_by_gid(group_path, 4343, tiny, sizeof(tiny)), -ERANGE, "a name longer than the buffer: -ERANGE");
	is_str(tiny, "", "  nothing half-copied");
	is_int(group_name_by_gid(group_path, 4242, tiny, 0), -ERANGE, "a buffer of 0 bytes: -ERANGE, nothing written");

	/* The group wanted after a line far over the first buffer (a group with 5000 members). */
	line = malloc(60000);
	len = (size_t)sprintf(line, "crowd:x:300:");
	for (int i = 0; i < 5000; i++)
		len += (size_t)sprintf(line + len, "u%d,", i);
	strcpy(line + len, "last\nafter:x:301:\n");
	write_file(group_path, line);
	free(line);
	is_int(group_name_by_gid(group_path, 301, name, sizeof(name)), 0, "a gid after a 30000-byte line is found");
	is_str(name, "after", "  with its name");
	is_int(group_name_by_gid(group_path, 300, name, sizeof(name)), 0, "the long line's own gid too");
	is_str(name, "crowd", "  crowd");
}

static void test_refused(void)
{
	char link_path[96], fifo_path[96], missing[96], want[32];
	struct user u;

	write_file(passwd_path, "agent:x:1000:1000::/home/agent:/bin/sh\n");
	snprintf(link_path, sizeof(link_path), "%s/passwd.link", dir);
	snprintf(fifo_path, sizeof(fifo_path), "%s/passwd.fifo", dir);
	snprintf(missing, sizeof(missing), "%s/no-such-file", dir);
	if (symlink(passwd_path, link_path) < 0 || mkfifo(fifo_path, 0600) < 0) {
		perror("symlink/mkfifo");
		exit(1);
	}
	is_int(user_by_name(link_path, "agent", &u), -ELOOP, "a symlink in the file's place is refused (-ELOOP)");
	snprintf(want, sizeof(want), "error %d", ELOOP);
	is_str(groups_of(link_path, "agent", 1000), want, "  for the groups too");
	is_int(user_by_name(fifo_path, "agent", &u), -EINVAL, "a FIFO is refused at once (-EINVAL), not waited on");
	is_int(user_by_name(missing, "agent", &u), -ENOENT, "a missing file: -ENOENT");
	snprintf(want, sizeof(want), "error %d", ENOENT);
	is_str(groups_of(missing, "agent", 1000), want, "  for the groups too");
	{
		char name[32] = "stale";

		is_int(group_name_by_gid(link_path, 0, name, sizeof(name)), -ELOOP, "a group name: a symlink is refused too");
		is_str(name, "", "  the buffer empty");
		is_int(group_name_by_gid(fifo_path, 0, name, sizeof(name)), -EINVAL, "  a FIFO at once (-EINVAL)");
		is_int(group_name_by_gid(missing, 0, name, sizeof(name)), -ENOENT, "  a missing file: -ENOENT");
	}
	unlink(link_path);
	unlink(fifo_path);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(passwd_path, sizeof(passwd_path), "%s/passwd", dir);
	snprintf(group_path, sizeof(group_path), "%s/group", dir);
	test_passwd();
	test_groups();
	test_group_name();
	test_refused();
	unlink(passwd_path);
	unlink(group_path);
	rmdir(dir);
	return tap_done();
}
