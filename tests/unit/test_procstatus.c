/* proc_status_sigmask: fleet-init's reading of the signals it inherited as ignored. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/procstatus.h"
#include "../tap.h"

#define STATUS "Name:\tfleet-init\nUmask:\t0022\nState:\tR (running)\nSigQ:\t0/94513\n" \
	"SigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000014000\n" \
	"SigIgn:\t0000000000001000\nSigCgt:\t0000000180000000\nCapInh:\t0000000000000000\n"

static int parse(const char *text, const char *field, uint64_t *mask)
{
	return proc_status_sigmask(text, strlen(text), field, mask);
}

/* This process's SigIgn, read from /proc/self/status. */
static int own_sigign(uint64_t *mask)
{
	char buf[8192];
	size_t n;
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	return proc_status_sigmask(buf, n, "SigIgn", mask);
}

int main(void)
{
	uint64_t m = 42;

	is_int(parse(STATUS, "SigIgn", &m), 0, "SigIgn is found");
	ok(m == (UINT64_C(1) << (SIGPIPE - 1)), "SigIgn 0x1000 is SIGPIPE alone (bit n-1 is signal n)");
	is_int(parse(STATUS, "SigBlk", &m), 0, "SigBlk is found");
	ok(m == ((UINT64_C(1) << (SIGTERM - 1)) | (UINT64_C(1) << (SIGCHLD - 1))), "SigBlk 0x14000 is SIGTERM and SIGCHLD");
	is_int(parse("SigIgn:\tffffffffffffffff\n", "SigIgn", &m), 0, "all 64 bits");
	ok(m == UINT64_MAX, "all 64 bits: every signal");
	is_int(parse("SigIgn:\t0000000000000000", "SigIgn", &m), 0, "a last line without its newline");
	ok(m == 0, "zero: nothing ignored");

	m = 42;
	is_int(parse("Name:\tx\nSigCgt:\t0000000000000001\n", "SigIgn", &m), -EINVAL, "a missing field is an error");
	ok(m == 42, "the mask is untouched on an error");
	is_int(parse("XSigIgn:\t0000000000001000\n", "SigIgn", &m), -EINVAL, "the field must start its line");
	is_int(parse("SigIgnored:\t0000000000001000\n", "SigIgn", &m), -EINVAL, "the field's name must end with ':'");
	is_int(parse("SigIgn:\t00000000000010000\n", "SigIgn", &m), -EINVAL, "17 hex digits do not fit");
	is_int(parse("SigIgn:\t00000000000x1000\n", "SigIgn", &m), -EINVAL, "a character that is no hex digit");
	is_int(parse("SigIgn:\t\n", "SigIgn", &m), -EINVAL, "an empty value");
	is_int(parse("SigIgn:", "SigIgn", &m), -EINVAL, "a field cut off at the end");
	is_int(proc_status_sigmask("SigIgn:\t0000000000001000\n", 12, "SigIgn", &m), 0, "only len bytes are read");
	ok(m == 0, "only len bytes are read: the digits after them are not");

	/* The real thing: this process also ignores SIGPIPE and SIGUSR2 (over what it inherited), and the kernel says so. */
	{
		uint64_t before = 0, after = 0;

		signal(SIGPIPE, SIG_DFL);
		signal(SIGUSR2, SIG_DFL);
		is_int(own_sigign(&before), 0, "this process's SigIgn");
		ok(!(before & (UINT64_C(1) << (SIGPIPE - 1))), "SIGPIPE is not in it at first");
		signal(SIGPIPE, SIG_IGN);
		signal(SIGUSR2, SIG_IGN);
		is_int(own_sigign(&after), 0, "this process's SigIgn again");
		ok(after == (before | (UINT64_C(1) << (SIGPIPE - 1)) | (UINT64_C(1) << (SIGUSR2 - 1))),
		   "it gained SIGPIPE and SIGUSR2, and nothing else");
	}
	return tap_done();
}
