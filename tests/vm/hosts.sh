#!/bin/bash
# More hosts (#15), first slice: a second private libvirtd (its own mount and
# network namespace, tests/lib/vmns.sh) added as a host over qemu+unix, its
# socket reached through /proc/PID/root (no traffic leaves the namespaces
# this test made). host ls shows it reachable with libvirt and QEMU versions,
# KVM or TCG and free memory; drain and undrain; placement (--host and
# automatic, and why none fits); rm refused while an agent is placed there,
# accepted when empty; a bad URI refused with libvirt's error; its libvirtd
# killed -> unreachable (with the error), restarted -> reachable again, by
# fleetd's own reconnect. No guest boots: a VM agent on a remote host is
# refused at create for now (the storage-volume image path is not built),
# so the placed agent of the rm check is a local agent's record moved to
# the host while fleetd is stopped, as that path will record one.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq sqlite3 curl

# --- the second libvirtd: vmns.sh's variables swapped around a second vmns_start ----------------
NS1=("$VMNS_PID" "$VMNS_DIR" "$VMNS_VARLIB" "$VMNS_ID")
VMNS_PID='' VMNS_DIR='' VMNS_VARLIB='' VMNS_ID=''
vmns_start; rc=$?	# on failure it has stopped what it started
H2=("$VMNS_PID" "$VMNS_DIR" "$VMNS_VARLIB" "$VMNS_ID")
VMNS_PID=${NS1[0]} VMNS_DIR=${NS1[1]} VMNS_VARLIB=${NS1[2]} VMNS_ID=${NS1[3]}	# the first one's cleanup is on_exit's
[ "$rc" = 0 ] || fail_all "cannot start a second private libvirtd"
h2_stop() {	# vmns_stop of the second namespace, the first one's variables kept
	local keep=("$VMNS_PID" "$VMNS_DIR" "$VMNS_VARLIB" "$VMNS_ID")
	VMNS_PID=${H2[0]} VMNS_DIR=${H2[1]} VMNS_VARLIB=${H2[2]} VMNS_ID=${H2[3]}
	vmns_stop
	VMNS_PID=${keep[0]} VMNS_DIR=${keep[1]} VMNS_VARLIB=${keep[2]} VMNS_ID=${keep[3]}
}
on_exit h2_stop
H2_SOCK=/proc/${H2[0]}/root/run/libvirt/libvirt-sock
H2_URI="qemu+unix:///system?socket=$H2_SOCK"
h2_libvirtd_pid() { cat "/proc/${H2[0]}/root/run/libvirtd.pid" 2>/dev/null; }

# api, its reply on one line (the status follows the body after a newline).
apiq() { api "$@" | tr -d "\n"; }
hosts_json() { "$FLEETCTL" --json host ls; }
host_field() { hosts_json | jq -r --arg h "$1" ".[] | select(.name == \$h) | $2"; }

fleetd_ns_start; ok $? "fleetd starts inside the first namespace"

# --- local: a host like the others, there without host add ----------------------------------------
is "$(hosts_json | jq -r '.[].name' | tr '\n' ' ')" "local " "host ls lists 'local' only"
is "$(host_field local .reachable)" true "local is reachable"
is "$(host_field local .uri)" "qemu:///system" "with the configured libvirt_uri"
like "$(host_field local .libvirt_version)" '^[0-9]+\.[0-9]+\.[0-9]+$' "its libvirt version (virConnectGetLibVersion)"
like "$(host_field local .qemu_version)" '^[0-9]+\.[0-9]+\.[0-9]+$' "its QEMU version (virConnectGetVersion)"
like "$(host_field local .virt)" '^(kvm|tcg)$' "KVM or TCG (domain capabilities): $(host_field local .virt)"
like "$(host_field local .free_memory_mib)" '^[1-9][0-9]*$' "its free memory: $(host_field local .free_memory_mib) MiB"
# Free memory counts the page cache the kernel gives back (MemFree alone is
# near zero on a host that has read a lot): with 512 MiB or more cached, the
# figure must be above MemFree by at least half the cache.
meminfo_mib() { awk -v k="$1:" '$1 == k { print int($2 / 1024) }' /proc/meminfo; }
make_cache=$(mktemp -p /var/tmp fleet-hosts-cache.XXXXXX)
head -c $((600 << 20)) /dev/zero > "$make_cache" && cat "$make_cache" > /dev/null	# 600 MiB in the page cache
memfree=$(meminfo_mib MemFree) cached=$(meminfo_mib Cached) reported=$(host_field local .free_memory_mib)
rm -f "$make_cache"
if [ "$cached" -ge 512 ]; then
	ok $([ "$reported" -ge $((memfree + cached / 2)) ] && echo 0 || echo 1) \
		"free memory counts the page cache ($reported MiB; MemFree $memfree, Cached $cached)"
else
	diag "free memory against the page cache not checked: only $cached MiB cached"
fi

# --- host add: names and URIs checked ------------------------------------------------------------
out=$("$FLEETCTL" host add bad "qemu+unix:///system?socket=$TEST_TMP/no-such.sock" 2>&1); rc=$?
isnt_rc() { [ "$1" != 0 ]; }
check "a URI that does not answer is refused" -- isnt_rc "$rc"
like "$out" "no-such.sock" "with libvirt's error naming the socket: $out"
resp=$(apiq POST /v1/hosts "{\"name\":\"bad\",\"uri\":\"qemu+unix:///system?socket=$TEST_TMP/no-such.sock\"}")
like "$resp" '"unreachable".* 400$' "the API says 400 unreachable"
is "$(hosts_json | jq -r '.[].name' | tr '\n' ' ')" "local " "and the host is not recorded"
"$FLEETCTL" host add Bad_Name "$H2_URI" >/dev/null 2>&1; is $? 2 "fleetctl refuses a host name an agent could not have (usage, exit 2)"
like "$(apiq POST /v1/hosts "{\"name\":\"Bad_Name\",\"uri\":\"$H2_URI\"}")" '"invalid_name".* 400$' "so does the API (400 invalid_name)"
like "$(apiq POST /v1/hosts '{"name":"sp","uri":"qemu:///system foo"}')" '"invalid".* 400$' "a URI with a space: 400"
like "$(apiq POST /v1/hosts "{\"name\":\"h2\",\"uri\":\"$H2_URI\",\"max_agents\":-1}")" ' 400$' "a negative max_agents: 400"

out=$("$FLEETCTL" host add h2 "$H2_URI" --max-agents 3 --reserve-memory 64); ok $? "host add h2 over the second libvirtd's socket"
like "$out" "host 'h2' added \(libvirt [0-9.]+, QEMU [0-9.]+, (kvm|tcg)\)" "it says what it found: $out"
like "$(apiq POST /v1/hosts "{\"name\":\"h2\",\"uri\":\"$H2_URI\"}")" '"exists".* 409$' "a second h2: 409 exists"
like "$(apiq POST /v1/hosts "{\"name\":\"local\",\"uri\":\"$H2_URI\"}")" '"exists".* 409$' "and so is 'local'"
is "$(host_field h2 .reachable)" true "h2 is reachable"
is "$(host_field h2 .uri)" "$H2_URI" "with its URI"
like "$(host_field h2 .libvirt_version)" '^[0-9]+\.[0-9]+\.[0-9]+$' "its libvirt version"
like "$(host_field h2 .qemu_version)" '^[0-9]+\.[0-9]+\.[0-9]+$' "its QEMU version"
like "$(host_field h2 .free_memory_mib)" '^[1-9][0-9]*$' "its free memory"
is "$(host_field h2 '"\(.max_agents) \(.reserve_memory_mib) \(.agents) \(.draining)"')" "3 64 0 false" \
	"max 3 agents, 64 MiB reserved, none placed, not draining"
is "$("$FLEETCTL" host ls --json | jq -c '[.[] | {name, uri, max_agents}]')" \
	"$(hosts_json | jq -c '[.[] | {name, uri, max_agents}]')" "host ls --json is --json host ls"
like "$("$FLEETCTL" host ls)" "h2 +ready +[0-9.]+ +[0-9.]+ +(kvm|tcg) +[0-9]+MiB +0/3 +qemu\+unix" "the table shows h2 ready, 0/3 agents"

# --- placement -----------------------------------------------------------------------------------
out=$("$FLEETCTL" create far --host h2 --health-interval 0 2>&1); rc=$?
check "a VM agent placed on h2 is refused for now" -- isnt_rc "$rc"
like "$out" "placed on host h2.*remote image path.*not built yet" "saying the remote image path is not built yet: $out"
"$FLEETCTL" show far >/dev/null 2>&1; isnt_rc $?; ok $? "and nothing of it is kept"
like "$(apiq POST /v1/agents '{"name":"nowhere","host":"nowhere"}')" "no host 'nowhere'.* 404$" "--host of no such host: 404"
like "$(apiq POST /v1/agents '{"name":"usr","backend":"user","host":"h2"}')" "user agents run on fleetd's own host.* 400$" \
	"--host for a user agent: 400"
"$FLEETCTL" host drain h2 >/dev/null; ok $? "host drain h2"
is "$(host_field h2 .draining)" true "h2 drains"
like "$("$FLEETCTL" host ls)" "h2 +draining" "the table says so"
like "$(apiq POST /v1/agents '{"name":"far","host":"h2"}')" "cannot place a 256 MiB agent on h2: draining.* 409$" \
	"--host of a draining host: 409 with the reason"
out=$("$FLEETCTL" create la --health-interval 0 --restart never); ok $? "with h2 draining, an agent is placed automatically"
like "$out" "host local" "on local: $out"
is "$("$FLEETCTL" --json show la | jq -r .host)" local "show says its host"
like "$("$FLEETCTL" list)" "la +vm +stopped .* local " "list shows its host"
is "$("$FLEETCTL" --json list | jq -r '.[] | select(.name == "la") | .host')" local "and list --json"
is "$(host_field local .agents)" 1 "host ls counts it on local"
"$FLEETCTL" host drain local >/dev/null; ok $? "drain local too"
resp=$(apiq POST /v1/agents '{"name":"none"}')
like "$resp" "no host can take a 256 MiB agent now: local: draining; h2: draining.* 409$" "none fits: 409, host by host"
"$FLEETCTL" host undrain local >/dev/null; ok $? "host undrain local"
"$FLEETCTL" host drain h2 --undo >/dev/null; ok $? "host drain h2 --undo"
is "$(hosts_json | jq -r '[.[].draining] | map(tostring) | join(" ")')" "false false" "neither drains"
like "$(apiq PATCH /v1/hosts/nowhere '{"draining":true}')" ' 404$' "drain of no such host: 404"

# --- rm: refused while an agent is placed there ---------------------------------------------------
stop_fleetd; ok $? "fleetd stops"
sqlite3 "$STATE/fleet.db" "UPDATE agents SET host = 'h2' WHERE name = 'la'"; ok $? "la's record placed on h2 (as a remote create will record it)"
fleetd_ns_start; ok $? "fleetd starts again"
is "$(host_field h2 .reachable)" true "h2 is still known after the restart, and reachable (connected when first needed)"
is "$(host_field h2 .agents)" 1 "with la counted there"
out=$("$FLEETCTL" host rm h2 2>&1); rc=$?
check "host rm h2 is refused while la is placed there" -- isnt_rc "$rc"
like "$out" "host 'h2' still has 1 agent placed on it \(la\)" "naming the agent: $out"
like "$(apiq DELETE /v1/hosts/h2)" '"in_use".* 409$' "the API says 409 in_use"
like "$(apiq DELETE /v1/hosts/local)" "fleetd's own libvirt_uri.* 409$" "'local' is never removed: 409"
stop_fleetd; ok $? "fleetd stops"
sqlite3 "$STATE/fleet.db" "UPDATE agents SET host = 'local' WHERE name = 'la'"; ok $? "la's record back on local"
fleetd_ns_start; ok $? "fleetd starts again"

# --- h2's libvirtd killed, then back: fleetd reconnects by itself ----------------------------------
pid=$(h2_libvirtd_pid)
like "$pid" '^[0-9]+$' "h2's libvirtd runs (pid $pid)"
is "$(host_field h2 .reachable)" true "h2 is reachable before"
kill -KILL "$pid"; ok $? "h2's libvirtd is killed (SIGKILL)"
h2_down() { [ "$(host_field h2 .reachable)" = false ]; }
wait_for 30 h2_down; ok $? "host ls says h2 is unreachable"
like "$(host_field h2 .error)" "." "with why: $(host_field h2 .error)"
like "$("$FLEETCTL" host ls)" "h2 +unreachable" "the table says unreachable"
is "$(host_field local .reachable)" true "local is unaffected"
like "$("$FLEETCTL" doctor 2>&1)" "WARN +host-h2 +host h2 \(qemu\+unix[^)]*\) unreachable: .*0 agent" \
	"doctor warns that h2 is unreachable (no agent there: a warning)"
like "$(apiq POST /v1/agents '{"name":"far","host":"h2"}')" "cannot place a 256 MiB agent on h2: unreachable.* 409$" \
	"--host of an unreachable host: 409"
nsenter -t "${H2[0]}" -m -n -- libvirtd -d; ok $? "h2's libvirtd is started again"
h2_up() { [ "$(host_field h2 .reachable)" = true ]; }
wait_for 60 h2_up; ok $? "host ls says h2 is reachable again (fleetd reconnected with backoff)"
like "$(host_field h2 .libvirt_version)" '^[0-9]+\.[0-9]+\.[0-9]+$' "with its versions"
like "$("$FLEETCTL" doctor 2>&1)" "OK +host-h2 +host h2 reachable at qemu\+unix" "and doctor says it is reachable"

# --- rm: accepted when empty -----------------------------------------------------------------------
out=$("$FLEETCTL" host rm h2); ok $? "host rm h2, now empty"
is "$out" "host 'h2' removed" "it says so"
is "$(hosts_json | jq -r '.[].name' | tr '\n' ' ')" "local " "host ls lists local only again"
like "$(apiq DELETE /v1/hosts/h2)" ' 404$' "a second rm: 404"
grep -q "host h2: connection closed" "$STATE/fleetd.log"; ok $? "fleetd closed h2's connection"
like "$(sqlite3 "$STATE/fleet.db" "SELECT group_concat(action, ' ') FROM audit WHERE action LIKE 'host.%'")" \
	"host.add.*host.update.*host.remove" "host add, drain and rm are audited"

"$FLEETCTL" rm la >/dev/null; ok $? "la is removed"
done_testing
