# shellcheck shell=bash
# isolation.sh: the isolation matrix's battery (#12), shared by
# tests/isolation/user.sh and tests/isolation/vm.sh. Source after common.sh.
#
# An attempt is one shell script, run twice: as the attack (inside the
# attacking agent, against the other agent or the host) and as its positive
# control, which must succeed, so a broken attempt cannot pass as "denied":
#   self  the same script inside the attacker, against its own things
#   host  the same script on the host (where fleetd runs), against the same
#         target: the target exists and the script sees it
# A script prints GOT-IT when it got what it went for; nothing else counts.
# Results: denied (ok), ALLOWED (not ok), broken (control failed: not ok),
# n/a (a reason is printed as a diag line, no TAP result: under CI=true a
# SKIP fails the run, and n/a is no missing package). iso_matrix prints the table.
#
# The backend file defines, before iso_battery:
#   iso_agent_exec AGENT SCRIPT ARGS...  run "sh -c SCRIPT sh ARGS" in AGENT
#   iso_host_exec SCRIPT ARGS...         the same on the host
#   ISO_AGENT_PRELUDE                    shell functions the agent's scripts use:
#                                        tcp ADDR PORT, uconn_http SOCK PATH,
#                                        uconn_open SOCK; SCAN (dirs to search)
# and fills the per-agent arrays below (an empty entry: the row is n/a for
# that backend, with ISO_NA[ID] as the reason; ISO_OFF[ID]=REASON makes a
# row n/a where its target has a name but no meaning, e.g. a guest's pid).
# ISO_TODO[ID]=WHY marks a known hole not fixed yet: its failure is a TAP TODO.

declare -A MEMFILE MEMDIR MEMVAL HOMEDIR SECLINE SECVAL HOLDPID FILEPID RUNLOG RUNMARK SNAP DISK SEED
declare -A ADDR WORD GW ADDR6 GW6 OUT6 CG CGMEM ISO_OFF ISO_NA ISO_TODO ISO_RES ISO_DESC
ISO_ROWS=() ISO_COLS=() ISO_COL= ISO_ATT= ISO_VIC=
ISO_PORT=9000 ISO_HOOKS_PORT=${ISO_HOOKS_PORT:-18472}

. "$FLEET_SRCDIR/tests/lib/outside.sh"

# What the host's own scripts use: curl, socat and busybox are on the host.
ISO_HOST_PRELUDE='
tcp() { busybox nc -w 3 "$1" "$2" 2>/dev/null; }
uconn_http() { curl -sS -i --max-time 90 --unix-socket "$1" "http://fleet$2"; }
uconn_open() { socat -T2 -u OPEN:/dev/null UNIX-CONNECT:"$1" 2>/dev/null; }
'

# iso_bg: after "CMD &": the cleanup kills it by pid; disowned, so its SIGKILL at exit is not
# reported on stderr in the middle of the matrix.
iso_bg() { _pids+=($!); disown $!; }

_iso_got() { printf '%s' "$1" | grep -q GOT-IT; }

# iso_try ID DESCRIPTION self|host SCRIPT ATTACK_ARGS... [-- CONTROL_ARGS...]
# Control args default to the attack's. --control-script S before ID runs S
# as the control instead (only where the brief allows: reading one's own
# cgroup file, as the write it guards cannot succeed for anyone).
iso_try() {
	local cscript=
	if [ "$1" = --control-script ]; then cscript=$2; shift 2; fi
	local id=$1 desc=$2 kind=$3 script=$4; shift 4
	case "${ISO_ONLY:- $id }" in *" $id "*) ;; *) return 0 ;; esac
	local attack=() control=() seen=
	while [ $# -gt 0 ]; do
		if [ "$1" = -- ] && [ -z "$seen" ]; then seen=1; shift; continue; fi
		if [ -n "$seen" ]; then control+=("$1"); else attack+=("$1"); fi
		shift
	done
	[ -n "$seen" ] || control=("${attack[@]}")
	_iso_row "$id" "$desc"
	if [ -n "${ISO_OFF[$id]:-}" ]; then _iso_result "$id" "n/a" "${ISO_OFF[$id]}"; return 0; fi
	local a
	for a in "${attack[@]}" "${control[@]}"; do
		if [ -z "$a" ]; then _iso_result "$id" "n/a" "${ISO_NA[$id]:-no such target for this backend}"; return 0; fi
	done
	local cout out
	if [ "$kind" = self ]; then
		cout=$(iso_agent_exec "$ISO_ATT" "$ISO_AGENT_PRELUDE${cscript:-$script}" "${control[@]}" 2>&1)
	else
		cout=$(iso_host_exec "$ISO_HOST_PRELUDE${cscript:-$script}" "${control[@]}" 2>&1)
	fi
	if ! _iso_got "$cout"; then
		_iso_result "$id" broken "the $kind control did not succeed: $(printf '%s' "$cout" | tr '\n' ' ' | cut -c1-200)"
		return 0
	fi
	# ISO-RAN first: an attack that never ran (exec failed) is broken, not denied.
	out=$(iso_agent_exec "$ISO_ATT" "echo ISO-RAN; $ISO_AGENT_PRELUDE$script" "${attack[@]}" 2>&1)
	if ! printf '%s' "$out" | grep -qx ISO-RAN; then
		_iso_result "$id" broken "the attack did not run in $ISO_ATT: $(printf '%s' "$out" | tr '\n' ' ' | cut -c1-200)"
	elif _iso_got "$out"; then
		_iso_result "$id" ALLOWED "$(printf '%s' "$out" | tr '\n' ' ' | cut -c1-200)"
	else
		_iso_result "$id" denied ""
	fi
}

_iso_row() {
	[ -n "${ISO_DESC[$1]+x}" ] || { ISO_ROWS+=("$1"); ISO_DESC[$1]=$2; }
}

_iso_result() {	# ID RESULT DETAIL: one TAP line and a matrix cell
	local id=$1 res=$2 detail=$3 todo=
	ISO_RES[$id,$ISO_COL]=$res
	[ -n "${ISO_TODO[$id]:-}" ] && todo=" # TODO ${ISO_TODO[$id]}"
	if [ -n "${ISO_EXPECT_ALLOWED:-}" ]; then	# a canary: the hole was opened on purpose
		[ "$res" = ALLOWED ]; ok $? "$ISO_COL $id: ${ISO_DESC[$id]}: $res (want ALLOWED: $ISO_EXPECT_ALLOWED)"
		return 0
	fi
	case "$res" in
	denied) ok 0 "$ISO_COL $id: ${ISO_DESC[$id]}: denied (control succeeded)$todo" ;;
	"n/a") diag "$ISO_COL $id: ${ISO_DESC[$id]}: n/a: $detail" ;;
	*)	ok 1 "$ISO_COL $id: ${ISO_DESC[$id]}: $res$todo"; diag "  $res: $detail" ;;
	esac
}

# iso_battery ATTACKER VICTIM COLUMN: every attempt, ATTACKER against VICTIM and the host.
iso_battery() {
	ISO_ATT=$1 ISO_VIC=$2 ISO_COL=$3
	ISO_COLS+=("$3")
	_iso_attempts "$1" "$2"
}

_iso_attempts() {	# ATTACKER VICTIM: the list (only the ids in ISO_ONLY, when set)
	local a=$1 v=$2
	# --- the other's files and memory ---
	iso_try mem-read "read the other's memory value (its file)" self \
		'grep -qF "$2" "$1" && echo GOT-IT' "${MEMFILE[$v]:-}" "${MEMVAL[$v]:-}" -- "${MEMFILE[$a]:-}" "${MEMVAL[$a]:-}"
	iso_try mem-scan "find the other's memory value in any file it can read" self \
		'grep -rsqF "$1" $SCAN && echo GOT-IT' "${MEMVAL[$v]:-}" -- "${MEMVAL[$a]:-}"
	iso_try mem-write "write into the other's memory store" self \
		'echo planted > "$1/iso-planted" && echo GOT-IT' "${MEMDIR[$v]:-}" -- "${MEMDIR[$a]:-}"
	iso_try home-list "list the other's home" self 'ls -a "$1" >/dev/null && echo GOT-IT' "${HOMEDIR[$v]:-}" -- "${HOMEDIR[$a]:-}"
	# --- the other's secrets, while it holds them (a run sleeping with them in its environment) ---
	iso_try sec-environ "find the other's secret in any process's environ" self \
		'cat /proc/[0-9]*/environ 2>/dev/null | tr "\0" "\n" | grep -qxF "$1" && echo GOT-IT' \
		"${SECLINE[$v]:-}" -- "${SECLINE[$a]:-}"
	iso_try sec-pid "read the environ of the other's secret-holding process by its pid" self \
		'p=$1; [ "$p" = self ] && p=$$; tr "\0" "\n" < /proc/$p/environ | grep -qxF "$2" && echo GOT-IT' \
		"${HOLDPID[$v]:-}" "${SECLINE[$v]:-}" -- self "${SECLINE[$a]:-}"
	iso_try sec-files "read the other's secret files (/proc/PID/root/run/secrets)" host \
		'grep -qxF "$2" "/proc/$1/root/run/secrets/ISO_TOKEN" && echo GOT-IT' "${FILEPID[$v]:-}" "${SECVAL[$v]:-}"
	iso_try proc-signal "signal the other's process" self \
		'p=$1; [ "$p" = self ] && p=$$; kill -0 "$p" && echo GOT-IT' "${HOLDPID[$v]:-}" -- self
	iso_try run-log "read the other's run log (STATE/runs/ID.log)" host \
		'grep -qF "$2" "$1" && echo GOT-IT' "${RUNLOG[$v]:-}" "${RUNMARK[$v]:-}"
	iso_try snapshot "read the other's snapshot" host 'grep -rqF "$2" "$1" && echo GOT-IT' "${SNAP[$v]:-}" "${MEMVAL[$v]:-}"
	iso_try disk "read the other's VM disk (and its internal snapshots)" host \
		'head -c 4 "$1" | grep -q QFI && echo GOT-IT' "${DISK[$v]:-}"
	iso_try seed "read the other's seed disk (its SSH host key)" host 'cat "$1" >/dev/null && echo GOT-IT' "${SEED[$v]:-}"
	# --- fleetd's files and sockets, the host's daemons ---
	iso_try host-db "read fleetd's database" host \
		'head -c 15 "$1" | grep -q "SQLite format 3" && echo GOT-IT' "$STATE/fleet.db"
	iso_try host-key "read fleetd's host key (secret.key)" host '[ "$(wc -c < "$1")" -eq 32 ] && echo GOT-IT' "$STATE/secret.key"
	iso_try host-log "read fleetd's log" host 'grep -q . "$1" && echo GOT-IT' "$STATE/fleetd.log"
	iso_try host-state "list fleetd's state dir" host 'ls "$1" | grep -q fleet.db && echo GOT-IT' "$STATE"
	iso_try ctl-logs "ask fleetd for the other's runs (fleetctl logs) on its control socket" host \
		'uconn_http "$1" "/v1/agents/$2/runs" | grep -q "^HTTP/1.[01] 200" && echo GOT-IT' "$SOCK" "$v"
	iso_try ctl-memory "ask fleetd for the other's memory on its control socket" host \
		'uconn_http "$1" "/v1/agents/$2/memory/iso-note" | grep -qF "$3" && echo GOT-IT' "$SOCK" "$v" "${MEMVAL[$v]:-}"
	iso_try libvirt-sock "connect to libvirt's socket" host 'uconn_open "$1" && echo GOT-IT' "${ISO_LIBVIRT_SOCK:-}"
	iso_try dbus "connect to the D-Bus system bus socket" host 'uconn_open "$1" && echo GOT-IT' "${ISO_DBUS_SOCK:-}"
	# --- the network (each listener answers someone: the host, or the agent itself) ---
	iso_try net-peer "reach a listener of the other on its address" self \
		'printf "GET /w HTTP/1.0\r\n\r\n" | tcp "$1" "$2" | grep -qF "$3" && echo GOT-IT' \
		"${ADDR[$v]:-}" $ISO_PORT "${WORD[$v]:-}" -- "${ADDR[$a]:-}" $ISO_PORT "${WORD[$a]:-}"
	iso_try net-host-lo "reach a service on the host's 127.0.0.1" host \
		'tcp "$1" "$2" </dev/null | grep -qF "$3" && echo GOT-IT' 127.0.0.1 7001 host-loopback
	iso_try net-host-gw "reach a service on the host's address on its link" host \
		'tcp "$1" "$2" </dev/null | grep -qF "$3" && echo GOT-IT' "${GW[$a]:-}" 7002 host-any
	iso_try net-hooks "reach fleetd's webhook listener on the host's address on its link" host \
		'printf "GET /hooks/none HTTP/1.0\r\n\r\n" | tcp "$1" "$2" | grep -q "^HTTP/1" && echo GOT-IT' \
		"${GW[$a]:-}" $ISO_HOOKS_PORT
	iso_try net-metadata "reach 169.254.169.254 (control: an outside server, by NAT)" self \
		'tcp "$1" "$2" </dev/null | grep -qF "$3" && echo GOT-IT' 169.254.169.254 80 metadata -- 198.51.100.2 8080 outside-two
	# --- the same over IPv6 (user agents' networks have it; ADDR6, GW6, OUT6 empty: n/a) ---
	iso_try net-peer6 "reach a listener of the other on its IPv6 address" self \
		'printf "GET /w HTTP/1.0\r\n\r\n" | tcp "$1" "$2" | grep -qF "$3" && echo GOT-IT' \
		"${ADDR6[$v]:-}" $ISO_PORT "${WORD[$v]:-}" -- "${ADDR6[$a]:-}" $ISO_PORT "${WORD[$a]:-}"
	iso_try net-host-lo6 "reach a service on the host's [::1]" host \
		'tcp "$1" "$2" </dev/null | grep -qF "$3" && echo GOT-IT' ::1 7005 host-loopback6
	iso_try net-host-gw6 "reach a service on the host's IPv6 address on its link" host \
		'tcp "$1" "$2" </dev/null | grep -qF "$3" && echo GOT-IT' "${GW6[$a]:-}" 7006 host-any6
	iso_try net-metadata6 "reach fd00:ec2::254 (control: an outside IPv6 server, by NAT66)" self \
		'tcp "$1" "$2" </dev/null | grep -qF "$3" && echo GOT-IT' "${OUT6[$a]:+fd00:ec2::254}" 80 metadata6 \
		-- "${OUT6[$a]:-}" 8080 outside-two6
	# --- cgroup limits (controls: the host does the same write, or the agent reads its own file) ---
	iso_try cg-memory-max "raise its own memory limit (writes back its current value)" host \
		'v=$(cat "$1") && echo "$v" > "$1" && echo GOT-IT' "${CGMEM[$a]:-}"
	# The control: its own cgroup file /proc/self/cgroup names that group (the path is right).
	iso_try --control-script 'while IFS=: read -r _ _ p; do case "$1" in *"$p") [ -n "${p#/}" ] && echo GOT-IT ;; esac; done < /proc/self/cgroup' \
		cg-parent "move itself into its cgroup's parent (control: /proc/self/cgroup names its group)" self \
		'echo $$ > "$1/../cgroup.procs" && echo GOT-IT' "${CG[$a]:-}"
	iso_try cg-other "move itself into the other's cgroup (control: the host moves the other's process there)" host \
		'p=$2; [ "$p" = self ] && p=$$; echo "$p" > "$1/cgroup.procs" && echo GOT-IT' \
		"${CG[$v]:-}" self -- "${CG[$v]:-}" "${HOLDPID[$v]:-}"
}

# iso_canary ATTACKER VICTIM COLUMN WHY ID...: the attempts ID after the test opened a hole on
# purpose (WHY says which): each must come out ALLOWED, so the matrix is seen to catch a hole.
iso_canary() {
	local a=$1 v=$2 col=$3 why=$4 id; shift 4
	local ISO_EXPECT_ALLOWED=$why
	ISO_ATT=$a ISO_VIC=$v ISO_COL=$col
	ISO_COLS+=("$col")
	local ISO_ONLY=" $* "
	_iso_attempts "$a" "$v"
}

# iso_matrix BACKEND: the table, as TAP diag lines.
iso_matrix() {
	local id c line
	line=$(printf '%-14s %-62s' attempt "")
	for c in "${ISO_COLS[@]}"; do line+=$(printf ' %-16s' "$1 $c"); done
	diag "$line"
	for id in "${ISO_ROWS[@]}"; do
		line=$(printf '%-14s %-62s' "$id" "${ISO_DESC[$id]:0:62}")
		for c in "${ISO_COLS[@]}"; do line+=$(printf ' %-16s' "${ISO_RES[$id,$c]:-?}"); done
		diag "$line"
	done
}

# iso_outside [RUNNER...]: "the outside" of tests/lib/outside.sh (RUNNER as there), with a
# server on 198.51.100.2:8080 and [2001:db8:5::2]:8080 and planted metadata servers on
# 169.254.169.254:80 and [fd00:ec2::254]:80, routed through it; and the host's own services on
# 127.0.0.1:7001, [::1]:7005, 0.0.0.0:7002 and [::]:7006. Nothing leaves the test's namespaces.
# Nonzero if a step failed.
iso_outside() {
	local OUTSIDE_EXTRA="169.254.169.254 fd00:ec2::254"
	outside_setup "$@" || return 1
	"$@" nsenter --net="$OUTSIDE_NS" socat TCP-LISTEN:8080,bind=198.51.100.2,fork,reuseaddr SYSTEM:'echo outside-two' 2>/dev/null &
	iso_bg
	"$@" nsenter --net="$OUTSIDE_NS" socat TCP-LISTEN:80,bind=169.254.169.254,fork,reuseaddr SYSTEM:'echo metadata' 2>/dev/null &
	iso_bg
	"$@" nsenter --net="$OUTSIDE_NS" socat TCP6-LISTEN:8080,bind=[2001:db8:5::2],fork,reuseaddr SYSTEM:'echo outside-two6' 2>/dev/null &
	iso_bg
	"$@" nsenter --net="$OUTSIDE_NS" socat TCP6-LISTEN:80,bind=[fd00:ec2::254],fork,reuseaddr SYSTEM:'echo metadata6' 2>/dev/null &
	iso_bg
	"$@" socat TCP-LISTEN:7001,bind=127.0.0.1,fork,reuseaddr SYSTEM:'echo host-loopback' 2>/dev/null &
	iso_bg
	"$@" socat TCP-LISTEN:7002,fork,reuseaddr SYSTEM:'echo host-any' 2>/dev/null &
	iso_bg
	"$@" socat TCP6-LISTEN:7005,bind=[::1],fork,reuseaddr SYSTEM:'echo host-loopback6' 2>/dev/null &
	iso_bg
	"$@" socat TCP6-LISTEN:7006,ipv6only=1,fork,reuseaddr SYSTEM:'echo host-any6' 2>/dev/null &
	iso_bg
}

# iso_plant_socket PATH [RUNNER...]: a listening Unix socket at PATH when there is none (no
# libvirtd or D-Bus where fleetd runs), on a tmpfs mounted over its directory in the test's own
# mount namespace, so an agent reaching it would really connect. RUNNER as for iso_outside.
# Not in $(...): it registers cleanups and pids.
iso_plant_socket() {
	local path=$1 dir=${1%/*}; shift
	if "$@" test -S "$path"; then return 0; fi
	"$@" test -d "$dir" || { "$@" mkdir "$dir" && on_exit "$* rmdir '$dir'"; } || return 1
	"$@" mount -t tmpfs -o mode=0755 iso-planted "$dir" || return 1
	on_exit "$* umount -l '$dir'"
	"$@" socat UNIX-LISTEN:"$path",mode=0777,fork SYSTEM:true 2>/dev/null &
	iso_bg
}
