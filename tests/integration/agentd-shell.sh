#!/bin/bash
# agentd as the guest root's login shell (agentd/shell.h): dropbear runs
# `agentd -c LINE`; fleetd's run-as line runs with no shell in between (two
# program starts: agentd, the command; /bin/sh exec'ing agentd made three),
# and every other line, and an interactive login, is /bin/sh's, unchanged.
# `agentd health` through run-as runs in that process (no second agentd).
# Runs the built agentd on the host, as root (run-as drops to nobody).
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (agentd run-as drops privileges)"
command -v strace >/dev/null || skip_all "strace not installed (scripts/deps.sh installs it)"
getent passwd nobody >/dev/null || skip_all "no user nobody"

# q WORD: WORD quoted as fleetd's ssh_quote() does (tests/unit/test_ssh_quote pins that form).
q() {
	case $1 in
	'' | *[!A-Za-z0-9_./,:+@%-]*) printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")" ;;
	*) printf '%s' "$1" ;;
	esac
}
A=$(q "$AGENTD")
T=$TEST_TMP

# execs FILE: how many programs strace saw started (successful execve calls).
execs() { grep -c 'execve(.*= 0$' "$1"; }
# shell_run TRACE LINE [STDIN]: agentd as dropbear starts a login shell for a command.
shell_run() {
	printf '%b' "${3:-}" | SHELL=/usr/bin/agentd strace -f -qq -e trace=execve -e signal=none -o "$T/$1" \
		"$AGENTD" -c "$2" >"$T/out" 2>"$T/err"
}

# fleetd's line (vm/ssh_quote.c): the pid line, then agentd run-as; the command one program (env).
line="echo \$\$ >&2; exec $A run-as nobody -- env"
SSH_CONNECTION=x shell_run fast "$line"; rc=$?
is "$rc" 0 "fleetd's run-as line runs under agentd -c"
like "$(cat "$T/out")" "^USER=nobody$" "as the user it names"
is "$(grep -c '^SSH_CONNECTION=' "$T/out")" 0 "with none of the session's environment"
is "$(head -1 "$T/err")" "$(grep -E 'execve\("[^"]*/env", .*= 0$' "$T/fast" | cut -d' ' -f1)" \
	"stderr's first line is the pid of the process that became the command"
is "$(wc -l < "$T/err")" 1 "and nothing else is on stderr"
is "$(execs "$T/fast")" 2 "two program starts: agentd, then the command (no shell)"
strace -f -qq -e trace=execve -e signal=none -o "$T/sh" /bin/sh -c "$line" >/dev/null 2>&1
is "$(execs "$T/sh")" 3 "control: the same line run by /bin/sh starts three"

# The environment frame on stdin, then the command's own stdin, as fleetd sends them.
line="echo \$\$ >&2; exec $A run-as nobody --env-stdin -- sh -c $(q 'echo "$A|$HOME"; cat')"
shell_run env "$line" 'FLEET-ENV 4\nA=1\0rest'
is "$(cat "$T/out")" "1|$(getent passwd nobody | cut -d: -f6)
rest" "--env-stdin: the frame's entries after the drop, the rest of stdin for the command"

# Exit statuses are the command's, as before.
shell_run st "echo \$\$ >&2; exec $A run-as nobody -- sh -c $(q 'exit 7')"
is "$?" 7 "the command's exit status comes back"
shell_run st "echo \$\$ >&2; exec $A run-as nobody -- /no/such/program"
is "$?" 127 "a missing command exits 127"
shell_run st "echo \$\$ >&2; exec $A run-as no-such-user -- true"
is "$?" 126 "an unknown user exits 126"
is "$(tail -1 "$T/err")" "agentd: run-as: no user 'no-such-user' in /etc/passwd" "  and says so"

# The words as ssh_quote() made them, nothing expanded: quotes, a quote inside, a tilde, an empty word.
shell_run words "echo \$\$ >&2; exec $A run-as nobody -- printf '%s|' $(q "it's") $(q '~root') $(q '$HOME *') $(q '')"
is "$(cat "$T/out")" "it's|~root|\$HOME *||" "quoted words reach the command as they were, by agentd"
is "$(execs "$T/words")" 2 "  with no shell"

# fleetd's health check (`agentd health` as the user): run by the run-as process itself, then the
# shell it checks; two program starts, where exec'ing agentd again made three.
shell_run health "echo \$\$ >&2; exec $A run-as root -- $A health"
is "$?" 0 "agentd health through run-as passes"
is "$(cat "$T/out")" healthy "  and prints healthy"
is "$(execs "$T/health")" 2 "  two program starts: agentd, then /bin/sh (the check's shell)"
like "$(cat "$T/health")" 'execve\("/bin/sh", \["sh", "-c", "exit 0"\]' "  the second is the check's shell"
shell_run health "echo \$\$ >&2; exec $A run-as nobody -- $A health"
is "$?" 1 "as a user whose home is missing: unhealthy, exit 1"
like "$(cat "$T/out")" '^unhealthy: cannot stat the home file system: ' "  saying why"
is "$(execs "$T/health")" 2 "  with the shell still started and reaped"
cp "$AGENTD" "$T/other-agentd"
shell_run health "echo \$\$ >&2; exec $A run-as root -- $(q "$T/other-agentd") health"
is "$(cat "$T/out")" healthy "another agentd file named as the command: it runs the check"
is "$(execs "$T/health")" 3 "  as its own program (three starts): only this very file runs it in-process"

# Anything else is /bin/sh's: fleetd's kill line, a person's command, lines that only look alike.
shell_run other 'echo hi; echo "$SHELL"; exit 3'
is "$?" 3 "another line: /bin/sh's exit status"
is "$(cat "$T/out")" "hi
/bin/sh" "another line: run by /bin/sh, told SHELL=/bin/sh"
shell_run other "echo \$\$ >&2; exec $A run-as nobody -- echo \$HOME"
is "$(cat "$T/out")" "$HOME" "an unquoted \$HOME: the shell expands it, as before (not taken by agentd)"
like "$(cat "$T/other")" 'execve\("/bin/sh", \["sh", "-c", ' "and it went through /bin/sh"
shell_run other "echo \$\$ >&2; exec  $A run-as nobody -- true"
like "$(cat "$T/other")" 'execve\("/bin/sh", \["sh", "-c", ' "two spaces (not fleetd's form): through /bin/sh"
shell_run other "echo \$\$ >&2; exec $A run-as nobody -- echo \$(id -un)"
is "$(cat "$T/out")" root "a command substitution: the shell's, as before (agentd takes none)"
shell_run other "echo \$\$ >&2; exec $A run-as nobody -- echo ~root"
is "$(cat "$T/out")" "$(getent passwd root | cut -d: -f6)" "an unquoted ~root: the shell's tilde expansion, as before"
like "$(cat "$T/other")" 'execve\("/bin/sh", \["sh", "-c", ' "  through /bin/sh"
shell_run other "echo \$\$ >&2; exec $A run-as nobody -- echo 'a b"
like "$(cat "$T/other")" 'execve\("/bin/sh", \["sh", "-c", ' "an open quote: through /bin/sh"
shell_run other "echo \$\$ >&2; exec $A run-as nobody -- true "
like "$(cat "$T/other")" 'execve\("/bin/sh", \["sh", "-c", ' "a trailing space: through /bin/sh"
shell_run other "echo \$\$ >&2; exec /bin/echo run-as nobody -- hi"
is "$(cat "$T/out")" "run-as nobody -- hi" "run-as after a program that is not agentd: that program runs, by /bin/sh"

# An interactive login (argv[0] "-agentd") gets /bin/sh as a login shell.
is "$(echo 'echo login-ok' | (exec -a -agentd "$AGENTD") 2>/dev/null)" login-ok "a login: /bin/sh reads the commands"

done_testing
