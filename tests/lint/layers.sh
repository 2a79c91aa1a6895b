#!/bin/bash
# Layering of fleet's sources, from their '#include "..."' lines:
#  - no include cycle between modules (X.c and X.h are one module);
#  - no upward include: a file includes only modules of its own layer or
#    below, per the table below (a backend never includes the store, the
#    lifecycle owner, health, snapshots, runs or the API).
# Prints each offending line as FILE:LINE: TEXT and fails. TAP output.
# Usage: layers.sh [SRCDIR]   (default: $FLEET_SRCDIR, else the tree above tests/)
src=${1:-${FLEET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}}
cd "$src" || exit 1

# Module -> layer (a module may include its own layer and below). Today's
# flat files; when they move into api/ core/ backend/ vm/ user/ store/
# model/, this table becomes the folders.
layer_of() {
	case $1 in
	common/*) echo 0 ;;				# libc-only helpers of all three programs
	agentd/*) echo 1 ;;				# the in-environment helper
	daemon/agent | daemon/config | daemon/fleetd.h | daemon/spawn | daemon/worker) echo 1 ;;	# model, context
	daemon/backend) echo 2 ;;			# the seam (types and verbs)
	daemon/ssh | daemon/virt | daemon/cgroup | daemon/user_launch | daemon/user_snapshot | daemon/images) echo 3 ;;
	daemon/backend_vm | daemon/backend_user) echo 4 ;;	# backends: only the seam and their mechanisms
	daemon/backends | daemon/db) echo 5 ;;		# the backend registry; the store
	daemon/lifecycle) echo 6 ;;			# the one owner of agent state
	daemon/health | daemon/snapshots | daemon/runs | daemon/schedules) echo 7 ;;
	daemon/api | daemon/api_*) echo 8 ;;		# the HTTP face
	ctl/*) echo 8 ;;				# the CLI (fleetctl; agent.h for its limits)
	daemon/fleetd.c) echo 9 ;;			# main: wires everything
	*) echo unknown ;;
	esac
}

# Upward includes that are known and have an issue to go away; each is
# printed as a diagnostic, never silently. FILE:HEADER.
allowed_up=(
	# The VM backend keeps each agent's image record (db_agent_get_images,
	# db_agent_set_images) and lists agents to report foreign domains:
	# to go through the seam (a store callback) in a later step of issue #10.
	"daemon/backend_vm.c:db.h"
)

# Where a quoted include resolves: the including file's directory, then common/ (the -I paths).
resolve() {	# resolve FILE HEADER -> path or nothing
	local dir=${1%/*}
	if [ -f "$dir/$2" ]; then echo "$dir/$2"; elif [ -f "common/$2" ]; then echo "common/$2"; fi
}
module_of() {	# daemon/foo.c -> daemon/foo; fleetd.c and fleetd.h are separate (main vs context)
	case $1 in
	daemon/fleetd.c | daemon/fleetd.h) echo "$1" ;;
	*) echo "${1%.*}" ;;
	esac
}

n=0 bad=0
declare -A edge_line	# "A B" -> first FILE:LINE: TEXT that makes module A include module B
declare -A adj		# A -> "B C ..."
while IFS= read -r hit; do
	file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}; text=${rest#*:}
	hdr=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/' <<<"$text")
	target=$(resolve "$file" "$hdr")
	[ -n "$target" ] || continue
	a=$(module_of "$file"); b=$(module_of "$target")
	[ "$a" = "$b" ] && continue
	la=$(layer_of "$a"); lb=$(layer_of "$b")
	if [ "$la" = unknown ] || [ "$lb" = unknown ]; then
		echo "not ok $((++n)) - $file:$line: $text: module ${a/unknown} ${b} has no layer in tests/lint/layers.sh"
		bad=1; continue
	fi
	if [ "$lb" -gt "$la" ]; then
		allowed=0
		for x in "${allowed_up[@]}"; do [ "$x" = "$file:$hdr" ] && allowed=1; done
		if [ $allowed = 1 ]; then
			echo "# known upward include (layer $la -> $lb), see allowed_up: $file:$line: $text"
		else
			echo "not ok $((++n)) - upward include (layer $la -> $lb): $file:$line: $text"
			bad=1
		fi
	fi
	if [ -z "${edge_line["$a $b"]}" ]; then
		edge_line["$a $b"]="$file:$line: $text"
		adj[$a]+=" $b"
	fi
done < <(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' daemon/*.[ch] common/*.[ch] agentd/*.[ch] /dev/null)

# Cycles: depth-first search; each cycle is printed once, with the include lines that close it.
declare -A color	# unset: new, 1: on the stack, 2: done
declare -A seen_cycle
stack=()
dfs() {
	local u=$1 v
	color[$u]=1; stack+=("$u")
	for v in ${adj[$u]}; do
		if [ "${color[$v]}" = 1 ]; then
			local i start=-1 cyc=() key
			for ((i = 0; i < ${#stack[@]}; i++)); do [ "${stack[$i]}" = "$v" ] && start=$i; done
			cyc=("${stack[@]:$start}")
			key=$(printf '%s\n' "${cyc[@]}" | sort | tr '\n' ' ')
			[ -n "${seen_cycle[$key]}" ] && continue
			seen_cycle[$key]=1
			echo "not ok $((++n)) - include cycle: ${cyc[*]} $v"
			for ((i = 0; i < ${#cyc[@]}; i++)); do
				local from=${cyc[$i]} to=${cyc[$(((i + 1) % ${#cyc[@]}))]}
				echo "#   ${edge_line["$from $to"]}"
			done
			bad=1
		elif [ -z "${color[$v]}" ]; then
			dfs "$v"
		fi
	done
	unset 'stack[${#stack[@]}-1]'
	color[$u]=2
}
for u in $(printf '%s\n' "${!adj[@]}" | sort); do
	[ -z "${color[$u]}" ] && dfs "$u"
done

if [ $bad = 0 ]; then
	echo "ok $((++n)) - no include cycle and no upward include in daemon/ common/ agentd/"
fi
echo "1..$n"
exit $bad
