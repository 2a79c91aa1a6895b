/*
 * agentd: the helper that runs inside each agent's environment. Today it
 * relays fleetd's control channel (a virtio-serial port) to the guest's
 * sshd and starts the health service (health_server.c); runs execs as the
 * agent user (run-as), health checks (health.c) and the memory store
 * (memory.c). It links libc and libarchive (for memory export/import,
 * parsed here as the agent user); the guest image copies both in.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/names.h"
#include "agentd/become.h"
#include "agentd/frames.h"
#include "agentd/health.h"
#include "agentd/health_server.h"
#include "agentd/memory.h"
#include "agentd/memdisk.h"
#include "agentd/relay.h"
#include "agentd/shell.h"
#include "common/users.h"

/* Where --files-stdin puts the files, as a user agent's sandbox does (user/launch.h). */
#define SECRETS_DIR "/run/secrets"
#define FILES_FRAME_MAX (16u << 20)


static void usage(FILE *out)
{
	fprintf(out,
		"Usage: agentd COMMAND [OPTION]...\n"
		"The in-environment helper of fleet; fleetd starts and talks to it.\n"
		"\n"
		"Commands:\n"
		"  relay [--port NAME] [--to HOST:PORT]\n"
		"        relay the virtio-serial port NAME (default " RELAY_DEFAULT_PORT_NAME ") to the\n"
		"        TCP service at HOST:PORT (default 127.0.0.1:22; HOST a numeric address),\n"
		"        reconnecting for each new host connection; runs until killed\n"
		"\n"
		"  run-as USER [--env NAME=VALUE]... [--env-stdin] [--files-stdin] -- CMD [ARG]...\n"
		"        run CMD as USER in a new session (with the groups /etc/group gives USER;\n"
		"        in HOME), with\n"
		"        a clean environment: HOME, USER, LOGNAME, SHELL and PATH, then each --env,\n"
		"        set only after the drop; fleetd runs every exec through it. --env-stdin\n"
		"        reads the entries from stdin first, --files-stdin then files, which go on\n"
		"        a tmpfs at " SECRETS_DIR " of the command's own ($FLEET_SECRETS_DIR)\n"
		"\n"
		"  -c LINE\n"
		"        as the guest root's login shell: fleetd's exec line (echo $$ >&2; exec\n"
		"        agentd run-as ...) is run here, with no shell; any other LINE by /bin/sh\n"
		"\n"
		"  health\n"
		"        check this environment can do an agent's work: its home has room and\n"
		"        takes a write, and a shell starts; prints 'healthy' and exits 0, or\n"
		"        'unhealthy: WHY' and exits 1\n"
		"\n"
		"  health-server [--port N]\n"
		"        as root: answer health requests ('health USER' on a connection to\n"
		"        " HEALTH_SERVER_ADDR ":N, default %d) with that check run as USER; the relay\n"
		"        starts one at boot; runs until killed\n"
		"\n"
		"  memory [--quota BYTES] ls | get KEY | put KEY | rm KEY | export | import\n"
		"        the agent's memory store, ~/memory of the user it runs as: put reads the\n"
		"        value from stdin and replaces it atomically; export writes the store as a\n"
		"        tar archive, import replaces it with one (no links, devices, setuid bits\n"
		"        or paths out of it); --quota refuses a write that takes it over BYTES\n"
		"\n"
		"  --help     show this help\n"
		"  --version  show the version\n", HEALTH_SERVER_PORT);
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
	{
		struct sockaddr_storage ss;
		socklen_t len;

		if (relay_address(host, (int)port, &ss, &len) < 0) {
			fprintf(stderr, "agentd: --to needs a numeric IPv4 or IPv6 address (agentd looks no names up), not '%s'\n",
				host);
			return 2;
		}
	}
	/*
	 * The relay starts at every boot, as root, before fleetd can run
	 * anything: the memory store's file system grows to its disk here
	 * after fleetd grew the disk (set --memory-quota on a stopped agent).
	 */
	if (geteuid() == 0) {
		int g = memdisk_grow(MEMDISK_STORE);

		if (g < 0)
			fprintf(stderr, "agentd: cannot grow the memory store's file system: %s\n", strerror(-g));
		else if (g > 0)
			fprintf(stderr, "agentd: the memory store's file system grew to its disk\n");
	}
	/* The health service (health_server.h) lives as long as the guest: started with the relay, at boot. */
	if (geteuid() == 0)
		health_server_start();
	if (relay_run(port_name, host, (int)port) < 0)
		return 1;
	return 0;
}

/*
 * Lead a new session, so `kill -9 -PID` (PID: ours, which fleetd read from
 * the shell that exec'd us) ends everything the command starts. Only a
 * process group leader cannot: as setsid(1) does, fork then, and wait for
 * the child to pass on its status. Returns in the process that goes on;
 * -1 when no session could be started.
 */
static int new_session(void)
{
	pid_t pid;
	int status;

	if (setsid() >= 0 || getsid(0) == getpid())
		return 0;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0)
		return setsid() < 0 ? -1 : 0;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			_exit(126);
	if (WIFSIGNALED(status)) {
		signal(WTERMSIG(status), SIG_DFL);
		raise(WTERMSIG(status));
	}
	_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 126);
}

/*
 * --env-stdin: the environment arrives as the first bytes of stdin, never
 * in argv (which every process in the guest can read in /proc): a frame
 * "FLEET-ENV N\n", then N bytes of NAME=VALUE entries, each ending in a
 * NUL (frames.h). *ret: a NULL-terminated array into *buf_ret, kept for
 * putenv; both the caller's. 0, or -1 after printing why.
 */
#define ENV_FRAME_MAX (16u << 20)
static int read_env_frame(char ***ret, char **buf_ret)
{
	char *buf = NULL, **env;
	size_t n = 0, count = 0;

	if (frame_read("FLEET-ENV ", ENV_FRAME_MAX, &buf, &n) < 0 || (n > 0 && buf[n - 1] != '\0'))
		goto bad;
	for (size_t i = 0; i < n; i++)
		count += buf[i] == '\0';
	env = calloc(count + 1, sizeof(*env));
	if (!env)
		goto bad;
	for (size_t i = 0, k = 0; i < n; i += strlen(buf + i) + 1) {
		if (!env_entry_valid(buf + i)) {
			free(env);
			goto bad;
		}
		env[k++] = buf + i;
	}
	*ret = env;
	*buf_ret = buf;
	return 0;
bad:
	free(buf);
	fputs("agentd: run-as: --env-stdin: stdin does not start with a valid environment frame\n", stderr);
	return -1;
}

/*
 * Is name, looked up in $PATH as execvp(3) would (the first executable
 * regular file; a name with a slash as it is), this very program?
 */
static bool path_resolves_to_self(const char *name)
{
	const char *path = getenv("PATH"), *dir, *end;
	char cand[4096];
	struct stat st;

	if (strchr(name, '/'))
		return shell_is_self(name);
	for (dir = path ? path : ""; *dir; dir = *end ? end + 1 : end) {
		end = strchrnul(dir, ':');
		if ((size_t)snprintf(cand, sizeof(cand), "%.*s%s%s", (int)(end - dir), dir, end > dir ? "/" : "",
				     name) >= sizeof(cand))
			continue;
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
			return shell_is_self(cand);
	}
	return false;
}

/*
 * As root still, become pw (with groups, ngroups of them) and exec CMD
 * (argv[cmd]...) with a clean, fixed environment plus the caller's --env
 * entries (argv[first_env] to argv[cmd - 2]) and stdin_env, applied only
 * after the privileges are dropped: nothing the caller sets may reach a
 * process that still runs as root (LD_PRELOAD for ld.so, say). files
 * (files_len bytes; NULL: no --files-stdin) go to the command's tmpfs. The
 * caller owns them all. Returns only on failure.
 */
static int exec_as(const char *user, const struct passwd *pw, const gid_t *groups, size_t ngroups, char **argv,
		   int first_env, int cmd, char **stdin_env, char *files, size_t files_len)
{
	int r;

	/* As root still: the files' tmpfs, in a mount namespace of the command's own. */
	if (files && files_install(files, files_len, SECRETS_DIR, pw->pw_uid, pw->pw_gid) < 0)
		return 126;
	if ((r = become_user(user, pw, groups, ngroups)) != 0)
		return r;
	if (files && setenv("FLEET_SECRETS_DIR", SECRETS_DIR, 1) < 0)
		return 126;
	/* Now, as the user: the caller's entries, which may override the above. */
	for (int i = first_env; i < cmd - 1; i += 2) {
		if (strcmp(argv[i], "--env-stdin") == 0 || strcmp(argv[i], "--files-stdin") == 0) {
			i--;
			continue;
		}
		if (putenv(argv[i + 1]) != 0)
			return 126;
	}
	for (size_t i = 0; stdin_env && stdin_env[i]; i++)
		if (putenv(stdin_env[i]) != 0)
			return 126;
	/*
	 * `agentd health` (fleetd's default check, before every snapshot) is
	 * this program: run it here, as the user already, rather than start
	 * agentd a second time. Only when execvp would have run this very
	 * file; an agentd of the agent's own earlier in PATH still runs.
	 */
	if (argv[cmd + 1] && strcmp(argv[cmd + 1], "health") == 0 && !argv[cmd + 2] && path_resolves_to_self(argv[cmd]))
		exit(health_run(NULL));
	execvp(argv[cmd], argv + cmd);
	fprintf(stderr, "agentd: %s: %s\n", argv[cmd], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}

/*
 * In a new session, look USER up in /etc/passwd and its groups in
 * /etc/group (become.h; users.h: no NSS in a static agentd), then exec_as. Returns
 * only on failure: 126, and an unknown user or unreadable file says so.
 */
static int run_as_exec(const char *user, char **argv, int first_env, int cmd, char **stdin_env, char *files,
		       size_t files_len)
{
	struct user u;
	gid_t *groups;
	size_t ngroups;
	int r;

	if (new_session() < 0) {
		fprintf(stderr, "agentd: run-as %s: cannot start a session: %s\n", user, strerror(errno));
		return 126;
	}
	if ((r = become_lookup(user, &u, &groups, &ngroups)) != 0)
		return r;
	r = exec_as(user, &u.pw, groups, ngroups, argv, first_env, cmd, stdin_env, files, files_len);
	free(groups);
	user_free(&u);
	return r;
}

/*
 * Become USER and exec CMD with a clean, fixed environment plus the
 * caller's --env entries, applied only after the privileges are dropped:
 * nothing the caller sets may reach a process that still runs as root
 * (LD_PRELOAD for ld.so, say): run_as_exec. Returns only on failure.
 */
static int cmd_run_as(int argc, char **argv)
{
	static const char usage_line[] =
		"agentd: usage: agentd run-as USER [--env NAME=VALUE]... [--env-stdin] [--files-stdin] -- CMD [ARG]...\n";
	const char *user;
	char **stdin_env = NULL, *env_buf = NULL, *files = NULL;
	size_t files_len = 0;
	bool env_stdin = false, files_stdin = false;
	int first_env, cmd, r;

	/* What we were started with is the caller's; none of it is used. */
	if (clearenv() != 0)
		return 126;
	if (argc < 2) {
		fputs(usage_line, stderr);
		return 2;
	}
	user = argv[1];
	first_env = 2;
	for (cmd = first_env; cmd < argc && strcmp(argv[cmd], "--") != 0; cmd += 2) {
		if (strcmp(argv[cmd], "--env-stdin") == 0 && !env_stdin) {
			env_stdin = true;
			cmd--;
			continue;
		}
		if (strcmp(argv[cmd], "--files-stdin") == 0 && !files_stdin) {
			files_stdin = true;
			cmd--;
			continue;
		}
		if (strcmp(argv[cmd], "--env") != 0 || cmd + 1 >= argc || !env_entry_valid(argv[cmd + 1])) {
			fputs(usage_line, stderr);
			return 2;
		}
	}
	if (++cmd >= argc) {
		fputs(usage_line, stderr);
		return 2;
	}
	/* Before anything else reads stdin: the rest of it is the command's. */
	if (env_stdin && read_env_frame(&stdin_env, &env_buf) < 0)
		return 2;
	if (files_stdin && frame_read("FLEET-FILES ", FILES_FRAME_MAX, &files, &files_len) < 0) {
		fputs("agentd: run-as: --files-stdin: stdin does not hold a valid files frame\n", stderr);
		r = 2;
	} else {
		r = run_as_exec(user, argv, first_env, cmd, stdin_env, files, files_len);
	}
	/*
	 * Only on failure, just before exit. Freed all the same: a leak here
	 * made LeakSanitizer turn the exit status (126, 2) into its own (1).
	 * After a failed execvp the environment points into env_buf; nothing
	 * reads it again.
	 */
	free(files);
	free(stdin_env);
	free(env_buf);
	return r;
}

static int cmd_health_server(int argc, char **argv)
{
	long port = HEALTH_SERVER_PORT;
	char *end;

	if (argc == 3 && strcmp(argv[1], "--port") == 0) {
		port = strtol(argv[2], &end, 10);
		if (*end || port < 1 || port > 65535) {
			fprintf(stderr, "agentd: health-server: invalid port '%s'\n", argv[2]);
			return 2;
		}
	} else if (argc != 1) {
		fputs("agentd: usage: agentd health-server [--port N]\n", stderr);
		return 2;
	}
	return health_server_run((int)port);
}

int main(int argc, char **argv)
{
	/* The guest root's login shell: dropbear runs `agentd -c LINE` for fleetd's execs. */
	if (shell_invoked(argc, argv))
		return shell_main(argc, argv, cmd_run_as);
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
		return health_run(NULL);
	if (strcmp(argv[1], "health-server") == 0)
		return cmd_health_server(argc - 1, argv + 1);
	if (strcmp(argv[1], "memory") == 0)
		return memory_main(argc - 1, argv + 1);
	fprintf(stderr, "agentd: unknown command '%s'\nTry 'agentd --help'.\n", argv[1]);
	return 2;
}
