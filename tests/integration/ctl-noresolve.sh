#!/bin/bash
# fleetctl resolves nothing and loads nothing (issue #16: it starts on every
# exec, and a static glibc's NSS would load nsswitch.conf's modules into it):
# under strace, each command an operator runs against a real fleetd opens no
# nsswitch.conf, hosts, resolv.conf or libnss*, no shared object beyond what
# the dynamic loader maps for a dynamic fleetctl (none for a static one), and
# makes no socket but AF_UNIX ones. Where configure linked it statically
# (FLEETCTL_LDFLAGS), `file` must say so. Under ASan, fleetctl is dynamic
# (configure says why) and LSan cannot run under ptrace: leak checks off for
# the traced runs only.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=cnr$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v strace >/dev/null || skip_all "needs strace (scripts/deps.sh installs it)"
command -v file >/dev/null || skip_all "needs file"

# Is this build's fleetctl meant to be static? configure's answer, as the Makefile has it.
static_flags=$(sed -n 's/^FLEETCTL_LDFLAGS = //p' "$FLEET_BUILDDIR/Makefile")
kind=$(file -L "$FLEETCTL")
if [ -n "$static_flags" ]; then
	like "$kind" "statically linked" "configure linked fleetctl statically, and file(1) says so" || diag "$kind"
else
	diag "fleetctl is dynamic in this build (configure: $(grep -o 'fleetctl is linked statically.*' "$FLEET_BUILDDIR/configure.out" 2>/dev/null || echo '?'))"
	like "$kind" "dynamically linked" "a dynamic fleetctl (no FLEETCTL_LDFLAGS): file(1) says so" || diag "$kind"
fi
# The shared objects a dynamic fleetctl maps at start (its loader and what ldd lists), real paths:
# any other one opened would be a dlopen (an NSS module, a gconv module...).
declare -A linked=()
so_scope="at all"
if [ -z "$static_flags" ]; then
	so_scope="beyond those ldd lists"
	while read -r so; do linked[$(readlink -f "$so")]=1; done < <(ldd "$FLEETCTL" | grep -oE '/[^ ]+\.so[^ ]*')
fi

user_fleetd_setup ctlnr
user_fleetd_start || fail_all "fleetd does not start"
ASAN_TRACED=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

# traced DESC ARGS...: run fleetctl ARGS under strace -f; its stdout in $out, its exit in $rc,
# then check what it opened and which sockets it made.
traced() {
	local desc=$1 log=$TEST_TMP/strace.$_tap_n path bad so
	shift
	out=$(ASAN_OPTIONS=$ASAN_TRACED strace -f -qq -o "$log" -e trace=open,openat,openat2,socket,execve \
		"$FLEETCTL" "$@" </dev/null 2>"$TEST_TMP/stderr"); rc=$?
	bad=$(grep -E 'nsswitch\.conf|/etc/hosts|/etc/host\.conf|resolv\.conf|libnss|/etc/services|/etc/gai\.conf' "$log")
	is "$bad" "" "$desc: no nsswitch.conf, hosts, resolv.conf or NSS module opened" || diag "$bad"
	bad=
	while read -r path; do
		so=$(readlink -f "$path" 2>/dev/null || echo "$path")
		[ -n "${linked[$so]:-}" ] || bad+="$path "
	done < <(grep -E '^[0-9]+ +open(at|at2)?\(' "$log" | grep -v '= -1 ' | grep -oE '"[^"]*\.so(\.[0-9.]+)?"' | tr -d '"')
	is "$bad" "" "$desc: no shared object opened $so_scope" || diag "$bad"
	bad=$(grep -E '^[0-9]+ +socket\(' "$log" | grep -v 'socket(AF_UNIX,')
	is "$bad" "" "$desc: AF_UNIX sockets only" || diag "$bad"
	bad=$(grep -E '^[0-9]+ +execve\(' "$log" | grep -vF "execve(\"$FLEETCTL\"")
	is "$bad" "" "$desc: starts no other program" || diag "$bad"
}

traced "--version" --version
is "$rc" 0 "fleetctl --version exits 0"
like "$out" "^fleetctl [0-9.]+" "and prints its version"
traced "create" create $U-a --backend user
is "$rc" 0 "create exits 0" || sed 's/^/# /' "$TEST_TMP/stderr"
like "$out" "agent '$U-a' created" "and says so"
traced "list" list
like "$out" "$U-a +user" "list shows the agent"
traced "exec" exec $U-a --no-stdin -- echo hello from the agent
is "$rc" 0 "exec exits 0" || sed 's/^/# /' "$TEST_TMP/stderr"
is "$out" "hello from the agent" "the command's output comes through the socket"
traced "show" show $U-a
like "$out" "state: +" "show prints the agent"
traced "doctor" doctor
like "$out" "^OK +fleetd +fleetd answers at $SOCK" "doctor reaches fleetd" || diag "$out"
like "$out" "OK +socket-group +group root, mode 0660" "and names the socket's group (from /etc/group)" || diag "$out"
traced "rm" rm --force $U-a
is "$rc" 0 "rm exits 0" || sed 's/^/# /' "$TEST_TMP/stderr"

# A host name in the URL is never resolved: the socket path is what libcurl connects to. Without
# fleetd there (a socket path nothing listens on), the answer is fleetd's absence, not a lookup.
traced "no fleetd" -s "$TEST_TMP/nothing.sock" status
is "$rc" 1 "without fleetd: exit 1"
like "$(cat "$TEST_TMP/stderr")" "nothing.sock" "naming the socket" || sed 's/^/# /' "$TEST_TMP/stderr"

done_testing
