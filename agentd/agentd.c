/*
 * agentd: the helper that runs inside each agent's environment. Today it
 * relays fleetd's control channel (a virtio-serial port) to the guest's
 * sshd; later issues give it run, health and memory. It links against libc
 * only, so the guest image needs nothing else for it.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "relay.h"


static void usage(FILE *out)
{
	fprintf(out,
		"Usage: agentd COMMAND [OPTION]...\n"
		"The in-environment helper of fleet; fleetd starts and talks to it.\n"
		"\n"
		"Commands:\n"
		"  relay [--port NAME] [--to HOST:PORT]\n"
		"        relay the virtio-serial port NAME (default " RELAY_DEFAULT_PORT_NAME ") to the\n"
		"        TCP service at HOST:PORT (default 127.0.0.1:22), reconnecting for each\n"
		"        new host connection; runs until killed\n"
		"\n"
		"  run-as USER -- CMD [ARG]...\n"
		"        run CMD as USER (no supplementary groups; HOME, USER and PATH set; in HOME);\n"
		"        fleetd's exec uses it to drop from root to the agent user\n"
		"\n"
		"  health\n"
		"        check this environment can do an agent's work: its home has room and\n"
		"        takes a write, and a shell starts; prints 'healthy' and exits 0, or\n"
		"        'unhealthy: WHY' and exits 1\n"
		"\n"
		"  --help     show this help\n"
		"  --version  show the version\n");
}

static int cmd_relay(int argc, char **argv)
{
	const char *port_name = RELAY_DEFAULT_PORT_NAME;
	char host[256] = "127.0.0.1";
	long port = 22;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
			port_name = argv[++i];
		} else if (strcmp(argv[i], "--to") == 0 && i + 1 < argc) {
			const char *to = argv[++i], *colon = strrchr(to, ':');
			char *end;

			if (!colon || (size_t)(colon - to) >= sizeof(host) || colon == to) {
				fprintf(stderr, "agentd: --to needs HOST:PORT, not '%s'\n", to);
				return 2;
			}
			memcpy(host, to, (size_t)(colon - to));
			host[colon - to] = '\0';
			port = strtol(colon + 1, &end, 10);
			if (*end || port < 1 || port > 65535) {
				fprintf(stderr, "agentd: invalid port in '%s'\n", to);
				return 2;
			}
		} else {
			fprintf(stderr, "agentd: relay: unexpected argument '%s'\n", argv[i]);
			return 2;
		}
	}
	if (relay_run(port_name, host, (int)port) < 0)
		return 1;
	return 0;
}

/* Become user and exec argv; returns only on failure. */
static int cmd_run_as(int argc, char **argv)
{
	struct passwd *pw;

	if (argc < 4 || strcmp(argv[2], "--") != 0) {
		fprintf(stderr, "agentd: usage: agentd run-as USER -- CMD [ARG]...\n");
		return 2;
	}
	pw = getpwnam(argv[1]);
	if (!pw) {
		fprintf(stderr, "agentd: run-as: no user '%s'\n", argv[1]);
		return 126;
	}
	if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0) {
		fprintf(stderr, "agentd: run-as %s: cannot drop privileges: %s\n", argv[1], strerror(errno));
		return 126;
	}
	if (setuid(0) == 0 && pw->pw_uid != 0) {
		fprintf(stderr, "agentd: run-as %s: privileges could be regained; refusing\n", argv[1]);
		return 126;
	}
	if (chdir(pw->pw_dir) < 0 && chdir("/") < 0)
		return 126;
	setenv("HOME", pw->pw_dir, 1);
	setenv("USER", pw->pw_name, 1);
	setenv("LOGNAME", pw->pw_name, 1);
	/* What the agent installs for itself lives in /usr/local/bin and ~/.local/bin. */
	{
		char path[512];
		snprintf(path, sizeof(path), "%s/.local/bin:/usr/local/bin:/usr/bin:/bin", pw->pw_dir);
		setenv("PATH", path, 1);
	}
	execvp(argv[3], argv + 3);
	fprintf(stderr, "agentd: %s: %s\n", argv[3], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}

static int unhealthy(const char *why, const char *what)
{
	printf("unhealthy: %s%s%s\n", why, what ? ": " : "", what ? what : "");
	return 1;
}

/* The checks fleetd's default health check runs; each failure says which. */
static int cmd_health(void)
{
	const char *home = getenv("HOME");
	char path[4096];
	struct statvfs vfs;
	int fd, status;
	pid_t pid;

	if (!home || !*home)
		home = "/";
	if (statvfs(home, &vfs) < 0)
		return unhealthy("cannot stat the home file system", strerror(errno));
	if ((unsigned long long)vfs.f_bavail * vfs.f_frsize < (1ULL << 20))
		return unhealthy("less than 1 MiB free in", home);
	if (vfs.f_files > 0 && vfs.f_favail < 16)
		return unhealthy("no free inodes in", home);
	snprintf(path, sizeof(path), "%s/.fleet-health.%ld", home, (long)getpid());
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return unhealthy("cannot write to the home", strerror(errno));
	if (write(fd, "ok\n", 3) != 3 || fsync(fd) < 0) {
		close(fd);
		unlink(path);
		return unhealthy("cannot write to the home", strerror(errno));
	}
	close(fd);
	unlink(path);
	pid = fork();
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", "exit 0", (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return unhealthy("/bin/sh does not run", NULL);
	puts("healthy");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("agentd %s\n", PACKAGE_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "relay") == 0)
		return cmd_relay(argc - 1, argv + 1);
	if (strcmp(argv[1], "run-as") == 0)
		return cmd_run_as(argc - 1, argv + 1);
	if (strcmp(argv[1], "health") == 0)
		return cmd_health();
	fprintf(stderr, "agentd: unknown command '%s'\nTry 'agentd --help'.\n", argv[1]);
	return 2;
}
