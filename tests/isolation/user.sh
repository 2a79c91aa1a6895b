#!/bin/bash
# The isolation matrix (#12) for user agents: a triage and a review agent,
# each with its own secret, memory and --network nat, attack each other and
# the host with the battery of tests/lib/isolation.sh, both ways, while the
# victim holds its secret (a run sleeping with it in its environment, an
# exec with it as files). Every attempt must be denied, and every attempt's
# positive control must succeed. The whole test runs in a network and mount
# namespace of its own, with "the outside" (an egress server and a planted
# metadata server) in one more: nothing leaves the test's namespaces.
. "$FLEET_SRCDIR/tests/lib/own-netns.sh"
. "$FLEET_SRCDIR/tests/lib/common.sh"
. "$FLEET_SRCDIR/tests/lib/isolation.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
own_netns_ready
for t in nft ip nsenter socat jq busybox; do command -v $t >/dev/null || skip_all "$t missing"; done

U=isou$(test_run_id) && T=$U-triage R=$U-review	# agent names of this run (two checkouts at once never collide)
HUSER=isou-$$
on_exit "userdel $HUSER; groupdel $HUSER"

# ---- the test's world ----
iso_outside || fail_all "cannot make the outside namespace and the host's listeners"
ISO_LIBVIRT_SOCK=/run/libvirt/libvirt-sock ISO_DBUS_SOCK=/run/dbus/system_bus_socket
iso_plant_socket "$ISO_LIBVIRT_SOCK" || fail_all "cannot plant a socket at $ISO_LIBVIRT_SOCK"
iso_plant_socket "$ISO_DBUS_SOCK" || fail_all "cannot plant a socket at $ISO_DBUS_SOCK"

iso_host_exec() { sh -c "$1" sh "${@:2}"; }
# The attacker holds its own secrets while it attacks (a run would too).
iso_agent_exec() { "$FLEETCTL" exec "$1" --secrets --no-stdin --timeout 60 -- sh -c "$2" sh "${@:3}" </dev/null; }
ex() { "$FLEETCTL" exec "$1" --no-stdin --timeout 60 -- sh -c "$2" </dev/null 2>&1; }

FLEETD_PID=
on_exit '[ -n "$FLEETD_PID" ] && kill -TERM $FLEETD_PID; for _w in $(seq 100); do kill -0 $FLEETD_PID || break; sleep 0.1; done'
user_fleetd_setup isou
user_fleetd_start --hooks-listen 0.0.0.0:$ISO_HOOKS_PORT --hooks-user "$HUSER" || fail_all "fleetd does not start"
ISO_AGENT_PRELUDE="$ISO_HOST_PRELUDE
SCAN='$STATE/users/$T $STATE/users/$R $STATE/snapshots $STATE/runs /tmp /var/tmp /dev/shm /run'
"

rand() { head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
for n in $T $R; do
	"$FLEETCTL" create $n --backend user --network nat >/dev/null; ok $? "create $n --backend user --network nat"
	SECVAL[$n]="sec-$n-$(rand)"; SECLINE[$n]="ISO_TOKEN=${SECVAL[$n]}"
	printf '%s' "${SECVAL[$n]}" | "$FLEETCTL" secret set $n ISO_TOKEN >/dev/null; ok $? "$n: secret set ISO_TOKEN"
	MEMVAL[$n]="mem-$n-$(rand)"
	printf '%s' "${MEMVAL[$n]}" | "$FLEETCTL" memory $n put iso-note; ok $? "$n: memory put iso-note"
	HOMEDIR[$n]=$STATE/users/$n MEMDIR[$n]=$STATE/users/$n/memory MEMFILE[$n]=$STATE/users/$n/memory/iso-note
	"$FLEETCTL" snapshot $n iso-snap >/dev/null; ok $? "$n: a snapshot (taken before its secrets are in use)"
	SNAP[$n]=$STATE/snapshots/$n
	WORD[$n]="word-$n-$(rand)"
	ex $n "mkdir -p www && echo ${WORD[$n]} > www/w" >/dev/null; ok $? "$n: a page for its listener"
	ADDR[$n]=$(ex $n 'ip -4 -o addr show eth0' | sed -n 's/.* inet \([0-9.]*\)\/.*/\1/p')
	GW[$n]=$(ex $n 'ip -4 route show default' | sed -n 's/^default via \([0-9.]*\).*/\1/p')
	like "${ADDR[$n]} ${GW[$n]}" '^[0-9.]+ [0-9.]+$' "$n has an address and a gateway (${ADDR[$n]} via ${GW[$n]})"
	if [ -d /proc/sys/net/ipv6 ]; then
		ADDR6[$n]=$(ex $n 'ip -6 -o addr show dev eth0 scope global' | sed -n 's/.* inet6 \([0-9a-f:]*\)\/.*/\1/p')
		GW6[$n]=$(ex $n 'ip -6 route show default' | sed -n 's/^default via \([0-9a-f:]*\) .*/\1/p')
		OUT6[$n]=2001:db8:5::2
		like "${ADDR6[$n]} ${GW6[$n]}" '^[0-9a-f:]+ [0-9a-f:]+$' "$n has an IPv6 address and gateway (${ADDR6[$n]} via ${GW6[$n]})"
	fi
	# The hierarchy with its memory limit (cgroup v2, or v1's memory controller).
	CGMEM[$n]=$(find /sys/fs/cgroup -path "*/fleet/$n/memory.max" -o -path "*/fleet/$n/memory.limit_in_bytes" 2>/dev/null | head -1)
	CG[$n]=${CGMEM[$n]%/*}
	ok $((${#CGMEM[$n]} == 0)) "$n has a memory limit in its cgroup (${CGMEM[$n]})"
done
ISO_NA[disk]="user agents have no disk image (their home is mem-read, home-list)"
ISO_NA[seed]="user agents have no seed disk"

# ---- what the victims hold during the battery ----
for n in $T $R; do
	"$FLEETCTL" exec $n --no-stdin --timeout 900 -- busybox httpd -f -p $ISO_PORT -h "${HOMEDIR[$n]}/www" </dev/null >/dev/null 2>&1 &
	iso_bg
	"$FLEETCTL" exec $n --no-stdin --secret-files --timeout 900 -- sleep 901 </dev/null >/dev/null 2>&1 &
	iso_bg
	RUNMARK[$n]="iso-run-$n-$(rand)"
	"$FLEETCTL" set $n --command "echo ${RUNMARK[$n]}; head -c 4096 /dev/zero | tr '\\0' x; echo; exec sleep 900" >/dev/null
	id=$("$FLEETCTL" --json trigger $n | jq -r .id)
	RUNLOG[$n]=$STATE/runs/$id.log
done
for n in $T $R; do
	uid=$(id -u fleet-$n)
	deadline=$((SECONDS + 120))
	until HOLDPID[$n]=$(pgrep -u $uid -xf 'sleep 900' | head -1); FILEPID[$n]=$(pgrep -u $uid -xf 'sleep 901' | head -1)
		[ -n "${HOLDPID[$n]}" ] && [ -n "${FILEPID[$n]}" ] && grep -qF "${RUNMARK[$n]}" "${RUNLOG[$n]}" 2>/dev/null ||
		[ $SECONDS -ge $deadline ]; do sleep 0.2; done
	tr '\0' '\n' < /proc/${HOLDPID[$n]:-none}/environ 2>/dev/null | grep -qxF "${SECLINE[$n]}"
	ok $? "$n's run holds its secret in its environment (host pid ${HOLDPID[$n]:-none}; seen from the host)"
	grep -qF "${RUNMARK[$n]}" "${RUNLOG[$n]}" 2>/dev/null; ok $? "$n's run log has its marker (${RUNLOG[$n]})"
done

# ---- controls the battery cannot make from inside: the targets answer the host ----
wait_tcp() { local i; for ((i = 0; i < 100; i++)); do [ -n "$(busybox nc -w 3 "$@" </dev/null 2>/dev/null)" ] && return 0; sleep 0.1; done; return 1; }
wait_tcp 169.254.169.254 80; ok $? "the host reaches the planted metadata server (a route and a server exist)"
wait_tcp 198.51.100.2 8080; ok $? "the host reaches the outside server"
for ((i = 0; i < 150; i++)); do printf 'GET / HTTP/1.0\r\n\r\n' | busybox nc -w 3 ${GW[$T]} $ISO_HOOKS_PORT 2>/dev/null | grep -q '^HTTP/1' && break; sleep 0.2; done
for n in $T $R; do
	for ((i = 0; i < 100; i++)); do
		printf 'GET /w HTTP/1.0\r\n\r\n' | busybox nc -w 3 ${ADDR[$n]} $ISO_PORT 2>/dev/null | grep -qF "${WORD[$n]}" && break; sleep 0.1
	done
done

# ---- the battery, both ways ----
iso_battery $T $R "t>r"
iso_battery $R $T "r>t"
iso_matrix user

kill -0 "${HOLDPID[$T]}" && kill -0 "${HOLDPID[$R]}"; ok $? "both victims' runs survived the battery"

# ---- canaries: open holes on purpose; the same attempts must now say ALLOWED ----
chmod o+rx "${HOMEDIR[$R]}" && chmod o+x "${MEMDIR[$R]}" && chmod o+r "${MEMFILE[$R]}" && nft delete table inet fleet
ok $? "open holes: review's home and memory file readable by others, fleet's nftables table deleted"
iso_canary $T $R "canary" "holes opened by the test" home-list net-metadata ${OUT6[$T]:+net-metadata6 net-host-gw6}
# The memory file's hole is none: the other's store is not even mounted in an agent's sandbox
# (user/init.c drops every other agent's store), so its file is not there to read.
ISO_ATT=$T ISO_VIC=$R ISO_COL="mem-hole" ISO_ONLY=" mem-read " _iso_attempts $T $R
done_testing
