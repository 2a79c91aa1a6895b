#!/bin/bash
# Layering of fleet's sources, from their '#include "..."' lines:
#  - no include cycle between modules (X.c and X.h are one module);
#  - no upward include: a file includes only modules of its own layer or
#    below, per the table below (a backend never includes the store, the
#    lifecycle owner, health, snapshots, runs or the API).
# Prints each offending line as FILE:LINE: TEXT and fails. TAP output.
# Usage: layers.sh [SRCDIR]   (default: $FLEET_SRCDIR, else the tree above tests/)
# It needs bash (arrays): run by another shell it starts itself again under
# bash, also when that shell read it from stdin (`sh < tests/lint/layers.sh`
# from the top of the tree), where $0 is the shell, not this file.
if [ -z "${BASH_VERSION:-}" ]; then
	case $0 in
	*layers.sh) [ -r "$0" ] && exec bash "$0" "$@" ;;
	esac
	[ -r tests/lint/layers.sh ] && exec bash tests/lint/layers.sh "$@"
	echo "layers.sh: needs bash; run it as: bash tests/lint/layers.sh [SRCDIR]" >&2
	exit 2
fi
# The tree: the argument, $FLEET_SRCDIR, the tree this file is in, or (read
# from stdin, so no file name) the current directory.
case $0 in
*layers.sh) here=$(cd "$(dirname "$0")/../.." && pwd) ;;
*) here=$PWD ;;
esac
src=${1:-${FLEET_SRCDIR:-$here}}
cd "$src" || { echo "not ok 1 - cannot enter the source tree $src"; echo "1..1"; exit 1; }
if ! ls common/*.c core/*.c >/dev/null 2>&1; then
	# Nothing to read would pass by default: say where it looked instead.
	echo "not ok 1 - no sources under $src (common/*.c, core/*.c): give the tree as the argument"
	echo "1..1"
	exit 1
fi
shopt -s nullglob	# a folder with no .c or .h yet is not an error
# Whatever options the caller's shell exported (SHELLOPTS with nounset or
# errexit), a failure must never be silent: an exit other than the verdict
# below says where it stopped, on stdout, where the TAP lines go.
bad=0 verdict=
trap 'rc=$?; if [ "$rc" != 0 ] && [ -z "$verdict" ]; then echo "not ok - layers.sh stopped with status $rc before its verdict (line ${BASH_LINENO[0]:-?})"; fi' EXIT

# Folder -> layer, top down: daemon/ -> api/ -> core/ -> vm/, user/ ->
# backend/ -> store/ -> model/ -> common/ (docs/architecture.md). A file
# includes only its own folder and folders of a lower layer, by a path that
# names the folder ("core/runs.h").
layer_of() {	# layer_of MODULE: sets $layer (a function, not $(...): no fork per include)
	case $1 in
	common/*) layer=0 ;;		# libc-only helpers of all three programs
	model/*) layer=1 ;;		# records, enums and name tables, config, the context
	agentd/*) layer=1 ;;		# the in-environment helper (common/ only)
	store/*) layer=2 ;;		# the only user of sqlite3
	hooks/*) layer=2 ;;		# webhook verification and the listener process: no store, no backends
	backend/*) layer=3 ;;		# the seam and the mechanisms both backends share
	listener/*) layer=3 ;;		# fleet-hooksd, the unprivileged webhook listener: hooks/, model/, common/ only
	vm/* | user/*) layer=4 ;;	# the two adapters
	core/*) layer=5 ;;		# lifecycle (sole writer of agent state), registry, health, snapshots, runs
	api/*) layer=6 ;;		# the HTTP face
	ctl/*) layer=6 ;;		# the CLI (model/ for the enum names)
	daemon/*) layer=7 ;;		# main: wires everything
	*) layer=unknown ;;
	esac
}

# Includes that a lower layer number alone would allow but that break a rule:
# FROM-FOLDER:TO-FOLDER. Backends never touch the store (what they keep per
# agent reaches them through the seam's host callbacks); the two adapters
# know nothing of each other; the API reaches a backend only through core/
# (backend/backend.h for the seam's types); agentd, fleetctl and the
# webhook listener (listener/, fleet-hooksd) are separate programs.
denied=(
	vm:store user:store backend:store
	vm:user user:vm
	api:vm api:user
	agentd:model agentd:store agentd:backend
	ctl:api ctl:store ctl:backend
	hooks:store hooks:backend hooks:vm hooks:user hooks:core hooks:api
	listener:store listener:backend listener:vm listener:user listener:core listener:api
	backend:listener vm:listener user:listener core:listener api:listener daemon:listener ctl:listener
)

# Upward includes that are known and have an issue to go away; each is
# printed as a diagnostic, never silently. FILE:HEADER. None now: keep it so.
allowed_up=()
is_allowed() { local x; for x in "${allowed_up[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }

# Everything per include line is done with bash's own expansions: a fork per
# line (sed, $(...)) made this take minutes on a busy host.
include_re='^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)"'

folders="common model store hooks listener backend vm user core api daemon agentd ctl"
n=0 bad=0
declare -A edge_line	# "A B" -> first FILE:LINE: TEXT that makes module A include module B
declare -A adj		# A -> "B C ..."
while IFS= read -r hit; do
	file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}; text=${rest#*:}
	[[ $text =~ $include_re ]] || continue
	hdr=${BASH_REMATCH[1]}
	case $hdr in
	*/*) ;;
	*)	echo "not ok $((++n)) - include does not name its folder: $file:$line: $text"
		bad=1; continue ;;
	esac
	[ -f "$hdr" ] || continue	# a system or generated header: includes are relative to the top
	a=${file%.*}; b=${hdr%.*}	# X.c and X.h are one module
	[ "$a" = "$b" ] && continue
	layer_of "$a"; la=$layer
	layer_of "$b"; lb=$layer
	if [ "$la" = unknown ] || [ "$lb" = unknown ]; then
		echo "not ok $((++n)) - $file:$line: $text: module ${a/unknown} ${b} has no layer in tests/lint/layers.sh"
		bad=1; continue
	fi
	fa=${a%%/*}; fb=${b%%/*}
	for x in "${denied[@]}"; do
		[ "$x" = "$fa:$fb" ] || continue
		if is_allowed "$file:$hdr"; then
			echo "# known exception ($fa/ may not include $fb/), see allowed_up: $file:$line: $text"
		else
			echo "not ok $((++n)) - $fa/ may not include $fb/: $file:$line: $text"
			bad=1
		fi
	done
	if [ "$lb" -gt "$la" ]; then
		if is_allowed "$file:$hdr"; then
			echo "# known upward include (layer $la -> $lb), see allowed_up: $file:$line: $text"
		else
			echo "not ok $((++n)) - upward include (layer $la -> $lb): $file:$line: $text"
			bad=1
		fi
	fi
	if [ -z "${edge_line["$a $b"]:-}" ]; then
		edge_line["$a $b"]="$file:$line: $text"
		adj[$a]+=" $b"
	fi
done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' $(for d in $folders; do printf '%s ' "$d"/*.[ch]; done) /dev/null)

# Cycles: depth-first search; each cycle is printed once, with the include lines that close it.
declare -A color	# unset: new, 1: on the stack, 2: done
declare -A seen_cycle
stack=()
dfs() {
	local u=$1 v
	color[$u]=1; stack+=("$u")
	for v in ${adj[$u]:-}; do
		if [ "${color[$v]:-}" = 1 ]; then
			local i start=-1 cyc=() key
			for ((i = 0; i < ${#stack[@]}; i++)); do [ "${stack[$i]}" = "$v" ] && start=$i; done
			cyc=("${stack[@]:$start}")
			key=$(printf '%s\n' "${cyc[@]}" | sort | tr '\n' ' ')
			[ -n "${seen_cycle[$key]:-}" ] && continue
			seen_cycle[$key]=1
			echo "not ok $((++n)) - include cycle: ${cyc[*]} $v"
			for ((i = 0; i < ${#cyc[@]}; i++)); do
				local from=${cyc[$i]} to=${cyc[$(((i + 1) % ${#cyc[@]}))]}
				echo "#   ${edge_line["$from $to"]:-}"
			done
			bad=1
		elif [ -z "${color[$v]:-}" ]; then
			dfs "$v"
		fi
	done
	unset 'stack[${#stack[@]}-1]'
	color[$u]=2
}
for u in $(printf '%s\n' "${!adj[@]}" | sort); do
	[ -z "${color[$u]:-}" ] && dfs "$u"
done

verdict=$bad
if [ $bad = 0 ]; then
	echo "ok $((++n)) - no include cycle, no upward or denied include in $folders"
fi
echo "1..$n"
exit $bad
