/*
 * fleetctl doctor: fleetd's findings about the host (GET /v1/doctor), after
 * the ones only the client can make: can it reach the control socket, and
 * what owns it. Without fleetd, it says so (FAIL, with the fix) and checks
 * what it can from here. Exit 1 when any line is FAIL.
 */
#include "ctl/commands.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/timex.h>
#include <unistd.h>

#include "common/users.h"
#include "ctl/http_client.h"

struct findings {
	json_t *list;
	bool failed, warned;
};

static void add(struct findings *fs, const char *check, const char *status, const char *fix, const char *fmt, ...)
	_printf_(5, 6);
static void add(struct findings *fs, const char *check, const char *status, const char *fix, const char *fmt, ...)
{
	_cleanup_free_ char *detail = NULL;
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&detail, fmt, ap) < 0)
		detail = NULL;
	va_end(ap);
	json_array_append_new(fs->list, json_pack("{s:s, s:s, s:s, s:s?}", "check", check, "status", status, "detail",
						  detail ? detail : "?", "fix", fix));
	fs->failed |= strcmp(status, "FAIL") == 0;
	fs->warned |= strcmp(status, "WARN") == 0;
}

static bool in_group(gid_t gid)
{
	gid_t groups[256];
	int n;

	if (getegid() == gid)
		return true;
	n = getgroups(ARRAY_SIZE(groups), groups);
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			return true;
	return false;
}

/*
 * Who may connect: the socket's owner, group and mode, and whether this user is one of them.
 * The group is named from /etc/group itself (common/users.h: fleetctl may be static, with no
 * NSS); a gid without a line there (or known only to sssd, userdb...) is shown by number.
 */
static void check_socket_group(struct ctl *ctl, struct findings *fs)
{
	struct stat st;
	char gname[64];

	if (lstat(ctl->socket, &st) < 0 || !S_ISSOCK(st.st_mode))
		return;
	if (group_name_by_gid(USERS_GROUP, st.st_gid, gname, sizeof(gname)) < 0)
		snprintf(gname, sizeof(gname), "%u", (unsigned)st.st_gid);
	if (geteuid() == 0 || geteuid() == st.st_uid)
		add(fs, "socket-group", "OK", NULL, "group %s, mode %04o; you own it or are root", gname,
		    (unsigned)(st.st_mode & 07777));
	else if ((st.st_mode & 0020) && in_group(st.st_gid))
		add(fs, "socket-group", "OK", NULL, "group %s, mode %04o; you are in group %s", gname,
		    (unsigned)(st.st_mode & 07777), gname);
	else
		add(fs, "socket-group", "FAIL",
		    "run as root, or set socket_group in fleetd.conf and add yourself to that group "
		    "(usermod -aG GROUP USER; log in again)",
		    "group %s, mode %04o: you may not connect", gname, (unsigned)(st.st_mode & 07777));
}

/* Without fleetd: what can be seen from here. */
static void check_local(struct findings *fs)
{
	struct timex tx = { .modes = 0 };
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);

	if (fd >= 0) {
		close(fd);
		add(fs, "kvm", "OK", NULL, "/dev/kvm opens (seen by fleetctl; fleetd checks it further)");
	} else {
		add(fs, "kvm", "WARN", "enable virtualisation in the firmware and load kvm_intel or kvm_amd",
		    "/dev/kvm: %s: VM guests would run under TCG, several times slower", strerror(errno));
	}
	if (adjtimex(&tx) == TIME_ERROR)
		add(fs, "clock", "WARN", "enable time synchronisation: timedatectl set-ntp true",
		    "the clock is not synchronised");
	else
		add(fs, "clock", "OK", NULL, "synchronised");
}

static void print_line(json_t *c)
{
	json_t *fix = json_object_get(c, "fix");

	printf("%-4s %-17s %s\n", str(c, "status"), str(c, "check"), str(c, "detail"));
	if (json_is_string(fix))
		printf("     %-17s fix: %s\n", "", json_string_value(fix));
}

int cmd_doctor(struct ctl *ctl, const struct command *cmd, int argc, char **argv)
{
	struct findings fs = { .list = json_array() };
	struct http_response resp = { 0 };
	json_t *answer = NULL, *checks, *c;
	size_t i;
	int status, r;

	if (!no_args(cmd, argc, argv, help_only, no_opts, NULL, &status)) {
		json_decref(fs.list);
		return status;
	}
	r = http_request(ctl->socket, "GET", "/v1/doctor", NULL, &resp);
	if (r == -ENOENT || r == -ECONNREFUSED) {
		add(&fs, "fleetd", "FAIL", "start it: systemctl start fleetd (or fleetd --state-dir DIR --socket PATH)",
		    "fleetd is not running: nothing listens at %s (%s)", ctl->socket, strerror(-r));
		check_local(&fs);
	} else if (r < 0) {
		add(&fs, "fleetd", "FAIL", r == -EACCES ? "see the socket-group line" : "check the -s SOCKET path",
		    "cannot talk to fleetd at %s: %s", ctl->socket, strerror(-r));
		check_socket_group(ctl, &fs);
		check_local(&fs);
	} else if (resp.status != 200 || !(answer = json_loadb(resp.body, resp.body_len, 0, NULL)) ||
		   !json_is_array(checks = json_object_get(answer, "checks"))) {
		const char *msg = json_string_value(json_object_get(answer, "error"));

		add(&fs, "fleetd", "FAIL", "read fleetd's log (journalctl -u fleetd)",
		    "fleetd at %s answered %d: %s", ctl->socket, resp.status, msg ? msg : "no findings");
	} else {
		add(&fs, "fleetd", "OK", NULL, "fleetd answers at %s", ctl->socket);
		check_socket_group(ctl, &fs);
		json_array_foreach(checks, i, c) {
			json_array_append(fs.list, c);
			fs.failed |= strcmp(str(c, "status"), "FAIL") == 0;
			fs.warned |= strcmp(str(c, "status"), "WARN") == 0;
		}
	}
	json_decref(answer);
	http_response_free(&resp);
	if (ctl->json) {
		json_t *out = json_pack("{s:s, s:O}", "status",
				       fs.failed ? "FAIL" : fs.warned ? "WARN" : "OK", "checks", fs.list);
		print_json(out);
		json_decref(out);
	} else {
		json_array_foreach(fs.list, i, c)
			print_line(c);
	}
	json_decref(fs.list);
	return fs.failed ? 1 : 0;
}
