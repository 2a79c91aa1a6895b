/*
 * ssh's pure parts (no libssh2): shell quoting (checked by running real
 * shells on the result), the command line ssh_exec sends (ssh_quote.c),
 * key generation and fingerprints (ssh_keys.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "vm/ssh_keys.h"
#include "vm/ssh_quote.h"
#include "common/util.h"
#include "../tap.h"

struct ran {
	char out[8192], err[8192];
	size_t out_len, err_len;
	int status;
	pid_t pid;
};

/* Read all of fd into buf (NUL-terminated, truncated to size - 1). */
static size_t slurp(int fd, char *buf, size_t size)
{
	size_t len = 0;
	ssize_t n;

	while ((n = read(fd, buf + len, size - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	return len;
}

/* Run shell -c script with in_len bytes of in (small) on stdin; stdout and stderr captured separately. */
static int run_shell_in(const char *shell, const char *script, const char *in, size_t in_len, struct ran *r)
{
	int out[2], err[2], inp[2];

	memset(r, 0, sizeof(*r));
	if (pipe(out) < 0 || pipe(err) < 0 || pipe(inp) < 0)
		return -errno;
	/* Small enough for the pipe's buffer: written before the child runs. */
	if (in_len && write(inp[1], in, in_len) != (ssize_t)in_len)
		return -EIO;
	close(inp[1]);
	r->pid = fork();
	if (r->pid < 0)
		return -errno;
	if (r->pid == 0) {
		dup2(inp[0], 0);
		dup2(out[1], 1);
		dup2(err[1], 2);
		close(out[0]), close(err[0]);
		if (strcmp(shell, "busybox") == 0)
			execlp("busybox", "sh", "-c", script, (char *)NULL);
		else
			execl(shell, shell, "-c", script, (char *)NULL);
		_exit(126);
	}
	close(out[1]), close(err[1]), close(inp[0]);
	r->out_len = slurp(out[0], r->out, sizeof(r->out));
	r->err_len = slurp(err[0], r->err, sizeof(r->err));
	close(out[0]), close(err[0]);
	waitpid(r->pid, &r->status, 0);
	return 0;
}

/* Run shell -c script with nothing on stdin. */
static int run_shell(const char *shell, const char *script, struct ran *r)
{
	return run_shell_in(shell, script, NULL, 0, r);
}

/* Join words as `printf '%s\0' Q(w1) Q(w2)...`, the shell's view of each word. */
static char *printf_script(const char *const *words)
{
	char *s = xstrdup("printf '%s\\0'");

	for (size_t i = 0; words[i]; i++) {
		_cleanup_free_ char *q = ssh_quote(words[i]);
		char *n = xasprintf("%s %s", s, q);
		free(s);
		s = n;
	}
	return s;
}

/* Does shell see exactly words? */
static bool round_trips(const char *shell, const char *const *words)
{
	_cleanup_free_ char *script = printf_script(words);
	struct ran r;
	size_t off = 0;

	if (run_shell(shell, script, &r) < 0 || !WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
		return false;
	for (size_t i = 0; words[i]; i++) {
		size_t n = strlen(words[i]);
		if (off + n + 1 > r.out_len || memcmp(r.out + off, words[i], n) != 0 || r.out[off + n] != '\0')
			return false;
		off += n + 1;
	}
	return off == r.out_len;
}

static bool have_busybox(void)
{
	return access("/bin/busybox", X_OK) == 0 || access("/usr/bin/busybox", X_OK) == 0;
}

static void test_quote(void)
{
	static const char *const hard[] = {
		"plain", "", "two words", "it's", "'", "''", "\"double\"", "$HOME", "${HOME}", "$(id)",
		"`id`", "back\\slash", "new\nline", "tab\there", "semi;colon", "a|b", "a&b", "<in", ">out",
		"*", "?", "[a]", "~", "~root", "#comment", "!bang", "-n", "--", "a=b", "{a,b}", "\x01\x7f\xff",
		"' ; rm -rf / ; '", "'\\''", NULL,
	};
	const char *shells[] = { "/bin/sh", "/bin/bash", "/usr/bin/dash", "busybox" };
	char *q;

	is_str(q = ssh_quote("abc-1.2_x/y:z,w+v@u%t"), "abc-1.2_x/y:z,w+v@u%t", "safe word stays bare"); free(q);
	is_str(q = ssh_quote(""), "''", "empty word is ''"); free(q);
	is_str(q = ssh_quote("a b"), "'a b'", "space is quoted"); free(q);
	is_str(q = ssh_quote("it's"), "'it'\\''s'", "single quote becomes '\\''"); free(q);
	is_str(q = ssh_quote("$x`y`"), "'$x`y`'", "$ and backticks stay literal inside quotes"); free(q);
	is_str(q = ssh_quote("a=b"), "'a=b'", "= is quoted (never an assignment)"); free(q);
	is_str(q = ssh_quote("~"), "'~'", "~ is quoted (no tilde expansion)"); free(q);
	is_str(q = ssh_quote("a\nb"), "'a\nb'", "newline kept inside quotes"); free(q);

	for (size_t i = 0; i < ARRAY_SIZE(shells); i++) {
		if (strcmp(shells[i], "busybox") == 0 ? !have_busybox() : access(shells[i], X_OK) != 0) {
			printf("# %s not installed, not checked\n", shells[i]);
			continue;
		}
		ok(round_trips(shells[i], hard), "%s reads every hard word back unchanged", shells[i]);
		for (size_t j = 0; hard[j]; j++) {
			const char *one[] = { hard[j], NULL };
			if (!round_trips(shells[i], one))
				ok(0, "%s: word %zu round trip", shells[i], j);
		}
	}
}

static void test_command_line(void)
{
	const char *argv[] = { "printf", "%s|", "a b", "", "$HOME", "`id`", "it's", "x\ny", NULL };
	const char *env[] = { "A=1", "B=it's $HOME `id`", "_C9=", NULL };
	const char *bad_env1[] = { "1A=x", NULL }, *bad_env2[] = { "NOEQ", NULL }, *bad_env3[] = { "A-B=x", NULL };
	const char *bad_env4[] = { "=x", NULL };
	const char *no_argv[] = { NULL }, *empty0[] = { "", NULL }, *eq0[] = { "A=B", "x", NULL };
	_cleanup_free_ char *big = NULL, *line = NULL;
	const char *big_env[] = { NULL, NULL };
	char *l = NULL;
	struct ran r;

	is_int(ssh_command_line(NULL, NULL, argv, NULL, false, &line), 0, "command line built");
	is_str(line, "echo $$ >&2; exec setsid -- printf '%s|' 'a b' '' '$HOME' '`id`' 'it'\\''s' 'x\ny'",
	       "command line: pid line, setsid, quoted argv");
	free(line);
	line = NULL;
	is_int(ssh_command_line(NULL, NULL, argv, env, false, &line), 0, "command line with env built");
	is_str(line, "echo $$ >&2; exec setsid -- env -- 'A=1' 'B=it'\\''s $HOME `id`' '_C9=' printf '%s|' 'a b' '' "
		     "'$HOME' '`id`' 'it'\\''s' 'x\ny'", "env passed as `env -- NAME=VALUE...`");

	/* run it with the local shell: pid line first on stderr, then the command itself */
	ok(run_shell("/bin/sh", line, &r) == 0 && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0,
	   "command line runs in /bin/sh");
	is_str(r.out, "a b||$HOME|`id`|it's|x\ny|", "argv arrives intact");
	{
		char want[32];
		snprintf(want, sizeof(want), "%d\n", (int)r.pid);
		is_str(r.err, want, "stderr starts with the shell's pid (the process dropbear waits for)");
	}
	free(line);
	line = NULL;
	{
		const char *show[] = { "sh", "-c", "printf '%s|%s|%s' \"$A\" \"$B\" \"${_C9-unset}\"", NULL };
		ok(ssh_command_line(NULL, NULL, show, env, false, &line) == 0 && run_shell("/bin/sh", line, &r) == 0, "env command runs");
		is_str(r.out, "1|it's $HOME `id`|", "env values arrive literally");
		free(line);
		line = NULL;
	}
	{
		/* the command leads its own process group and session (so kill -9 -PID ends all of it) */
		const char *stat[] = { "sh", "-c", "cat /proc/$$/stat", NULL };
		int pid = 0, pgrp = 0, sid = 0;
		const char *p;

		ok(ssh_command_line(NULL, NULL, stat, NULL, false, &line) == 0 && run_shell("/bin/sh", line, &r) == 0, "stat command runs");
		p = strrchr(r.out, ')');
		ok(p && sscanf(r.out, "%d", &pid) == 1 && sscanf(p + 2, "%*c %*d %d %d", &pgrp, &sid) == 2,
		   "stat parsed");
		ok(pid == r.pid && pgrp == pid && sid == pid, "the command is the shell's pid, a group and session leader");
		free(line);
		line = NULL;
	}

	is_int(ssh_command_line(NULL, NULL, no_argv, NULL, false, &l), -EINVAL, "empty argv refused");
	is_int(ssh_command_line(NULL, NULL, NULL, NULL, false, &l), -EINVAL, "NULL argv refused");
	is_int(ssh_command_line(NULL, NULL, empty0, NULL, false, &l), -EINVAL, "empty argv[0] refused");
	is_int(ssh_command_line(NULL, NULL, eq0, NULL, false, &l), -EINVAL, "argv[0] with '=' refused (env would take it)");
	is_int(ssh_command_line(NULL, NULL, argv, bad_env1, false, &l), -EINVAL, "env name starting with a digit refused");
	is_int(ssh_command_line(NULL, NULL, argv, bad_env2, false, &l), -EINVAL, "env entry without '=' refused");
	is_int(ssh_command_line(NULL, NULL, argv, bad_env3, false, &l), -EINVAL, "env name with '-' refused");
	is_int(ssh_command_line(NULL, NULL, argv, bad_env4, false, &l), -EINVAL, "empty env name refused");
	big = xmalloc(SSH_COMMAND_MAX + 8);
	memset(big, 'x', SSH_COMMAND_MAX + 7);
	memcpy(big, "BIG=", 4);
	big[SSH_COMMAND_MAX + 7] = '\0';
	big_env[0] = big;
	is_int(ssh_command_line(NULL, NULL, argv, big_env, false, &l), -E2BIG, "command line past SSH_COMMAND_MAX refused");
	is_int(ssh_command_line("/usr/bin/agentd", NULL, argv, NULL, false, &l), -EINVAL, "agentd without a user refused");
	is_int(ssh_command_line("/usr/bin/agentd", "agent", argv, bad_env3, false, &l), -EINVAL,
	       "agentd: env name with '-' refused");
	is_int(ssh_command_line("/usr/bin/agentd", "agent", argv, big_env, false, &l), 0,
	       "agentd: a big env is fine, it is not on the command line (it goes on stdin)");
	ok(l && strlen(l) < 200, "the line stays short");
	free(l);
}

/*
 * The line fleetd sends a guest: agentd run-as gets the env on stdin
 * (--env-stdin, the frame first), never as arguments, and applies it
 * after the privilege drop; nothing comes before agentd. Run here with
 * the built agentd as root (the guest's session user).
 */
static void test_agentd_line(void)
{
	const char *argv[] = { "printf", "%s|", "a b", "", "$HOME", "it's", NULL };
	const char *env[] = { "A=1", "B=it's $HOME `id`", "LD_PRELOAD=/nonexistent.so", NULL };
	const char *bad_env_frame[] = { "A", NULL };
	const char *agentd = getenv("AGENTD");
	_cleanup_free_ char *line = NULL;
	struct ran r;

	is_int(ssh_command_line("/usr/bin/agentd", "agent", argv, env, false, &line), 0, "agentd line built");
	is_str(line, "echo $$ >&2; exec /usr/bin/agentd run-as agent --env-stdin -- printf '%s|' 'a b' '' '$HOME' 'it'\\''s'",
	       "agentd line: pid line, then agentd first, --env-stdin and no value, then the command");
	ok(!strstr(line, "A=1") && !strstr(line, "LD_PRELOAD"), "no env entry on the line");
	free(line);
	line = NULL;
	{
		char *frame = NULL;
		size_t flen = 0;
		static const char want[] = "FLEET-ENV 49\nA=1\0B=it's $HOME `id`\0LD_PRELOAD=/nonexistent.so";

		is_int(ssh_env_frame(env, &frame, &flen), 0, "env frame built");
		ok(flen == sizeof(want) && memcmp(frame, want, flen) == 0, "a header with the length, NUL-ended entries");
		free(frame);
		is_int(ssh_env_frame(bad_env_frame, &frame, &flen), -EINVAL, "an entry without '=' refused");
	}
	is_int(ssh_command_line("/usr/bin/agentd", "root", argv, NULL, false, &line), 0, "agentd line without env built");
	is_str(line, "echo $$ >&2; exec /usr/bin/agentd run-as root -- printf '%s|' 'a b' '' '$HOME' 'it'\\''s'",
	       "agentd line without env");
	free(line);
	line = NULL;

	if (!agentd || geteuid() != 0) {
		printf("# the agentd line is not run here: needs root and $AGENTD (make check sets it)\n");
		return;
	}
	ok(ssh_command_line(agentd, "root", argv, NULL, false, &line) == 0 && run_shell("/bin/sh", line, &r) == 0 &&
	   WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "agentd line runs in /bin/sh");
	is_str(r.out, "a b||$HOME|it's|", "argv arrives intact through agentd run-as");
	{
		char want[32];
		snprintf(want, sizeof(want), "%d\n", (int)r.pid);
		is_str(r.err, want, "stderr starts with the shell's pid, and agentd adds nothing");
	}
	free(line);
	line = NULL;
	{
		/* The caller's own environment (here: this test's) does not pass; --env does, literally. */
		const char *show[] = { "sh", "-c", "printf '%s|%s|%s|%s|' \"$A\" \"$B\" \"${FLEET_LEAK-unset}\" \"$HOME\"; cat", NULL };
		const char *env2[] = { "A=1", "B=it's $HOME `id`", NULL };

		char *frame = NULL, *in;
		size_t flen = 0;

		setenv("FLEET_LEAK", "leaked", 1);
		/* The frame, then the command's own stdin: it must get exactly the rest. */
		ok(ssh_env_frame(env2, &frame, &flen) == 0, "env frame");
		in = xmalloc(flen + 6);
		memcpy(in, frame, flen);
		memcpy(in + flen, "rest\n", 6);
		ok(ssh_command_line(agentd, "root", show, env2, false, &line) == 0 &&
		   run_shell_in("/bin/sh", line, in, flen + 5, &r) == 0, "agentd env command runs");
		unsetenv("FLEET_LEAK");
		is_str(r.out, "1|it's $HOME `id`|unset|/root|rest\n", "env values arrive literally, the caller's own do not, "
								       "and the command's stdin starts after the frame");
		free(line);
		line = NULL;
		ok(ssh_command_line(agentd, "root", show, env2, false, &line) == 0 &&
		   run_shell_in("/bin/sh", line, "FLEET-ENV 99\nA=1", 16, &r) == 0 && WIFEXITED(r.status) &&
		   WEXITSTATUS(r.status) == 2 && r.out_len == 0, "a cut frame: agentd refuses (exit 2) and runs nothing");
		free(line);
		line = NULL;
		free(frame);
		free(in);
	}
	{
		const char *stat[] = { "sh", "-c", "cat /proc/$$/stat", NULL };
		int pid = 0, pgrp = 0, sid = 0;
		const char *p;

		ok(ssh_command_line(agentd, "root", stat, NULL, false, &line) == 0 && run_shell("/bin/sh", line, &r) == 0,
		   "agentd stat command runs");
		p = strrchr(r.out, ')');
		ok(p && sscanf(r.out, "%d", &pid) == 1 && sscanf(p + 2, "%*c %*d %d %d", &pgrp, &sid) == 2,
		   "stat parsed");
		ok(pid == r.pid && pgrp == pid && sid == pid,
		   "through agentd, the command is the shell's pid, a group and session leader");
	}
}

static void test_fingerprint(void)
{
	char *fp = NULL;

	/* vectors from `ssh-keygen -lf` */
	is_int(ssh_fingerprint_pubkey("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGDsTEF3MDUTYt/fIKmOxcW4ERUsnP25/B5zfjy+oE4d vec",
				      &fp), 0, "ed25519 line parsed");
	is_str(fp, "SHA256:4WrpbgiFfYLiQWpilGDXiPDTelfltF3xr1zxSrExThM", "ed25519 fingerprint matches ssh-keygen");
	free(fp);
	fp = NULL;
	is_int(ssh_fingerprint_pubkey("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDAfbcxwFjjTiSL8zzuFIM69PR0XAInjueNQ4fomz7tKWSTDW0an"
				      "RAgCcFq9GjbyqxRFj1H+TVcM+S3Rec8j58zM3DBjt67OmUymv4pn+5hB2Kw3EQlUH3X/FXhp/syQbBP7+iaSAe"
				      "XSLjxAtSAS4qRf6l9jSJCAYngQ2RZTxAiUw==", &fp), 0, "rsa line (padded base64) parsed");
	is_str(fp, "SHA256:uMPT1NX0rcWofn7yPZLjclcC6+xMGQG6V4tGher0XQE", "rsa fingerprint matches ssh-keygen");
	free(fp);
	fp = NULL;
	is_int(ssh_fingerprint_pubkey("ssh-ed25519", &fp), -EINVAL, "no key refused");
	is_int(ssh_fingerprint_pubkey("ssh-ed25519 !!!!", &fp), -EINVAL, "bad base64 refused");
	is_int(ssh_fingerprint_pubkey("ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIGDsTEF3MDUTYt/fIKmOxcW4ERUsnP25/B5zfjy+oE4d", &fp),
	       -EINVAL, "type that does not match the blob refused");
	is_int(ssh_fingerprint_pubkey("ssh-ed25519 AAAA", &fp), -EINVAL, "truncated blob refused");
	/* the ed25519 vector with one character made '=': padding only ends the base64 */
	is_int(ssh_fingerprint_pubkey("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGDs=EF3MDUTYt/fIKmOxcW4ERUsnP25/B5zfjy+oE4d", &fp),
	       -EINVAL, "'=' inside the base64 refused");
}

static void test_keygen(void)
{
	char dir[] = "/tmp/fleet-sshq.XXXXXX";
	_cleanup_free_ char *key = NULL, *pubpath = NULL, *pub = NULL, *fp = NULL, *fp2 = NULL;
	char buf[4096];
	struct stat st;
	int fd;
	ssize_t n;

	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	key = xasprintf("%s/id", dir);
	pubpath = xasprintf("%s/id.pub", dir);
	is_int(ssh_keygen(key, SSH_KEY_OPENSSH, "a\nb", NULL, NULL), -EINVAL, "comment with a newline refused");
	is_int(ssh_keygen(key, SSH_KEY_OPENSSH, "fleet test", &pub, &fp), 0, "client key generated");
	ok(stat(key, &st) == 0 && (st.st_mode & 0777) == 0600, "private key is mode 0600");
	fd = open(key, O_RDONLY);
	n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	ok(strncmp(buf, "-----BEGIN OPENSSH PRIVATE KEY-----\n", 36) == 0, "private key in OpenSSH format");
	ok(pub && strncmp(pub, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI", 37) == 0 && strstr(pub, " fleet test"),
	   "public key line: type, blob, comment");
	ok(ssh_fingerprint_pubkey(pub, &fp2) == 0 && fp && strcmp(fp, fp2) == 0, "fingerprint of the line is the one returned");
	fd = open(pubpath, O_RDONLY);
	n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	ok(n > 0 && strncmp(buf, pub, strlen(pub)) == 0 && buf[strlen(pub)] == '\n', "id.pub holds the line");
	unlink(key);
	unlink(pubpath);
	rmdir(dir);
}

/*
 * --files-stdin through the real agentd as root (a guest's agentd is the
 * same program): the files on a tmpfs of the command's own at /run/secrets,
 * 0400 and the user's, named by FLEET_SECRETS_DIR; then the command's stdin.
 * This test runs in a mount namespace of its own with a fresh /run, so the
 * host's /run is not touched.
 */
static void test_agentd_files(void)
{
	const char *agentd = getenv("AGENTD");
	const char *show[] = { "sh", "-c",
			       "cd \"$FLEET_SECRETS_DIR\" && stat -f -c %T . && stat -c '%n %a %U %s' * && cat TOKEN && echo && "
			       "printf '%s|' \"$A\" && cat && ls /run/secrets 2>&1 | wc -l", NULL };
	const char *env[] = { "A=1", NULL };
	const unsigned char bin[] = { 0, 1, 2, 255, '\n' };
	const struct exec_file files[] = { { "TOKEN", (const unsigned char *)"s3cret-value", 12 }, { "BIN_KEY", bin, 5 },
					   { "EMPTY", (const unsigned char *)"", 0 } };
	const struct exec_file bad[] = { { "../x", (const unsigned char *)"v", 1 } };
	_cleanup_free_ char *line = NULL;
	char *env_frame = NULL, *files_frame = NULL, *in;
	size_t elen = 0, flen = 0;
	struct ran r;
	DIR *d;
	int n = 0;

	if (!agentd || geteuid() != 0 || !getpwnam("nobody")) {
		printf("# agentd --files-stdin is not run here: needs root, user nobody and $AGENTD\n");
		return;
	}
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") < 0) {
		ok(0, "a mount namespace with a fresh /run for this test: %s", strerror(errno));
		return;
	}
	is_int(ssh_files_frame(bad, 1, &files_frame, &flen), -EINVAL, "a file name that is no variable name is refused");
	ok(ssh_command_line(agentd, "nobody", show, env, true, &line) == 0 && strstr(line, " --env-stdin --files-stdin -- "),
	   "the agentd line asks for the files after the environment");
	ok(ssh_env_frame(env, &env_frame, &elen) == 0 && ssh_files_frame(files, 3, &files_frame, &flen) == 0, "frames built");
	in = xmalloc(elen + flen + 5);
	memcpy(in, env_frame, elen);
	memcpy(in + elen, files_frame, flen);
	memcpy(in + elen + flen, "rest\n", 5);
	ok(run_shell_in("/bin/sh", line, in, elen + flen + 5, &r) == 0 && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0,
	   "agentd run-as nobody --env-stdin --files-stdin runs (%s)", r.err);
	ok(strncmp(r.out, "tmpfs\n", 6) == 0, "the files are on a tmpfs");
	ok(strstr(r.out, "BIN_KEY 400 nobody 5\nEMPTY 400 nobody 0\nTOKEN 400 nobody 12\n") != NULL,
	   "each file 0400, the user's, its size");
	ok(strstr(r.out, "s3cret-value\n1|rest\n") != NULL, "the value, the environment, then the command's own stdin");
	d = opendir("/run/secrets");
	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	is_int(n, 2, "after the command, this namespace's /run/secrets is empty (the tmpfs was the command's own)");
	/* a frame whose record claims more bytes than it holds */
	memcpy(in + elen, "FLEET-FILES 9\nTOKEN\0009\0x", 23);
	ok(run_shell_in("/bin/sh", line, in, elen + 23, &r) == 0 && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 126 &&
	   r.out_len == 0 && strstr(r.err, "valid files frame"), "a record longer than the frame: refused, nothing runs");
	explicit_bzero(in, elen + flen + 5);
	free(in);
	free(env_frame);
	explicit_bzero(files_frame, flen);
	free(files_frame);
	(void)umount2("/run", MNT_DETACH);
}

int main(void)
{
	test_quote();
	test_command_line();
	test_agentd_line();
	test_agentd_files();
	test_fingerprint();
	test_keygen();
	return tap_done();
}
