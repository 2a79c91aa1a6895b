#!/bin/bash
# More hosts (#15): a second private libvirtd (its own mount and network
# namespace, tests/lib/host2.sh) added as a host over qemu+tcp, on a veth
# pair that joins its namespace to the first one, where fleetd runs (no
# traffic leaves the namespaces this test made; H2_TRANSPORT=unix reaches its
# socket through /proc/PID/root instead). host ls shows it reachable with
# libvirt and QEMU versions, KVM or TCG and free memory; placement (--host
# and automatic, and why none fits); rm refused while an agent is placed
# there, accepted when empty; a bad URI refused with libvirt's error; its
# libvirtd killed -> unreachable (with the error), restarted -> reachable
# again, by fleetd's own reconnect. A VM agent created on h2 (its uploads on a
# worker: with the link slowed by tc, other requests are answered meanwhile;
# fleetd killed -9 mid-upload, the create undone at its next start):
# its disks are volumes in h2's fleet pool (the image uploaded once, a volume
# cut short replaced, the overlay backed by the base volume, its memory disk),
# started there (one TCG guest), exec through its channel streamed over h2's
# connection (a run with a secret, ~/memory on its vdc, memory, 3 MB of
# output), a memory quota grown there, snapshot and restore there, an
# automatic rollback (the system deleted), fleetd restarted and h2's libvirtd
# killed under the running guest (exec after each; an exec in flight when
# h2's libvirtd died fails: its stream died with it), h2 drained with it there
# (new agents go to local, it keeps working), stop, rm deleting its volumes.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq sqlite3 curl

# --- the second libvirtd (tests/lib/host2.sh) ---------------------------------------------------
. "$FLEET_SRCDIR/tests/lib/host2.sh"
host2_start

# api, its reply on one line (the status follows the body after a newline).
apiq() { api "$@" | tr -d "\n"; }
hosts_json() { "$FLEETCTL" --json host ls; }
host_field() { hosts_json | jq -r --arg h "$1" ".[] | select(.name == \$h) | $2"; }
h2_down() { [ "$(host_field h2 .reachable)" = false ]; }
h2_up() { [ "$(host_field h2 .reachable)" = true ]; }
H2_SCHEME="qemu\\+$H2_TRANSPORT"	# for like's patterns

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
check "a URI that does not answer is refused" -- isnt_rc "$rc"
like "$out" "no-such.sock" "with libvirt's error naming the socket: $out"
resp=$(apiq POST /v1/hosts "{\"name\":\"bad\",\"uri\":\"qemu+unix:///system?socket=$TEST_TMP/no-such.sock\"}")
like "$resp" '"unreachable".* 400$' "the API says 400 unreachable"
is "$(hosts_json | jq -r '.[].name' | tr '\n' ' ')" "local " "and the host is not recorded"
"$FLEETCTL" host add Bad_Name "$H2_URI" >/dev/null 2>&1; is $? 2 "fleetctl refuses a host name an agent could not have (usage, exit 2)"
like "$(apiq POST /v1/hosts "{\"name\":\"Bad_Name\",\"uri\":\"$H2_URI\"}")" '"invalid_name".* 400$' "so does the API (400 invalid_name)"
like "$(apiq POST /v1/hosts '{"name":"sp","uri":"qemu:///system foo"}')" '"invalid".* 400$' "a URI with a space: 400"
like "$(apiq POST /v1/hosts "{\"name\":\"h2\",\"uri\":\"$H2_URI\",\"max_agents\":-1}")" ' 400$' "a negative max_agents: 400"

out=$("$FLEETCTL" host add h2 "$H2_URI" --max-agents 3 --reserve-memory 64); ok $? "host add h2 at $H2_URI"
if [ "$H2_TRANSPORT" = tcp ]; then
	# What crosses between the namespaces is libvirt's remote protocol on TCP:
	# h2's libvirtd listens on its veth address only, and fleetd's connection
	# to it is a TCP one from the first namespace's end of the pair.
	is "$(nsenter -t "${H2[0]}" -n -- ss -tlnH | awk '$4 ~ /:16509$/ { print $4 }')" \
		"$H2_ADDR:16509" "h2's libvirtd listens on TCP on $H2_ADDR:16509 only"
	like "$(vmns_exec ss -tnpH state established dst "$H2_ADDR")" \
		"^0 +0 +$H2_NS1_ADDR:[0-9]+ +$H2_ADDR:16509 +users:\(\(\"fleetd\",pid=$FLEETD_PID," \
		"fleetd's connection to h2 is TCP from $H2_NS1_ADDR to $H2_ADDR:16509 (ss -tnp in fleetd's namespace)"
fi
like "$out" "host 'h2' added \(libvirt [0-9.]+, QEMU [0-9.]+, tcg\)" "it says what it found (TCG: host2.sh hides /dev/kvm from h2): $out"
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
like "$("$FLEETCTL" host ls)" "h2 +ready +[0-9.]+ +[0-9.]+ +(kvm|tcg) +[0-9]+MiB +0/3 +$H2_SCHEME" "the table shows h2 ready, 0/3 agents"

# --- a VM agent on h2: its disks are volumes in h2's fleet pool, through libvirt only ----------------
H2_POOL=${H2[2]}/fleet	# host_pool_dir's default, /var/lib/libvirt/fleet, as seen from outside h2's namespace
ID=$(cd "$STATE/images" && sha256sum vmlinuz initramfs.img base.qcow2 | sha256sum | cut -d' ' -f1)
vols() { virsh_h2 vol-list fleet 2>/dev/null | awk '{ print $1 }' | sort | tr '\n' ' '; }
uploads() { grep -c "uploading image sha256:${ID:0:12} to qemu+$H2_TRANSPORT" "$STATE/fleetd.log"; }
# An upload a kill cut short: the pool there already (fleet uses it as it is), a base volume of
# the right name with other bytes in it, and no marker. It must never be booted from.
virsh_h2 pool-define-as fleet dir --target /var/lib/libvirt/fleet >/dev/null &&
	virsh_h2 pool-build fleet >/dev/null && virsh_h2 pool-start fleet >/dev/null
ok $? "h2 has a fleet pool already (defined by hand)"
virsh_h2 vol-create-as fleet "image-$ID.base.qcow2" 1M --format raw >/dev/null; ok $? "and a base volume cut short, with no marker"
# The create's uploads (the image, 31 MB; its seed and memory disk) run on a worker, off
# fleetd's loop: while they go, other requests are answered. Over tcp the veth toward h2 is
# slowed (tc tbf, inside the test's own namespace) so the upload lasts long enough to ask.
slowed=false
if [ "$H2_TRANSPORT" = tcp ]; then
	vmns_exec tc qdisc add dev fleet-h1 root tbf rate 20mbit burst 64kb latency 1s
	ok $? "the link to h2 slowed to 20 Mbit/s (tc tbf on fleet-h1)" && slowed=true
fi
"$FLEETCTL" create far --host h2 --health-interval 0 --restart never > "$TEST_TMP/create-far.out" 2>&1 &
create_pid=$!
uploading() { [ "$(uploads)" -ge 1 ]; }
wait_for 120 uploading; ok $? "the create of far on h2 is uploading the image"
if $slowed; then
	is "$("$FLEETCTL" --json list | jq -r '.[] | select(.name == "far") | .state')" provisioning \
		"meanwhile fleetctl list is answered: far is provisioning"
	is "$("$FLEETCTL" --json show far | jq -r '"\(.state) \(.host)"')" "provisioning h2" "and show far"
	like "$(apiq POST /v1/agents/far/start)" "still being provisioned.* 409$" "a start of far meanwhile: 409"
	like "$(apiq DELETE /v1/agents/far)" "its create is under way.* 409$" "an rm of far meanwhile: 409 busy"
	like "$("$FLEETCTL" host ls)" "h2 +ready" "host ls is answered too (h2 ready)"
	grep -q "image sha256:${ID:0:12} is on" "$STATE/fleetd.log"; isnt_rc $?
	ok $? "all while the image was still on its way (fleetd's log)"
	# fleetd killed with the upload under way: the create was never acknowledged, and the
	# next start removes what it made (here and there); the image's volumes without
	# their marker are sent again whole by the next create.
	stop_fleetd KILL; ok $? "kill -9 of fleetd while far's image is on its way to h2"
	wait "$create_pid"; isnt_rc $?; ok $? "the create of far fails (its answer never came)"
	vmns_exec tc qdisc del dev fleet-h1 root; ok $? "the link to h2 at full speed again"
	fleetd_ns_start; ok $? "fleetd starts again"
	is "$("$FLEETCTL" --json list | jq '[.[] | select(.name == "far")] | length')" 0 \
		"the unacknowledged create of far is undone at the start (no record)"
	[ ! -e "$STATE/vms/far" ] && [ ! -e "$STATE/keys/far" ]; ok $? "nor its keys and seed here"
	[[ "$(vols)" != *agent-far* && "$(vols)" != *"image-$ID.complete"* ]]
	ok $? "no volume of far on h2, and no marker for the image cut short: $(vols)"
	"$FLEETCTL" create far --host h2 --health-interval 0 --restart never > "$TEST_TMP/create-far.out" 2>&1; ok $? "far is created on h2 again"
	# Stopped (SIGTERM) with a create's uploads under way (the seed and memory disk of far2,
	# the link at 1 Mbit/s): fleetd does not wait for its worker, frees nothing the worker
	# still uses (it once freed the backend and the host's connection under it), and exits;
	# the next start undoes the unacknowledged create, as after a kill.
	vmns_exec tc qdisc add dev fleet-h1 root tbf rate 1mbit burst 32kb latency 2s
	ok $? "the link to h2 slowed to 1 Mbit/s"
	"$FLEETCTL" create far2 --host h2 --health-interval 0 --restart never > "$TEST_TMP/create-far2.out" 2>&1 &
	create_pid=$!
	far2_provisioning() { [ "$("$FLEETCTL" --json show far2 | jq -r .state)" = provisioning ]; }
	wait_for 60 far2_provisioning; ok $? "far2's disks are on their way to h2"
	stop_fleetd TERM; ok $? "fleetd stops on SIGTERM meanwhile, without waiting for the upload"
	like "$(cat "$STATE/fleetd.log")" "1 job\(s\) still on worker threads .*not waiting" \
		"and says it leaves a job on a worker thread"
	! grep -qE "AddressSanitizer|Segmentation|double free|corrupted" "$STATE/fleetd.log"; ok $? "nothing freed under the worker"
	wait "$create_pid"; isnt_rc $?; ok $? "the create of far2 fails"
	like "$(cat "$TEST_TMP/create-far2.out")" "fleetd is stopping; this call was not finished" \
		"answered as fleetd stopped: $(cat "$TEST_TMP/create-far2.out")"
	vmns_exec tc qdisc del dev fleet-h1 root; ok $? "the link to h2 at full speed again"
	fleetd_ns_start; ok $? "fleetd starts again"
	is "$("$FLEETCTL" --json list | jq '[.[] | select(.name == "far2")] | length')" 0 \
		"the create of far2 cut short by the stop is undone at the start"
	wait_for 30 eval '[[ "$(vols)" != *agent-far2* ]]'; ok $? "no volume of far2 on h2: $(vols)"
	sent=2
else
	diag "requests during the upload not checked: H2_TRANSPORT=$H2_TRANSPORT has no link to slow"
	wait "$create_pid"; ok $? "the create of far on h2 is answered once its disks are there"
	sent=1
fi
out=$(cat "$TEST_TMP/create-far.out")
like "$out" "host h2" "placed on h2: $out"
is "$("$FLEETCTL" --json show far | jq -r .state)" stopped "far is stopped (made)"
is "$(uploads)" "$sent" "the image was uploaded to h2 once (whole; $sent upload(s) begun)"
is "$(vols)" "agent-far.disk.qcow2 agent-far.memory.qcow2 agent-far.seed.img image-$ID.base.qcow2 image-$ID.complete image-$ID.initramfs.img image-$ID.vmlinuz " \
	"h2's fleet pool holds far's overlay, memory disk and seed, and the image with its marker"
[ ! -e "$STATE/vms/far/memory.qcow2" ]; ok $? "its memory disk is only there (the copy made here was uploaded, then removed)"
is "$(qemu-img info --output=json "$H2_POOL/agent-far.memory.qcow2" | jq -r '"\(.format) \(."virtual-size")"')" \
	"qcow2 $(( (64 + 64 / 25 + 8) << 20 ))" "far's memory disk volume: qcow2, sized for its quota (64 MiB)"
cmp -s "$H2_POOL/image-$ID.base.qcow2" "$STATE/images/base.qcow2"; ok $? "the base volume cut short was replaced by the whole image"
cmp -s "$H2_POOL/image-$ID.vmlinuz" "$STATE/images/vmlinuz"; ok $? "the kernel volume is the image's kernel"
is "$(qemu-img info --output=json "$H2_POOL/agent-far.disk.qcow2" | jq -r '."backing-filename"')" \
	"/var/lib/libvirt/fleet/image-$ID.base.qcow2" "far's overlay is backed by the base volume (a path on h2)"
is "$(qemu-img info --output=json "$H2_POOL/agent-far.disk.qcow2" | jq -r '."virtual-size"')" $((2 << 30)) \
	"of the agent's disk size"
xml=$(virsh_h2 dumpxml fleet-far)
like "$xml" "<source file='/var/lib/libvirt/fleet/agent-far.disk.qcow2'" "h2's domain fleet-far names the overlay volume"
like "$xml" "<kernel>/var/lib/libvirt/fleet/image-$ID.vmlinuz</kernel>" "and boots the kernel volume"
is "$(virsh_h2 domblklist fleet-far | awk '$1 == "vdc" { print $2 }')" "/var/lib/libvirt/fleet/agent-far.memory.qcow2" \
	"and gives it its memory disk volume as vdc"
base_mtime=$(stat -c %Y "$H2_POOL/image-$ID.base.qcow2")
"$FLEETCTL" start far >/dev/null; ok $? "fleetctl start far (on h2)"
is "$(virsh_h2 domstate fleet-far)" running "h2's libvirtd runs fleet-far (a TCG guest)"
virsh -q -c qemu:///system list --name 2>/dev/null | grep -qx fleet-far; isnt_rc $?; ok $? "and fleetd's own libvirtd does not"
is "$("$FLEETCTL" --json show far | jq -r '"\(.state) \(.host)"')" "running h2" "show: running on h2"
# The control channel: the guest's virtio-serial port streamed over h2's libvirt connection
# (virDomainOpenChannel), SSH with the pinned host key inside it.
"$FLEETCTL" exec far -- true; ok $? "exec true on far, through its channel streamed from h2"
is "$("$FLEETCTL" exec far -- cat /etc/hostname)" far "exec reads the guest's own hostname (its seed volume arrived)"
is "$(printf 'over the stream\n' | "$FLEETCTL" exec far -- cat)" "over the stream" "stdin goes through it too"
[ ! -e "$STATE/vms/far/ctl.sock" ]; ok $? "no control socket on fleetd's host: it is on h2"
is "$("$FLEETCTL" exec far -- head -c 3000000 /dev/urandom | wc -c)" 3000000 \
	"3 MB of output arrive whole through the stream's bounded buffers"
# Its memory store is its own disk there, as a local agent's (tests/vm/memory.sh): the guest's
# kernel holds ~/memory to the quota.
is "$("$FLEETCTL" exec far -- sh -c 'grep " /home/agent/memory " /proc/mounts | cut -d" " -f1,3')" "/dev/vdc ext4" \
	"far's ~/memory is its memory disk (vdc, ext4), a file system of its own"
printf 'remember this' | "$FLEETCTL" memory far put note; ok $? "memory put on far (agentd memory through the stream)"
is "$("$FLEETCTL" memory far get note)" "remember this" "memory get reads it back"
# A run (the queue, a secret in its environment, its log) on far, all through the same channel.
printf 'tok-%s' "$$" | "$FLEETCTL" secret set far TOKEN >/dev/null; ok $? "a secret for far"
"$FLEETCTL" set far --command 'echo "ran on $(cat /etc/hostname) ${TOKEN:+with its secret}"' >/dev/null
ok $? "far's command set"
run=$("$FLEETCTL" --json trigger far --wait | jq -r .id)
like "$run" '^[0-9]+$' "trigger far --wait: run $run"
is "$("$FLEETCTL" --json runs far "$run" | jq -r .state)" succeeded "the run succeeded on h2"
is "$("$FLEETCTL" logs far "$run" 2>/dev/null)" "ran on far with its secret" "its log: it ran in far's guest, with its secret"
# Snapshot and restore there: libvirt's internal qcow2 snapshots of the overlay volume on h2.
"$FLEETCTL" exec far -- sh -c 'echo before > /home/agent/mark'; ok $? "a file written in far"
"$FLEETCTL" snapshot far s1 >/dev/null; ok $? "snapshot far s1 (a checkpoint of the running guest on h2)"
virsh_h2 snapshot-list fleet-far --name | grep -qx s1; ok $? "h2's libvirtd holds snapshot s1 of fleet-far"
"$FLEETCTL" exec far -- sh -c 'echo after > /home/agent/mark'; ok $? "the file changed after it"
"$FLEETCTL" restore far s1 >/dev/null; ok $? "restore far s1"
is "$("$FLEETCTL" exec far -- cat /home/agent/mark)" before "exec after the restore (a new stream) reads the file as at s1"
# Automatic rollback there, provoked as tests/vm/rollback.sh does (the system
# deleted): the periodic check fails and fleet restores the newest good
# snapshot, s1, on h2, by itself.
is "$("$FLEETCTL" --json snapshots far | jq -r '.[] | select(.name == "s1") | .good')" true \
	"s1 was taken while far was healthy: marked good"
"$FLEETCTL" set far --health-interval 3 --auto-rollback on >/dev/null; ok $? "far checks its health every 3 s and rolls back by itself"
"$FLEETCTL" exec far -- sh -c 'echo after > /home/agent/mark'; ok $? "the file changed again"
"$FLEETCTL" exec far --root -- sh -c 'rm -rf /usr /bin /sbin' >/dev/null 2>&1
rolled_back() {
	[ "$("$FLEETCTL" --json audit --limit 1000 | jq '[.[] | select(.action == "auto.rollback")] | length')" -ge 1 ] &&
		[ "$("$FLEETCTL" --json show far | jq -r '.state + "/" + .health.status')" = running/healthy ]
}
wait_for 300 rolled_back; ok $? "with /usr /bin /sbin deleted in far, fleet rolls it back by itself, on h2"
like "$("$FLEETCTL" audit --limit 1000)" "auto.rollback +far/s1 +ok" "the audit log records the rollback to s1"
like "$("$FLEETCTL" show far)" "rollback: .*restored 's1' after" "show says what the rollback did"
is "$("$FLEETCTL" exec far -- cat /home/agent/mark)" before "exec works again and the file is as at s1"
"$FLEETCTL" set far --health-interval 0 --auto-rollback off >/dev/null; ok $? "far's checks off again"
# Its console: the serial port, a pty on h2, streamed over h2's connection
# (virDomainOpenConsole) into far's console log on fleetd's host, from the
# first line of the boot (started paused until the stream was there).
console_has() { "$FLEETCTL" console far | grep -q -- "$1"; }
# What the guest prints while no stream is open is lost: say it until it shows.
console_says() { "$FLEETCTL" exec far --root -- sh -c "echo $1 > /dev/ttyS0" && console_has "$1"; }
like "$("$FLEETCTL" console far)" "Linux version" "fleetctl console far: its boot, from the kernel's banner on"
like "$(apiq GET /v1/agents/far/console)" '"data": *"[A-Za-z0-9+/=]+".* 200$' "GET /v1/agents/far/console: 200 with the log"
[ -f "$STATE/vms/far/console.log" ] && [ ! -L "$STATE/vms/far/console.log" ]; ok $? "the log is a file on fleetd's host"
"$FLEETCTL" exec far --root -- sh -c 'echo console-mark-1 > /dev/ttyS0'; ok $? "far writes a line to its serial port"
wait_for 30 console_has console-mark-1; ok $? "fleetctl console far shows it"
stop_fleetd; ok $? "fleetd stops, far still running on h2"
fleetd_ns_start; ok $? "fleetd starts again"
is "$(virsh_h2 domstate fleet-far)" running "far kept running on h2"
is "$("$FLEETCTL" exec far -- cat /etc/hostname)" far "exec after the restart: a new stream (FORCE takes the channel over)"
wait_for 60 console_says console-mark-2; ok $? "its console is streamed again after the restart"
out=$("$FLEETCTL" create far2 --host h2 --health-interval 0 --restart never 2>&1); ok $? "a second agent on h2: $out"
is "$(uploads)" "$sent" "the image is not uploaded again"
is "$(stat -c %Y "$H2_POOL/image-$ID.base.qcow2")" "$base_mtime" "its base volume untouched"
is "$(qemu-img info --output=json "$H2_POOL/agent-far2.disk.qcow2" | jq -r '."backing-filename"')" \
	"/var/lib/libvirt/fleet/image-$ID.base.qcow2" "far2's overlay is backed by the same base"
is "$(host_field h2 .agents)" 2 "host ls counts two agents on h2"
# Drain with agents placed there: new agents go elsewhere, those there keep working.
"$FLEETCTL" host drain h2 >/dev/null; ok $? "host drain h2"
is "$(host_field h2 '"\(.draining) \(.agents)"')" "true 2" "h2 drains, with far and far2 placed there"
like "$("$FLEETCTL" host ls)" "h2 +draining .* 2/3 " "the table says so"
is "$("$FLEETCTL" exec far -- cat /etc/hostname)" far "far keeps working on the draining host"
like "$(apiq POST /v1/agents '{"name":"far3","host":"h2"}')" "cannot place a 256 MiB agent on h2: draining.* 409$" \
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
# h2's libvirtd killed under the running guest: QEMU runs on, fleetd reconnects, and the next
# exec opens a new stream on the new connection. An exec in flight then rode the stream, which
# dies with that libvirtd: it fails with an error (docs/multi-host.md: why local guests keep
# QEMU's socket, whose sessions outlive a libvirtd restart).
"$FLEETCTL" exec far -- sh -c 'touch /tmp/in-flight; sleep 60; echo too-late' >"$TEST_TMP/in-flight.out" 2>&1 &
INFLIGHT=$!
wait_for 120 "$FLEETCTL" exec far -- test -e /tmp/in-flight; ok $? "an exec is in flight on far"
kill -KILL "$(h2_libvirtd_pid)"; ok $? "h2's libvirtd is killed while far runs there"
wait_for 30 h2_down; ok $? "fleetd sees h2 unreachable"
like "$("$FLEETCTL" show far)" "host: +h2 \(unreachable: [^)]+; its state is the last known\)" \
	"show says far's host is unreachable, and why"
is "$("$FLEETCTL" --json show far | jq -r '"\(.state) \(.host_unreachable != null)"')" "running true" \
	"far is still running as last known (not stopped, not removed), host_unreachable set"
is "$("$FLEETCTL" list | awk '$1 == "far" { print $3, $7 }')" "unreachable h2" "list shows far unreachable on h2"
is "$("$FLEETCTL" --json list | jq -r '.[] | select(.name == "far") | "\(.state) \(.host_unreachable != null)"')" \
	"running true" "list --json: far's last known state and host_unreachable"
h2_libvirtd_restart; ok $? "h2's libvirtd is started again"
wait_for 60 h2_up; ok $? "fleetd reconnects to h2"
wait "$INFLIGHT"; isnt_rc $?; ok $? "the exec in flight when h2's libvirtd died failed: $(tr '\n' ' ' < "$TEST_TMP/in-flight.out")"
grep -q too-late "$TEST_TMP/in-flight.out"; isnt_rc $?; ok $? "and never finished its command's output"
is "$("$FLEETCTL" --json show far | jq -r '.host_unreachable // "none"')" none "show: h2 reachable again"
is "$("$FLEETCTL" list | awk '$1 == "far" { print $3 }')" running "list: far running again"
is "$(virsh_h2 domstate fleet-far)" running "far ran on through it"
is "$("$FLEETCTL" exec far -- cat /home/agent/mark)" before "exec on far again, over a stream on the new connection"
wait_for 60 console_says console-mark-3; ok $? "and its console, over the new connection"
# Its memory quota grows there as here: refused while it runs, then its volume grows on h2
# (libvirt's qemu-img resize there) and the guest's file system with it at the next boot.
out=$("$FLEETCTL" set far --memory-quota 96 2>&1); isnt_rc $?; ok $? "a memory quota change of far while it runs is refused"
like "$out" "stop the agent first" "saying to stop it first: $out"
"$FLEETCTL" stop far >/dev/null; ok $? "fleetctl stop far"
is "$(virsh_h2 domstate fleet-far)" "shut off" "h2's libvirtd shut fleet-far off"
"$FLEETCTL" set far --memory-quota 96 >/dev/null; ok $? "set --memory-quota 96 on far, stopped on h2"
is "$("$FLEETCTL" --json show far | jq -r .memory.quota_mib)" 96 "its quota is 96 MiB"
is "$(qemu-img info --output=json -U "$H2_POOL/agent-far.memory.qcow2" | jq -r '."virtual-size"')" \
	$(( (96 + 96 / 25 + 8) << 20 )) "its memory disk volume on h2 grew to the size that holds 96 MiB"
like "$("$FLEETCTL" set far --memory-quota 32 2>&1)" "cannot shrink" "a shrink is refused, as for a local agent"
"$FLEETCTL" start far >/dev/null; ok $? "far starts again on h2"
read -r fs_blocks fs_bsize < <("$FLEETCTL" exec far -- stat -f -c '%b %S' /home/agent/memory)
fs_bytes=$(( ${fs_blocks:-0} * ${fs_bsize:-0} ))
ok $([ "$fs_bytes" -ge $((96 << 20)) ] && echo 0 || echo 1) \
	"its ~/memory file system grew with it: $(( fs_bytes >> 20 )) MiB"
is "$("$FLEETCTL" memory far get note)" "remember this" "and the key it held is still there"
"$FLEETCTL" stop far >/dev/null; ok $? "fleetctl stop far again"
"$FLEETCTL" rm far >/dev/null; ok $? "rm far"
virsh_h2 dominfo fleet-far >/dev/null 2>&1; isnt_rc $?; ok $? "fleet-far is gone from h2's libvirtd"
"$FLEETCTL" rm far2 >/dev/null; ok $? "rm far2"
is "$(vols)" "image-$ID.base.qcow2 image-$ID.complete image-$ID.initramfs.img image-$ID.vmlinuz " \
	"their volumes are deleted from h2's pool; the image's stay"
[ ! -e "$STATE/vms/far" ] && [ ! -e "$STATE/keys/far" ]; ok $? "and far's files on fleetd's host"

# --- placement -----------------------------------------------------------------------------------
like "$(apiq POST /v1/agents '{"name":"nowhere","host":"nowhere"}')" "no host 'nowhere'.* 404$" "--host of no such host: 404"
like "$(apiq POST /v1/agents '{"name":"usr","backend":"user","host":"h2"}')" "user agents run on fleetd's own host.* 400$" \
	"--host for a user agent: 400"

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
wait_for 30 h2_down; ok $? "host ls says h2 is unreachable"
like "$(host_field h2 .error)" "." "with why: $(host_field h2 .error)"
like "$("$FLEETCTL" host ls)" "h2 +unreachable" "the table says unreachable"
is "$(host_field local .reachable)" true "local is unaffected"
like "$("$FLEETCTL" doctor 2>&1)" "WARN +host-h2 +host h2 \($H2_SCHEME[^)]*\) unreachable: .*0 agent" \
	"doctor warns that h2 is unreachable (no agent there: a warning)"
like "$(apiq POST /v1/agents '{"name":"far","host":"h2"}')" "cannot place a 256 MiB agent on h2: unreachable.* 409$" \
	"--host of an unreachable host: 409"
h2_libvirtd_restart; ok $? "h2's libvirtd is started again"
wait_for 60 h2_up; ok $? "host ls says h2 is reachable again (fleetd reconnected with backoff)"
like "$(host_field h2 .libvirt_version)" '^[0-9]+\.[0-9]+\.[0-9]+$' "with its versions"
like "$("$FLEETCTL" doctor 2>&1)" "OK +host-h2 +host h2 reachable at $H2_SCHEME" "and doctor says it is reachable"

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
