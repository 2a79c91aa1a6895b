#!/bin/bash
# The isolation matrix (#12) for VM agents: a triage and a review guest,
# each with its own secret, memory and --network nat, attack each other and
# the host with the battery of tests/lib/isolation.sh, both ways, as root in
# their guests (the strongest an agent can be there), while the victim
# holds its secret (a run sleeping with it in its environment). Every
# attempt must be denied, and every attempt's positive control must
# succeed. One private libvirtd in a network + mount namespace this test
# makes (tests/lib/vmns.sh), two guests booted once; "the outside" (an
# egress server, a planted metadata server) is one more namespace behind
# it: nothing leaves the test's namespaces.
. "$FLEET_SRCDIR/tests/lib/common.sh"
. "$FLEET_SRCDIR/tests/lib/isolation.sh"

command -v jq >/dev/null || skip_all "jq not installed"
. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg dnsmasq busybox socat nft

T=isov-triage R=isov-review
HUSER=isov-$$
on_exit "userdel $HUSER; groupdel $HUSER"

# ---- the test's world, inside the namespace fleetd and libvirtd run in ----
# A command prefix, not the vmns_exec function: each background server's $! is the server.
VMNS_RUN=(nsenter -t "$VMNS_PID" -m -n --)
iso_outside "${VMNS_RUN[@]}" || fail_all "cannot make the outside namespace and the host's listeners"
ISO_LIBVIRT_SOCK=/run/libvirt/libvirt-sock ISO_DBUS_SOCK=/run/dbus/system_bus_socket
iso_plant_socket "$ISO_DBUS_SOCK" "${VMNS_RUN[@]}" || fail_all "cannot plant a socket at $ISO_DBUS_SOCK"

ISO_NA[net-peer6]="VM agents' network (libvirt's fleet-nat) is IPv4 only"
ISO_NA[net-host-gw6]=${ISO_NA[net-peer6]} ISO_NA[net-metadata6]=${ISO_NA[net-peer6]}
iso_host_exec() { vmns_exec sh -c "$1" sh "${@:2}"; }
# As guest root, holding its own secrets (a run would too).
iso_agent_exec() { "$FLEETCTL" exec "$1" --root --secrets --no-stdin --timeout 60 -- sh -c "$2" sh "${@:3}" </dev/null; }
ex() { "$FLEETCTL" exec "$1" --root --no-stdin --timeout 60 -- sh -c "$2" </dev/null 2>&1; }
# busybox in the guest has no Unix-socket client: a socket at the path counts as reached.
ISO_AGENT_PRELUDE='
tcp() { busybox nc -w 3 "$1" "$2" 2>/dev/null; }
uconn_http() { [ -S "$1" ] && echo "HTTP/1.1 200 (a socket exists at $1)"; }
uconn_open() { [ -S "$1" ]; }
SCAN="/home /root /tmp /var /etc /run /mnt /media /srv /opt"
'

fleetd_ns_start --hooks-listen 0.0.0.0:$ISO_HOOKS_PORT --hooks-user "$HUSER" || fail_all "fleetd does not start in the namespace"
for n in $T $R; do
	"$FLEETCTL" create $n --backend vm --network nat >/dev/null; ok $? "create $n --backend vm --network nat"
done
t0=$SECONDS
pids=()
for n in $T $R; do "$FLEETCTL" start $n >"$TEST_TMP/start.$n" 2>&1 & pids+=($!); done
i=0
for n in $T $R; do wait "${pids[$i]}"; ok $? "start $n"; i=$((i + 1)); done
diag "two guests reached their control channel in $((SECONDS - t0)) s"

rand() { head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
guest_addr() { ex "$1" 'ip -4 addr show eth0' | sed -n 's/^ *inet \([0-9.]*\)\/.*/\1/p' | head -1; }
has_addr() { [ -n "$(guest_addr "$1")" ]; }
for n in $T $R; do
	SECVAL[$n]="sec-$n-$(rand)"; SECLINE[$n]="ISO_TOKEN=${SECVAL[$n]}"
	printf '%s' "${SECVAL[$n]}" | "$FLEETCTL" secret set $n ISO_TOKEN >/dev/null; ok $? "$n: secret set ISO_TOKEN"
	MEMVAL[$n]="mem-$n-$(rand)"
	printf '%s' "${MEMVAL[$n]}" | "$FLEETCTL" memory $n put iso-note; ok $? "$n: memory put iso-note"
	DISK[$n]=$STATE/vms/$n/disk.qcow2 SEED[$n]=$STATE/vms/$n/seed.img
	WORD[$n]="word-$n-$(rand)"
	ex $n "mkdir -p /home/agent/www && echo ${WORD[$n]} > /home/agent/www/w" >/dev/null; ok $? "$n: a page for its listener"
	wait_for 120 has_addr $n; ok $? "$n gets an address by DHCP"
	ADDR[$n]=$(guest_addr $n) GW[$n]=192.168.223.1
done
ISO_NA[mem-read]="no path in a guest names the other's files: they are on its own disk, not attached here (mem-scan searches what this guest has)"
ISO_NA[mem-write]=${ISO_NA[mem-read]}
ISO_NA[home-list]=${ISO_NA[mem-read]}
ISO_NA[sec-files]="the other's secret files are on a tmpfs in its own guest's kernel (agentd run-as --files-stdin): no path in this guest leads there"
ISO_NA[snapshot]="a VM's snapshots are internal to its disk.qcow2 (row disk)"
ISO_NA[cg-memory-max]="a guest's cgroups are its own kernel's; its limits are the VM's size (vCPUs, RAM), kept by QEMU"
ISO_NA[cg-parent]=${ISO_NA[cg-memory-max]}
ISO_NA[cg-other]=${ISO_NA[cg-memory-max]}
ISO_OFF[proc-signal]="a pid of the other's guest names nothing in this guest's kernel (sec-pid shows it is not the other's process)"

# ---- what the victims hold during the battery ----
for n in $T $R; do
	"$FLEETCTL" exec $n --no-stdin --timeout 900 -- busybox httpd -f -p $ISO_PORT -h /home/agent/www </dev/null >/dev/null 2>&1 &
	iso_bg
	RUNMARK[$n]="iso-run-$n-$(rand)"
	"$FLEETCTL" set $n --command "echo ${RUNMARK[$n]}; head -c 4096 /dev/zero | tr '\\0' x; echo; exec sleep 900" >/dev/null
	id=$("$FLEETCTL" --json trigger $n | jq -r .id)
	RUNLOG[$n]=$STATE/runs/$id.log
done
holder() {	# holder NAME: the guest pid of its run's sleep, once its log has the marker
	grep -qF "${RUNMARK[$1]}" "${RUNLOG[$1]}" 2>/dev/null || return 1
	ex $1 'for d in /proc/[0-9]*; do [ "$(tr "\0" " " < $d/cmdline)" = "sleep 900 " ] && echo ${d#/proc/}; done' | head -1 | grep .
}
for n in $T $R; do
	wait_for 300 holder $n
	HOLDPID[$n]=$(holder $n)
	ex $n "tr '\\0' '\\n' < /proc/${HOLDPID[$n]:-none}/environ" | grep -qxF "${SECLINE[$n]}"
	ok $? "$n's run holds its secret in its environment (guest pid ${HOLDPID[$n]:-none}; seen by guest root)"
	grep -qF "${RUNMARK[$n]}" "${RUNLOG[$n]}" 2>/dev/null; ok $? "$n's run log has its marker (${RUNLOG[$n]})"
done

# ---- controls the battery cannot make from inside: the targets answer the host side ----
ns_tcp() { local i; for ((i = 0; i < 100; i++)); do [ -n "$(vmns_exec busybox nc -w 3 "$@" </dev/null 2>/dev/null)" ] && return 0; sleep 0.1; done; return 1; }
ns_tcp 169.254.169.254 80; ok $? "the host side reaches the planted metadata server (a route and a server exist)"
ns_tcp 198.51.100.2 8080; ok $? "the host side reaches the outside server"
for n in $T $R; do
	for ((i = 0; i < 100; i++)); do
		printf 'GET /w HTTP/1.0\r\n\r\n' | vmns_exec busybox nc -w 3 ${ADDR[$n]} $ISO_PORT 2>/dev/null | grep -qF "${WORD[$n]}" && break; sleep 0.2
	done
done

# ---- the battery, both ways ----
iso_battery $T $R "t>r"
iso_battery $R $T "r>t"
iso_matrix vm

"$FLEETCTL" --json runs $T | jq -e '[.. | objects | select(.state? == "running")] | length > 0' >/dev/null &&
	"$FLEETCTL" --json runs $R | jq -e '[.. | objects | select(.state? == "running")] | length > 0' >/dev/null
ok $? "both victims' runs survived the battery"

# ---- canaries: without fleet's nftables table, the same attempts must say ALLOWED ----
vmns_exec nft delete table inet fleet; ok $? "open a hole: delete fleet's nftables table"
iso_canary $T $R "canary" "fleet's table deleted" net-host-gw net-metadata
for n in $T $R; do "$FLEETCTL" rm --force $n >/dev/null; ok $? "rm --force $n"; done
done_testing
