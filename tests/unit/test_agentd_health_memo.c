/*
 * agentd/health_memo.c: the health service's kept start of the shell, on
 * files in a temp dir in the shell's place (a link "sh" to a program). A
 * passing start of a settled static ELF is kept and holds for the same key,
 * in a forked child too (the page is shared), until anything in the key
 * changes: the file's mode, the link's target, an entry in its directory.
 * A failed start forgets it; a dynamic ELF (PT_INTERP), a script, a file
 * changed less than a second ago and a path that is gone are never kept.
 */
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentd/health_memo.h"
#include "tests/tap.h"

static char dir[] = "/tmp/test_agentd_health_memo.XXXXXX";

/* An ELF64 executable's headers only (never run): one PT_LOAD, and a PT_INTERP if interp. */
static void write_elf(const char *path, int interp)
{
	Elf64_Ehdr eh = { .e_type = ET_EXEC, .e_machine = EM_X86_64, .e_version = EV_CURRENT,
			  .e_phoff = sizeof(Elf64_Ehdr), .e_ehsize = sizeof(Elf64_Ehdr),
			  .e_phentsize = sizeof(Elf64_Phdr), .e_phnum = interp ? 2 : 1 };
	Elf64_Phdr ph[2] = { { .p_type = PT_LOAD }, { .p_type = PT_INTERP } };
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0755);

	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS64;
	eh.e_ident[EI_DATA] = ELFDATA2LSB;
	eh.e_ident[EI_VERSION] = EV_CURRENT;
	if (fd < 0 || write(fd, &eh, sizeof(eh)) != (ssize_t)sizeof(eh) ||
	    write(fd, ph, eh.e_phnum * sizeof(ph[0])) != (ssize_t)(eh.e_phnum * sizeof(ph[0])) || close(fd) < 0) {
		perror(path);
		exit(1);
	}
}

static char *path_in(const char *sub, const char *name)
{
	static char buf[4][256];
	static int i;
	char *p = buf[i++ % 4];

	snprintf(p, sizeof(buf[0]), "%s/%s%s%s", dir, sub, *sub ? "/" : "", name);
	return p;
}

/* A dir SUB holding a static program, a second one, and sh linked to the first. */
static void setup(const char *sub)
{
	if (mkdir(path_in("", sub), 0755) < 0) {
		perror(sub);
		exit(1);
	}
	write_elf(path_in(sub, "prog"), 0);
	write_elf(path_in(sub, "prog2"), 0);
	write_elf(path_in(sub, "dyn"), 1);
	if (symlink("prog", path_in(sub, "sh")) < 0) {
		perror("symlink");
		exit(1);
	}
}

/* Keep a passing start of SUB/NAME; then whether a key read now holds. */
static int kept_then_holds(struct health_memo *m, const char *sub, const char *name)
{
	struct health_memo_key *k = health_memo_key_read(path_in(sub, name));
	int holds;

	health_memo_update(m, k, k != NULL);
	free(k);
	k = health_memo_key_read(path_in(sub, name));
	holds = health_memo_holds(m, k);
	free(k);
	return holds;
}

static int holds_now(struct health_memo *m, const char *sub, const char *name)
{
	struct health_memo_key *k = health_memo_key_read(path_in(sub, name));
	int holds = health_memo_holds(m, k);

	free(k);
	return holds;
}

int main(void)
{
	struct health_memo *m = health_memo_new();
	struct health_memo_key *k;
	FILE *f;
	pid_t pid;
	int st;

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	ok(m != NULL, "a memo is mapped");
	for (const char *s = "abcd"; *s; s++)
		setup((char[]){ *s, '\0' });
	ok(!kept_then_holds(m, "a", "sh"), "a program changed less than a second ago is not kept");
	sleep(2);	/* settled: every file's times are older than a second */

	k = health_memo_key_read(path_in("a", "sh"));
	ok(k != NULL, "a key is read for a link to a program");
	ok(!health_memo_holds(m, k), "an empty memo holds nothing");
	health_memo_update(m, k, 1);
	ok(holds_now(m, "a", "sh"), "a passing start of a settled static ELF is kept and holds for the same key");
	pid = fork();
	if (pid == 0) {
		int held = holds_now(m, "a", "sh");

		health_memo_update(m, k, 0);	/* a start that failed, in a child: the service's children share the page */
		_exit(held ? 0 : 1);
	}
	ok(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "it holds in a forked child");
	ok(!holds_now(m, "a", "sh"), "a failed start in the child forgets it, for the parent too");
	health_memo_update(m, k, 1);
	ok(holds_now(m, "a", "sh"), "kept again");
	health_memo_update(m, NULL, 0);
	ok(!holds_now(m, "a", "sh"), "a failed start whose key could not be read forgets it too");
	free(k);

	ok(kept_then_holds(m, "b", "sh"), "b: kept");
	chmod(path_in("b", "prog"), 0700);
	ok(!holds_now(m, "b", "sh"), "a chmod of the program: no longer holds");

	ok(kept_then_holds(m, "c", "sh"), "c: kept");
	unlink(path_in("c", "sh"));
	symlink("prog2", path_in("c", "sh"));
	ok(!holds_now(m, "c", "sh"), "the link to another program: no longer holds");

	ok(kept_then_holds(m, "d", "sh"), "d: kept");
	f = fopen(path_in("d", "new"), "w");
	ok(f && fclose(f) == 0, "a file made in the program's directory");
	ok(!holds_now(m, "d", "sh"), "the directory changed: no longer holds");

	ok(!kept_then_holds(m, "a", "dyn"), "a dynamic ELF (PT_INTERP) is never kept");
	f = fopen(path_in("a", "script"), "w");
	ok(f && fputs("#!/bin/sh\nexit 0\n", f) >= 0 && fclose(f) == 0, "a script");
	ok(!kept_then_holds(m, "a", "script"), "a script is never kept");
	ok(health_memo_key_read(path_in("a", "gone")) == NULL, "a path that is gone has no key");
	ok(!health_memo_holds(m, NULL), "and nothing holds for it");
	ok(!health_memo_holds(NULL, NULL), "no memo holds nothing");

	if (fork() == 0)
		execlp("rm", "rm", "-rf", dir, (char *)NULL);
	wait(NULL);
	return tap_done();
}
