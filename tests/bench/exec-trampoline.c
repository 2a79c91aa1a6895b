/*
 * exec-trampoline: the floor of any client program (tests/bench/user-bench.sh).
 * Usage: exec-trampoline PATH [ARG...]  -- execs PATH with the given arguments
 * and does nothing else. Built static, so its start is one exec of a small
 * static binary with no dynamic loader: what a client program that asks a
 * daemon to start a command (fleetctl exec) pays before the daemon's path,
 * however little it does itself.
 */
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs("usage: exec-trampoline PATH [ARG...]\n", stderr);
		return 2;
	}
	execv(argv[1], argv + 1);
	perror(argv[1]);
	return 127;
}
