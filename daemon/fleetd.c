/*
 * fleetd: startup, command line, config (re)loading, signals, the state
 * directory lock and the libevent loop. It wires modules together and owns
 * their lifetimes; it makes no decisions about agents.
 */
#include "model/fleetd.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "api/metrics_http.h"
#include "api/routes.h"
#include "api/server.h"
#include "core/activity.h"
#include "core/autostart.h"
#include "core/backends.h"
#include "core/health.h"
#include "core/backend_host.h"
#include "core/lifecycle.h"
#include "core/metrics.h"
#include "core/restore.h"
#include "core/runs.h"
#include "core/hooks.h"
#include "core/listener.h"
#include "core/schedules.h"
#include "core/secret_hold.h"
#include "core/secrets.h"
#include "core/snapshots.h"
#include "core/watch.h"
#include "store/db.h"
#include "common/log.h"
#include "common/util.h"

enum { OPT_FOREGROUND = 1000, OPT_CONFIG, OPT_CHECK, OPT_HELP, OPT_VERSION, OPT_CONFIG_KEYS, OPT_SETTING, OPT_RESTORE };

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: fleetd [OPTION]...\n"
		"Keep a fleet of isolated, long-lived environments, one per AI agent.\n"
		"\n"
		"  --foreground          stay in the foreground and log to stderr\n"
		"                        (default: detach once the control socket is ready)\n"
		"  --config FILE         config file (default " DEFAULT_CONFIG_PATH "; a missing\n"
		"                        default file is fine, a missing FILE is an error)\n"
		"  --check-config        check the config file and options, print the effective\n"
		"                        configuration and exit (1 on errors, printed as FILE:LINE: ...)\n"
		"  --restore-from DIR    on a state directory without a database: restore the fleet\n"
		"                        from the backup in DIR (fleetctl backup), reading its\n"
		"                        passphrase as the first line of stdin, then start\n"
		"  --help                show this help\n"
		"  --version             show the version\n"
		"\n"
		"Every setting of the config file is also an option, and the option wins:\n");
	for (int i = 0; i < CFG__COUNT; i++) {
		char opt[64];

		snprintf(opt, sizeof(opt), "--%s %s", config_defs[i].option, config_defs[i].metavar);
		fprintf(out, "  %-21s %s\n  %-21s (key '%s', default '%s'%s)\n", opt, config_defs[i].help, "",
			config_defs[i].key, config_defs[i].def, config_defs[i].reloadable ? ", SIGHUP reloads it" : "");
	}
	fprintf(out,
		"\n"
		"Signals: SIGTERM or SIGINT stop fleetd cleanly; SIGHUP re-reads the config file\n"
		"(a bad file keeps the running config and logs why).\n"
		"Control API: curl --unix-socket SOCKET http://fleet/v1/status\n");
}

/* Tell systemd (Type=notify) we are ready, if it is listening. */
static void notify_ready(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_close_ int fd = -1;
	socklen_t len;

	if (!path || (path[0] != '/' && path[0] != '@') || strlen(path) >= sizeof(sa.sun_path))
		return;
	memcpy(sa.sun_path, path, strlen(path));
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0';	/* abstract namespace */
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd >= 0)
		(void)sendto(fd, "READY=1", 7, MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
}

/* Hold an exclusive lock on the state dir for as long as we run; -EBUSY if another fleetd has it. */
static int state_dir_lock(const char *dir, int *ret_fd)
{
	_cleanup_free_ char *path = xasprintf("%s/fleetd.lock", dir);
	_cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	char pid[32] = "";
	int n;

	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int r = errno == EWOULDBLOCK ? -EBUSY : -errno;
		n = (int)pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		if (r == -EBUSY)
			log_error("state directory %s is in use by another fleetd (pid %s); refusing to start",
				  dir, *pid ? pid : "unknown");
		return r;
	}
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

static void on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
	struct fleetd *f = arg;

	log_notice("received %s, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	event_base_loopexit(f->base, NULL);
}

static void on_reload_signal(evutil_socket_t sig, short what, void *arg)
{
	struct fleetd *f = arg;
	_cleanup_free_ char *errors = NULL;
	struct config next;
	int nerr;

	nerr = config_load(&next, f->config_path, f->config_must_exist, &f->cmdline, &errors);
	if (nerr > 0) {
		/* Keep running on the old config; say exactly what was wrong. */
		char *save = NULL;
		for (char *line = strtok_r(errors, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			log_error("reload: %s", line);
		log_error("reload: %d error(s); keeping the running configuration", nerr);
		config_free(&next);
		return;
	}
	for (int i = 0; i < CFG__COUNT; i++)
		if (!config_defs[i].reloadable && strcmp(next.value[i], f->cfg.value[i]) != 0) {
			log_warning("reload: %s changed to '%s'; it takes effect after a restart",
				    config_defs[i].key, next.value[i]);
			free(next.value[i]);
			next.value[i] = xstrdup(f->cfg.value[i]);
		}
	config_free(&f->cfg);
	f->cfg = next;
	log_set_max_priority(log_level_from_string(config_get(&f->cfg, CFG_LOG_LEVEL)));
	api_reload(f->api);
	listener_routes_changed(f);	/* its limits may have changed */
	log_notice("reload: configuration re-read from %s", f->config_path);
}

/*
 * Detach: the parent stays until the child reports readiness through a
 * pipe, so "fleetd && fleetctl status" needs no sleep. Returns in the child
 * with *ready_fd set; the parent exits.
 */
static void daemonize(int *ready_fd)
{
	int p[2];
	pid_t pid;
	char c;

	if (pipe2(p, O_CLOEXEC) < 0) {
		log_error("pipe: %s", strerror(errno));
		exit(1);
	}
	pid = fork();
	if (pid < 0) {
		log_error("fork: %s", strerror(errno));
		exit(1);
	}
	if (pid > 0) {
		int status;

		close(p[1]);
		if (read(p[0], &c, 1) == 1)
			_exit(0);
		/* The child died before it was ready; it has logged why. */
		if (waitpid(pid, &status, 0) == pid && WIFEXITED(status))
			_exit(WEXITSTATUS(status) ? WEXITSTATUS(status) : 1);
		_exit(1);
	}
	close(p[0]);
	setsid();
	if (chdir("/") < 0)
		log_warning("chdir /: %s", strerror(errno));
	*ready_fd = p[1];
}

static int open_log_file(const struct config *cfg)
{
	_cleanup_free_ char *def = xasprintf("%s/fleetd.log", config_get(cfg, CFG_STATE_DIR));
	const char *path = *config_get(cfg, CFG_LOG_FILE) ? config_get(cfg, CFG_LOG_FILE) : def;
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

	if (fd < 0)
		log_error("cannot open log file %s: %s", path, strerror(errno));
	return fd;
}

/* A --restore-from under way (core/restore.h): it holds the backup's host key until restore_agents. */
static struct restore *restoring;

/* Tear down whatever main() has set up, in reverse order, and exit with code: every exit of main goes here. */
static int finish(struct fleetd *f, int code)
{
	restore_free(restoring);
	restoring = NULL;
	listener_shutdown(f);	/* no new deliveries while the rest goes down */
	metrics_http_stop(f);
	api_stop(f->api);
	f->api = NULL;
	hooks_shutdown(f);
	sched_shutdown(f);
	runs_shutdown(f);
	health_shutdown(f);
	backends_shutdown(f);
	autostart_shutdown(f);
	health_free(f);
	lifecycle_shutdown(f);
	runs_free(f);
	secret_hold_free(f);	/* after the last run and exec let go */
	activity_free(f);
	watch_free(f);	/* after the last publisher */
	metrics_free(f);
	api_free_orphans();	/* deferred calls answered 503 at api_stop whose owners never answered */
	if (f->base)
		event_base_free(f->base);
	f->base = NULL;
	db_close(f->db);
	f->db = NULL;
	secrets_free(f);
	if (f->lock_fd >= 0)
		close(f->lock_fd);
	f->lock_fd = -1;
	config_free(&f->cfg);
	config_free(&f->cmdline);
	return code;
}

int main(int argc, char **argv)
{
	struct fleetd f = { .config_path = DEFAULT_CONFIG_PATH, .lock_fd = -1 };
	struct option opts[CFG__COUNT + 8];
	_cleanup_free_ char *errors = NULL;
	struct event *ev_term = NULL, *ev_int = NULL, *ev_hup = NULL;
	bool foreground = false, check_only = false;
	int ready_fd = -1, log_fd = -1, nerr, r, c, idx;
	const char *state_dir, *restore_from = NULL;
	_cleanup_free_ char *db_path = NULL;

	/*
	 * Whatever umask we were started with (a shell's 022), nothing fleetd or
	 * the tools it runs (qemu-img, mke2fs, cp) create is for other users: VM
	 * disks and seeds hold an agent's files and its SSH host key. Modes that
	 * must be looser (the state dir's 0711, the socket's 0660) are set explicitly.
	 */
	umask(0077);
	log_setup("fleetd", LOG_INFO);
	config_init(&f.cmdline);
	for (int i = 0; i < CFG__COUNT; i++)
		opts[i] = (struct option){ config_defs[i].option, required_argument, NULL, OPT_SETTING };
	opts[CFG__COUNT + 0] = (struct option){ "foreground", no_argument, NULL, OPT_FOREGROUND };
	opts[CFG__COUNT + 1] = (struct option){ "config", required_argument, NULL, OPT_CONFIG };
	opts[CFG__COUNT + 2] = (struct option){ "check-config", no_argument, NULL, OPT_CHECK };
	opts[CFG__COUNT + 3] = (struct option){ "help", no_argument, NULL, OPT_HELP };
	opts[CFG__COUNT + 4] = (struct option){ "version", no_argument, NULL, OPT_VERSION };
	/* Not in the help: for tools (fleetd.conf(5)'s check reads the key table through it). */
	opts[CFG__COUNT + 5] = (struct option){ "config-keys", no_argument, NULL, OPT_CONFIG_KEYS };
	opts[CFG__COUNT + 6] = (struct option){ "restore-from", required_argument, NULL, OPT_RESTORE };
	opts[CFG__COUNT + 7] = (struct option){ 0 };

	while ((c = getopt_long(argc, argv, "", opts, &idx)) != -1) {
		const char *why;

		switch (c) {
		case OPT_SETTING:
			if (config_set(&f.cmdline, (enum config_key)idx, optarg, CFG_FROM_CMDLINE, 0, &why) < 0) {
				fprintf(stderr, "fleetd: --%s '%s' %s\n", opts[idx].name, optarg, why);
				return finish(&f, 2);
			}
			break;
		case OPT_FOREGROUND: foreground = true; break;
		case OPT_CONFIG: f.config_path = optarg; f.config_must_exist = true; break;
		case OPT_CHECK: check_only = true; break;
		case OPT_RESTORE: restore_from = optarg; break;
		case OPT_HELP: usage(stdout); return finish(&f, 0);
		case OPT_VERSION: printf("fleetd %s\n", PACKAGE_VERSION); return finish(&f, 0);
		case OPT_CONFIG_KEYS:
			for (int i = 0; i < CFG__COUNT; i++)
				printf("%s %s\n", config_defs[i].key, config_defs[i].option);
			return finish(&f, 0);
		default: usage(stderr); return finish(&f, 2);
		}
	}
	if (optind < argc) {
		fprintf(stderr, "fleetd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return finish(&f, 2);
	}

	nerr = config_load(&f.cfg, f.config_path, f.config_must_exist, &f.cmdline, &errors);
	if (check_only) {
		if (nerr > 0) {
			fputs(errors, stderr);
			fprintf(stderr, "fleetd: %d error(s) in the configuration\n", nerr);
			return finish(&f, 1);
		}
		config_print(&f.cfg, stdout);
		return finish(&f, 0);
	}
	if (nerr > 0) {
		fputs(errors, stderr);
		fprintf(stderr, "fleetd: %d error(s) in the configuration; not starting (try --check-config)\n", nerr);
		return finish(&f, 1);
	}
	log_set_max_priority(log_level_from_string(config_get(&f.cfg, CFG_LOG_LEVEL)));

	state_dir = config_get(&f.cfg, CFG_STATE_DIR);
	/*
	 * 0711: others may not list the state dir, but a user agent must be able
	 * to traverse it to reach its own home below it. Everything sensitive
	 * inside (database, keys, log, snapshots) is 0600/0700 root.
	 */
	if ((r = mkdir_p(state_dir, 0711)) < 0 || chmod(state_dir, 0711) < 0) {
		log_error("cannot create state directory %s: %s", state_dir, strerror(r < 0 ? -r : errno));
		return finish(&f, 1);
	}
	if (restore_from) {
		_cleanup_free_ char *why = NULL;

		/* Before detaching: the passphrase is on our stdin, and every refusal is the caller's to see. */
		if (!(restoring = restore_prepare(restore_from, state_dir, stdin, &why))) {
			log_error("restore from %s refused: %s", restore_from, why);
			return finish(&f, 1);
		}
	}
	if (!foreground) {
		/* Until ready, log lines go to the log file and to the terminal. */
		log_fd = open_log_file(&f.cfg);
		if (log_fd < 0)
			return finish(&f, 1);
		daemonize(&ready_fd);
		log_set_fd(log_fd);
		log_set_tee_fd(STDERR_FILENO);
		int nullfd = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (nullfd >= 0) {
			dup2(nullfd, STDIN_FILENO);
			dup2(nullfd, STDOUT_FILENO);
			close(nullfd);
		}
	}
	signal(SIGPIPE, SIG_IGN);

	if ((r = state_dir_lock(state_dir, &f.lock_fd)) < 0) {
		if (r != -EBUSY)
			log_error("cannot lock state directory %s: %s", state_dir, strerror(-r));
		return finish(&f, 1);
	}
	if (restoring) {
		_cleanup_free_ char *why = NULL;

		if ((r = restore_install(restoring, state_dir, &why)) < 0) {
			log_error("restore from %s failed: %s", restore_from, why);
			return finish(&f, 1);
		}
	}
	db_path = xasprintf("%s/fleet.db", state_dir);
	if ((r = db_open(db_path, &f.db)) < 0) {
		log_error("cannot open database %s: %s", db_path, strerror(-r));
		return finish(&f, 1);
	}
	{
		_cleanup_free_ char *why = NULL;

		/* No start without the host key: secrets set before could not be read, or would be lost. */
		if ((r = secrets_init(&f, &why)) < 0) {
			log_error("%s; not starting", why);
			return finish(&f, 1);
		}
	}
	f.base = event_base_new();
	if (!f.base) {
		log_error("cannot create the event loop");
		return finish(&f, 1);
	}
	f.started_at = time(NULL);
	if (metrics_init(&f) < 0) {
		log_error("cannot make the metrics registry");
		return finish(&f, 1);
	}
	backends_init(&f, &core_backend_host);
	if (restoring) {
		/* Each agent provisioned again and its home put back, before the reconcile looks at them. */
		restore_agents(&f, restoring);
		restore_free(restoring);
		restoring = NULL;
	}
	lifecycle_reconcile(&f);
	health_init(&f);
	snapshots_recover(&f);
	sched_init(&f);
	runs_init(&f);
	hooks_init(&f);
	if (listener_start(&f) < 0) {
		log_error("cannot start the webhook listener (see above); set hooks_listen = none to run without it");
		return finish(&f, 1);
	}
	if (api_start(&f, api_routes, api_n_routes, &f.api) < 0)
		return finish(&f, 1);
	if (metrics_http_start(&f) < 0)
		return finish(&f, 1);
	(void)autostart_init(&f);	/* after a host reboot: logged, and a failure starts nothing */
	ev_term = evsignal_new(f.base, SIGTERM, on_stop_signal, &f);
	ev_int = evsignal_new(f.base, SIGINT, on_stop_signal, &f);
	ev_hup = evsignal_new(f.base, SIGHUP, on_reload_signal, &f);
	if (!ev_term || !ev_int || !ev_hup || evsignal_add(ev_term, NULL) < 0 ||
	    evsignal_add(ev_int, NULL) < 0 || evsignal_add(ev_hup, NULL) < 0) {
		log_error("cannot install signal handlers");
		return finish(&f, 1);
	}

	log_notice("fleetd %s ready (pid %ld, state %s)", PACKAGE_VERSION, (long)getpid(), state_dir);
	notify_ready();
	if (ready_fd >= 0) {
		/* Detach from the terminal for good: stderr becomes the log file too. */
		log_set_tee_fd(-1);
		dup2(log_fd, STDERR_FILENO);
		close(log_fd);
		log_set_fd(STDERR_FILENO);
		(void)write_all(ready_fd, "1", 1);
		close(ready_fd);
	}

	event_base_dispatch(f.base);

	event_free(ev_term);
	event_free(ev_int);
	event_free(ev_hup);
	r = finish(&f, 0);
	log_notice("stopped");
	return r;
}
