#!/bin/bash
# Benchmark of the VM backend (not part of make check; not a TAP test). Runs
# fleetd under a private libvirtd in a network + mount namespace it creates
# (tests/lib/vmns.sh), and measures in the same run, on the same guest image
# and the same TCG domain type, fleet against plain libvirt + OpenSSH:
#
#   1. provision-to-SSH-ready: `fleetctl create` + `fleetctl start` (which
#      returns once fleetd's SSH session over the control channel is up)
#      against: the same files made by hand (qemu-img overlay, ssh-keygen and
#      dropbearkey keys, mke2fs seed disk), `virsh define` of an equivalent
#      domain, `virsh start`, then OpenSSH through
#      `ProxyCommand=socat - UNIX-CONNECT:SOCK` retried every 0.5 s until the
#      first `true` succeeds. ROUNDS rounds, alternating which goes first.
#   2. exec round trip: N x `fleetctl exec A -- true` against N x `ssh ... true`
#      (a new SSH connection each time, through the same kind of channel),
#      interleaved; then N more of each against a reused OpenSSH connection
#      (ControlMaster, as the agent user, whose login shell is /bin/sh: a
#      plain login), which is what fleetd keeps per guest, with
#      `fleetctl exec --root A -- true` against the same ssh `true`; then
#      (not with --quick) a master as root running the very command line
#      fleetd sends for `exec A -- true`.
#   3. a fleet of FLEET VM agents (default 10, 2 of them running; --fleet 0:
#      skip): `fleetctl list`, `status` and `show` with FLEET agents against
#      with 1 (medians of REPS calls), and fleetd's start (its reconcile of
#      every agent, until it answers) with FLEET agents against the same
#      start on an empty state dir, measured before any domain exists; the
#      target (issue #16) is 2 s + 20 ms per agent. The extra agents are
#      created and left stopped, but one, which is started (TCG: few guests).
#
# Prints a table on stdout, then one line per row of issue #16 it measures:
#   ratio|ROW|FLEET|BASELINE|RATIO|TARGET
# and writes the figures ("key value unit" lines) to --out FILE (default:
# stdout). Bounded: about 5-8 minutes on 2 cores; --quick (one provisioning
# round, N=15, no root-line breakdown) about 1.5 minutes.
#
# Usage: tests/bench/vm-bench.sh [--quick] [--out FILE] [--n N] [--rounds R] [--fleet N]
# Env (as for make check): FLEET_SRCDIR, FLEET_BUILDDIR, FLEETD, FLEETCTL, AGENTD;
# BOOT_S: how long the baseline guest may take to answer ssh (default 180).
set -u

OUT=
QUICK=
N=50
ROUNDS=5
FLEET=10
BUDGET_S=${BUDGET_S:-570}	# stop starting new work after this many seconds
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	--n) N=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--fleet) FLEET=$2; shift 2 ;;
	--quick) QUICK=1; N=15; ROUNDS=1; shift ;;
	-h|--help) sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "vm-bench: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

FLEET_SRCDIR=${FLEET_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
FLEET_BUILDDIR=${FLEET_BUILDDIR:-$PWD}
FLEETD=${FLEETD:-$FLEET_BUILDDIR/daemon/fleetd}
FLEETCTL=${FLEETCTL:-$FLEET_BUILDDIR/ctl/fleetctl}
AGENTD=${AGENTD:-$FLEET_BUILDDIR/agentd/agentd}
export FLEET_SRCDIR FLEET_BUILDDIR FLEETD FLEETCTL AGENTD

die() { echo "vm-bench: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "vm-bench: needs root" >&2; exit 77; }
for x in "$FLEETD" "$FLEETCTL" "$AGENTD"; do [ -x "$x" ] || die "not built: $x (set FLEETD, FLEETCTL, AGENTD)"; done
for c in qemu-system-x86_64 qemu-img libvirtd virtlogd virsh mke2fs unshare nsenter ssh ssh-keygen socat dropbearkey jq; do
	command -v "$c" >/dev/null || die "$c not installed"
done

BT=$(mktemp -d /tmp/fleet-vm-bench.XXXXXX) || exit 1
chmod 0755 "$BT"
STATE=$BT/state
SOCK=$BT/fleetd.sock
export FLEET_SOCKET=$SOCK
FLEETD_PID=
MASTER_PID=
: > "$BT/none.conf"

bench_cleanup() {
	set +e
	[ -n "$MASTER_PID" ] && kill "$MASTER_PID" 2>/dev/null
	if [ -n "$FLEETD_PID" ] && kill -0 "$FLEETD_PID" 2>/dev/null; then
		for a in $("$FLEETCTL" --json list 2>/dev/null | jq -r '.[].name' 2>/dev/null); do
			"$FLEETCTL" rm --force "$a" >/dev/null 2>&1
		done
		kill "$FLEETD_PID" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$FLEETD_PID" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$FLEETD_PID" 2>/dev/null
	fi
	vmns_stop
	rm -rf "$BT"
}
trap bench_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

. "$FLEET_SRCDIR/tests/lib/image.sh"
image_ensure >&2 || die "cannot build the guest image${IMAGE_ERROR:+: $IMAGE_ERROR}"
. "$FLEET_SRCDIR/tests/lib/vmns.sh"
vmns_start || die "cannot start a private libvirtd"
trap bench_cleanup EXIT		# vmns_start chained its own; ours calls vmns_stop in order

mkdir -p "$STATE/images" "$STATE/vms"
cp "$IMG/vmlinuz" "$IMG/initramfs.img" "$IMG/base.qcow2" "$STATE/images/"
echo qemu > "$STATE/vms/virt-type"	# TCG for fleet's domains, as for the baseline's
IMGDIR=$STATE/images

now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }
# fleetd_up DIR SOCK: start fleetd on state dir DIR (it returns once it answers: its reconcile
# done); FLEETD_PID is its pid, START_US how long the start took (nsenter included, on both sides).
fleetd_up() {
	local t0
	t0=$(now_us)
	vmns_exec "$FLEETD" --state-dir "$1" --socket "$2" --config "$BT/none.conf" 2>"$BT/fleetd.err" ||
		die "fleetd did not start: $(cat "$BT/fleetd.err")"
	START_US=$(($(now_us) - t0))
	FLEETD_PID=$(head -1 "$1/fleetd.lock")
}
fleetd_down() {
	[ -n "$FLEETD_PID" ] || return 0
	kill "$FLEETD_PID" 2>/dev/null
	for _ in $(seq 300); do kill -0 "$FLEETD_PID" 2>/dev/null || break; sleep 0.05; done
	kill -0 "$FLEETD_PID" 2>/dev/null && die "fleetd $FLEETD_PID did not stop"
	FLEETD_PID=
}
# The reconcile row's baseline: fleetd's start with no agent at all (its VM backend, libvirt
# connection and all), before any domain exists; one untimed start first, as for the N-agent starts.
: > "$BT/start0"
if [ "$FLEET" -gt 0 ]; then
	mkdir -p "$BT/state0"
	for i in 0 1 2 3; do
		fleetd_up "$BT/state0" "$BT/fleetd0.sock"
		[ "$i" = 0 ] || echo "$START_US" >> "$BT/start0"
		fleetd_down
	done
fi
fleetd_up "$STATE" "$SOCK"
virsh_ns() { vmns_exec virsh -q -c qemu:///system "$@"; }

median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print 0; else print (NR % 2) ? a[(NR+1)/2] : int((a[NR/2]+a[NR/2+1])/2)}'; }
p95() { sort -n | awk '{a[NR]=$1} END {i=int(NR*0.95 + 0.999999); if (i<1) i=1; print (NR ? a[i] : 0)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
sec() { awk -v n="$1" 'BEGIN { printf "%.2f", n / 1e6 }'; }
ms() { awk -v n="$1" 'BEGIN { printf "%.1f", n / 1e3 }'; }
left() { echo $((BUDGET_S - SECONDS)); }

# --- the baseline: the same guest with plain libvirt and OpenSSH ------------------------------

# base_provision R: the files fleet makes, made with the usual tools, and an
# equivalent domain (fleet's domain XML, type qemu) defined with virsh.
base_provision() {
	local r=$1 d=$BT/base$1 k=$BT/base$1.keys stage pub
	mkdir -p "$d" && chmod 0711 "$d" && chown libvirt-qemu: "$d" 2>/dev/null
	mkdir -m 0700 -p "$k" "$k/seed"
	qemu-img create -q -f qcow2 -F qcow2 -b "$IMGDIR/base.qcow2" "$d/disk.qcow2" 2G || return 1
	ssh-keygen -q -t ed25519 -N '' -C bench -f "$k/client" || return 1
	dropbearkey -t ed25519 -f "$k/host" >/dev/null 2>&1 || return 1
	pub=$(dropbearkey -y -f "$k/host" | awk '/^ssh-ed25519 / {print $1, $2}')
	echo "bench-guest $pub" > "$k/known_hosts"
	stage=$k/seed
	cp "$k/host" "$stage/dropbear_ed25519_host_key"
	cp "$k/client.pub" "$stage/authorized_keys_root"
	cp "$k/client.pub" "$stage/authorized_keys_agent"
	echo "base$r" > "$stage/hostname"
	mke2fs -q -F -t ext2 -L fleet-seed -m 0 -E root_owner=0:0 -d "$stage" "$d/seed.img" 2M >/dev/null 2>&1 || return 1
	virsh_ns define /dev/stdin >/dev/null <<XML || return 1
<domain type='qemu'>
  <name>bench-base$r</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>$IMGDIR/vmlinuz</kernel>
    <initrd>$IMGDIR/initramfs.img</initrd>
    <cmdline>console=ttyS0 root=/dev/vda rw</cmdline>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='$d/disk.qcow2'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <disk type='file' device='disk'>
      <driver name='qemu' type='raw'/>
      <source file='$d/seed.img'/>
      <target dev='vdb' bus='virtio'/>
      <readonly/>
    </disk>
    <serial type='file'>
      <source path='$d/console.log' append='on'/>
      <target port='0'/>
    </serial>
    <console type='file'>
      <source path='$d/console.log' append='on'/>
      <target type='serial' port='0'/>
    </console>
    <channel type='unix'>
      <source mode='bind' path='$d/ctl.sock'/>
      <target type='virtio' name='org.fleet.ctl'/>
    </channel>
    <memballoon model='none'/>
  </devices>
</domain>
XML
}

# ssh options for baseline guest R: pinned host key, the agent's key, the control channel.
ssh_opts() {
	local r=$1
	SSH=(ssh -F /dev/null -i "$BT/base$r.keys/client" -o IdentitiesOnly=yes -o BatchMode=yes
		-o UserKnownHostsFile="$BT/base$r.keys/known_hosts" -o GlobalKnownHostsFile=/dev/null
		-o StrictHostKeyChecking=yes -o HostKeyAlias=bench-guest -o ConnectTimeout=8 -o LogLevel=ERROR
		-o ProxyCommand="socat - UNIX-CONNECT:$BT/base$r/ctl.sock")
}

# base_boot R: virsh start, then ssh true every 0.5 s until it succeeds (BOOT_S, 180 s, at most:
# fleetd's own boot timeout; more only on a host too loaded to boot a TCG guest in that).
base_boot() {
	local r=$1 deadline=$((SECONDS + ${BOOT_S:-180}))
	ssh_opts "$r"
	virsh_ns start "bench-base$r" >/dev/null || return 1
	until timeout 20 "${SSH[@]}" -o ControlMaster=no agent@bench-guest true </dev/null >/dev/null 2>&1; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 0.5
	done
}

base_remove() {
	virsh_ns destroy "bench-base$1" >/dev/null 2>&1
	virsh_ns undefine "bench-base$1" >/dev/null 2>&1
	rm -rf "$BT/base$1" "$BT/base$1.keys"
}

# --- provision-to-SSH-ready ---------------------------------------------------------------------

: > "$BT/f.prov"; : > "$BT/f.boot"; : > "$BT/f.total"
: > "$BT/b.prov"; : > "$BT/b.boot"; : > "$BT/b.total"

run_fleet() {
	local r=$1 t0 t1 t2
	t0=$(now_us)
	"$FLEETCTL" create "bench$r" --backend vm >/dev/null || die "fleetctl create bench$r failed"
	t1=$(now_us)
	"$FLEETCTL" start "bench$r" >/dev/null || die "fleetctl start bench$r failed"
	t2=$(now_us)
	echo $((t1 - t0)) >> "$BT/f.prov"; echo $((t2 - t1)) >> "$BT/f.boot"; echo $((t2 - t0)) >> "$BT/f.total"
	echo "#   round $r fleet:    create $(sec $((t1 - t0))) s, start $(sec $((t2 - t1))) s" >&2
}
run_base() {
	local r=$1 t0 t1 t2
	t0=$(now_us)
	base_provision "$r" || die "baseline provisioning $r failed"
	t1=$(now_us)
	base_boot "$r" || die "baseline guest $r did not answer on ssh (console: $(tail -3 "$BT/base$r/console.log" 2>/dev/null))"
	t2=$(now_us)
	echo $((t1 - t0)) >> "$BT/b.prov"; echo $((t2 - t1)) >> "$BT/b.boot"; echo $((t2 - t0)) >> "$BT/b.total"
	echo "#   round $r baseline: files+define $(sec $((t1 - t0))) s, start+ssh $(sec $((t2 - t1))) s" >&2
}

echo "# vm-bench: $(nproc) CPUs, kernel $(uname -r), up to $ROUNDS rounds, N=$N" >&2
# Warm-up, timed by neither side: the first domain a fresh libvirtd defines
# costs it ~4 s (seen in the first round otherwise), and the image files go
# into the page cache.
virsh_ns define /dev/stdin >/dev/null <<XML || die "cannot define a domain"
<domain type='qemu'><name>bench-warmup</name><memory unit='MiB'>64</memory>
<os><type arch='x86_64' machine='pc'>hvm</type></os></domain>
XML
virsh_ns undefine bench-warmup >/dev/null
cat "$IMGDIR/vmlinuz" "$IMGDIR/initramfs.img" "$IMGDIR/base.qcow2" > /dev/null
rounds_done=0
round_s=0
for r in $(seq "$ROUNDS"); do
	# Leave room for this round (as long as the last one) and the exec phase (~150 s).
	if [ "$r" -gt 1 ]; then
		if [ $((SECONDS + round_s + 150)) -gt "$BUDGET_S" ]; then
			echo "# vm-bench: time budget: stopping after $rounds_done rounds" >&2
			break
		fi
		# Only one pair runs at a time; the last pair stays up for the exec phase.
		"$FLEETCTL" rm --force "bench$((r - 1))" >/dev/null
		base_remove $((r - 1))
	fi
	rs=$SECONDS
	if [ $((r % 2)) = 1 ]; then run_base "$r"; run_fleet "$r"; else run_fleet "$r"; run_base "$r"; fi
	rounds_done=$r
	round_s=$((SECONDS - rs))
done
L=$rounds_done	# the pair that is still up
A=bench$L
ssh_opts "$L"

# --- exec round trip -----------------------------------------------------------------------------

: > "$BT/f.exec1"; : > "$BT/b.fresh"; : > "$BT/f.exec2"; : > "$BT/b.mux"
fail_f=0; fail_fresh=0; fail_mux=0
for _ in 1 2 3; do	# warm up both
	"$FLEETCTL" exec "$A" --no-stdin -- true >/dev/null 2>&1
	timeout 20 "${SSH[@]}" -o ControlMaster=no agent@bench-guest true </dev/null >/dev/null 2>&1
done
n1=0
for i in $(seq "$N"); do
	[ "$(left)" -gt 90 ] || { echo "# vm-bench: time budget: $n1 fresh-connection samples" >&2; break; }
	t0=$(now_us)
	if "$FLEETCTL" exec "$A" --no-stdin -- true >/dev/null 2>&1; then echo $(($(now_us) - t0)) >> "$BT/f.exec1"; else fail_f=$((fail_f + 1)); fi
	t0=$(now_us)
	if timeout 20 "${SSH[@]}" -o ControlMaster=no agent@bench-guest true </dev/null >/dev/null 2>&1; then
		echo $(($(now_us) - t0)) >> "$BT/b.fresh"
	else
		fail_fresh=$((fail_fresh + 1))
	fi
	n1=$i
done

# One OpenSSH connection kept open (the guest's port takes one host
# connection at a time) as the agent user, whose login shell is /bin/sh (a
# plain login: `sh -c true`, a builtin). The baseline for exec as the agent
# and for exec --root alike (root's login shell in the image is agentd,
# agentd/shell.h, so `ssh root@ true` would not be plain OpenSSH).
CTL=$BT/ssh-ctl
# master_up USER: start the master connection as USER; 0 once it answers.
master_up() {
	"${SSH[@]}" -M -N -S "$CTL" -o ControlPersist=no "$1@bench-guest" </dev/null >/dev/null 2>&1 &
	MASTER_PID=$!
	for _ in $(seq 120); do
		"${SSH[@]}" -S "$CTL" -O check "$1@bench-guest" >/dev/null 2>&1 && return 0
		kill -0 "$MASTER_PID" 2>/dev/null || return 1
		sleep 0.25
	done
	return 1
}
master_down() { kill "$MASTER_PID" 2>/dev/null; wait "$MASTER_PID" 2>/dev/null; MASTER_PID=; rm -f "$CTL"; }
: > "$BT/f.root"; : > "$BT/b.line"
fail_line=0
n2=0
n3=0
mux() { local u=$1; shift; timeout 20 "${SSH[@]}" -S "$CTL" -o ControlMaster=no "$u@bench-guest" "$@" </dev/null >/dev/null 2>&1; }
if master_up agent; then
	mux agent true
	for i in $(seq "$N"); do
		[ "$(left)" -gt 20 ] || { echo "# vm-bench: time budget: $n2 reused-connection samples" >&2; break; }
		t0=$(now_us)
		if "$FLEETCTL" exec "$A" --no-stdin -- true >/dev/null 2>&1; then echo $(($(now_us) - t0)) >> "$BT/f.exec2"; else fail_f=$((fail_f + 1)); fi
		t0=$(now_us)
		if "$FLEETCTL" exec "$A" --root --no-stdin -- true >/dev/null 2>&1; then echo $(($(now_us) - t0)) >> "$BT/f.root"; else fail_f=$((fail_f + 1)); fi
		t0=$(now_us)
		if mux agent true; then echo $(($(now_us) - t0)) >> "$BT/b.mux"; else fail_mux=$((fail_mux + 1)); fi
		n2=$i
	done
else
	echo "# vm-bench: the OpenSSH master connection did not come up; no reused-connection figures" >&2
fi
master_down
# The breakdown: the very command line fleetd sends for `fleetctl exec A --
# true` (ssh.c's pid line, agentd run-as), through a master as root (fleetd's
# session user): the same guest-side work, so the difference is fleet's
# host-side path (fleetctl, HTTP, fleetd, libvirt state check, libssh2).
FLEET_LINE='echo $$ >&2; exec /usr/bin/agentd run-as agent -- true'
if [ -z "$QUICK" ] && [ "$(left)" -gt 40 ]; then
	if master_up root; then
		mux root "$FLEET_LINE"
		for i in $(seq "$N"); do
			[ "$(left)" -gt 20 ] || { echo "# vm-bench: time budget: $n3 root-line samples" >&2; break; }
			t0=$(now_us)
			if mux root "$FLEET_LINE"; then echo $(($(now_us) - t0)) >> "$BT/b.line"; else fail_line=$((fail_line + 1)); fi
			n3=$i
		done
	else
		echo "# vm-bench: the OpenSSH master connection as root did not come up; no breakdown" >&2
	fi
	master_down
fi

# --- a fleet of VM agents: list, status, show, and fleetd's start ----------------------------------

: > "$BT/startN"
fl_list1= fl_status1= fl_show1= fl_listN= fl_statusN= fl_showN= fl_exec_after=
REPS=15; [ -z "$QUICK" ] || REPS=5
# median_us CMD...: the median wall time (us) of REPS runs of CMD.
median_us() {
	: > "$BT/reps"
	for _ in $(seq "$REPS"); do
		local t0; t0=$(now_us); "$@" >/dev/null 2>&1; echo $(($(now_us) - t0)) >> "$BT/reps"
	done
	median < "$BT/reps"
}
if [ "$FLEET" -gt 1 ] && [ "$(left)" -gt 120 ]; then
	# With one agent: the guest of the exec rows, running.
	"$FLEETCTL" list >/dev/null
	fl_list1=$(median_us "$FLEETCTL" list)
	fl_status1=$(median_us "$FLEETCTL" status)
	fl_show1=$(median_us "$FLEETCTL" show "$A")
	t0=$(now_us)
	for i in $(seq 2 "$FLEET"); do
		"$FLEETCTL" create "fleet$i" --backend vm --memory 128 --network none --health-interval 0 \
			--restart never >/dev/null || die "fleetctl create fleet$i failed"
	done
	fl_create=$(( ($(now_us) - t0) / (FLEET - 1) ))
	"$FLEETCTL" start fleet2 >/dev/null || die "fleetctl start fleet2 failed"
	fl_running=$("$FLEETCTL" --json list | jq '[.[] | select(.state == "running")] | length')
	echo "# vm-bench: $FLEET VM agents, $fl_running running; create $(sec "$fl_create") s each" >&2
	"$FLEETCTL" list >/dev/null
	fl_listN=$(median_us "$FLEETCTL" list)
	fl_statusN=$(median_us "$FLEETCTL" status)
	fl_showN=$(median_us "$FLEETCTL" show "$A")
	# fleetd's start with them: stopped and started again (the guests keep running), 1 + 3 times.
	for i in 0 1 2 3; do
		fleetd_down
		fleetd_up "$STATE" "$SOCK"
		[ "$i" = 0 ] || echo "$START_US" >> "$BT/startN"
	done
	# Not a row: the running guest's first exec after that start (fleetd's new session to it).
	t0=$(now_us)
	"$FLEETCTL" exec "$A" --no-stdin -- true >/dev/null 2>&1 && fl_exec_after=$(($(now_us) - t0))
	fl_running=$("$FLEETCTL" --json list | jq '[.[] | select(.state == "running")] | length')
else
	[ "$FLEET" -le 1 ] || echo "# vm-bench: time budget: no fleet phase" >&2
fi

# --- report --------------------------------------------------------------------------------------

fp=$(median < "$BT/f.prov"); bp=$(median < "$BT/b.prov")
fb=$(median < "$BT/f.boot"); bb=$(median < "$BT/b.boot")
ft=$(median < "$BT/f.total"); bt=$(median < "$BT/b.total")
f1=$(median < "$BT/f.exec1"); f1p=$(p95 < "$BT/f.exec1")
bf=$(median < "$BT/b.fresh"); bfp=$(p95 < "$BT/b.fresh")
f2=$(median < "$BT/f.exec2"); f2p=$(p95 < "$BT/f.exec2")
bm=$(median < "$BT/b.mux"); bmp=$(p95 < "$BT/b.mux")
fr=$(median < "$BT/f.root"); frp=$(p95 < "$BT/f.root")
bl=$(median < "$BT/b.line"); blp=$(p95 < "$BT/b.line")
range() { sort -n "$1" | awk '{a[NR]=$1} END {if (NR) printf "%.1f-%.1f", a[1]/1e6, a[NR]/1e6}'; }

{
	echo "VM backend benchmark, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(uname -r), TCG (domain type qemu)"
	echo "guests: 256 MiB, 1 vCPU, no NIC, same kernel/initramfs/base.qcow2; provision rounds: $rounds_done; exec samples: $n1 + $n2 + $n3${QUICK:+ (--quick)}"
	echo
	printf '%-44s %14s %14s %7s\n' "provision-to-SSH-ready (median of rounds)" fleet baseline ratio
	printf '%-44s %12s s %12s s %7s\n' "  provision (create | files + virsh define)" "$(sec "$fp")" "$(sec "$bp")" "$(ratio "$fp" "$bp")"
	printf '%-44s %12s s %12s s %7s\n' "  boot (start | virsh start + first ssh)" "$(sec "$fb")" "$(sec "$bb")" "$(ratio "$fb" "$bb")"
	printf '%-44s %12s s %12s s %7s\n' "  total" "$(sec "$ft")" "$(sec "$bt")" "$(ratio "$ft" "$bt")"
	printf '%-44s %14s %14s\n' "  range of totals over rounds" "$(range "$BT/f.total") s" "$(range "$BT/b.total") s"
	echo
	printf '%-44s %14s %14s %7s\n' "exec true round trip" "fleetctl exec" "ssh" ratio
	printf '%-44s %11s ms %11s ms %7s\n' "  vs new ssh connection each: median" "$(ms "$f1")" "$(ms "$bf")" "$(ratio "$f1" "$bf")"
	printf '%-44s %11s ms %11s ms %7s\n' "  vs new ssh connection each: p95" "$(ms "$f1p")" "$(ms "$bfp")" "$(ratio "$f1p" "$bfp")"
	printf '%-44s %11s ms %11s ms %7s\n' "  vs reused ssh connection: median" "$(ms "$f2")" "$(ms "$bm")" "$(ratio "$f2" "$bm")"
	printf '%-44s %11s ms %11s ms %7s\n' "  vs reused ssh connection: p95" "$(ms "$f2p")" "$(ms "$bmp")" "$(ratio "$f2p" "$bmp")"
	echo
	printf '%-44s %14s %14s %7s\n' "breakdown (reused connection)" fleet ssh ratio
	printf '%-44s %11s ms %11s ms %7s\n' "  exec --root true | ssh true: median" "$(ms "$fr")" "$(ms "$bm")" "$(ratio "$fr" "$bm")"
	printf '%-44s %11s ms %11s ms %7s\n' "  exec --root true | ssh true: p95" "$(ms "$frp")" "$(ms "$bmp")" "$(ratio "$frp" "$bmp")"
	if [ "$n3" -gt 0 ]; then
		printf '%-44s %11s ms %11s ms %7s\n' "  exec true | ssh root fleetd's line: median" "$(ms "$f2")" "$(ms "$bl")" "$(ratio "$f2" "$bl")"
		printf '%-44s %11s ms %11s ms %7s\n' "  exec true | ssh root fleetd's line: p95" "$(ms "$f2p")" "$(ms "$blp")" "$(ratio "$f2p" "$blp")"
	fi
	echo "failures: fleetctl exec $fail_f, ssh new connection $fail_fresh, ssh reused connection $fail_mux + $fail_line"
	if [ -s "$BT/startN" ]; then
		echo
		printf '%-44s %14s %14s %7s\n' "a fleet of $FLEET VM agents ($fl_running running)" "$FLEET agents" "baseline" ratio
		printf '%-44s %11s ms %11s ms %7s\n' "  fleetctl list (median of $REPS) | 1 agent" "$(ms "$fl_listN")" "$(ms "$fl_list1")" "$(ratio "$fl_listN" "$fl_list1")"
		printf '%-44s %11s ms %11s ms %7s\n' "  fleetctl status | 1 agent" "$(ms "$fl_statusN")" "$(ms "$fl_status1")" "$(ratio "$fl_statusN" "$fl_status1")"
		printf '%-44s %11s ms %11s ms %7s\n' "  fleetctl show A | 1 agent" "$(ms "$fl_showN")" "$(ms "$fl_show1")" "$(ratio "$fl_showN" "$fl_show1")"
		printf '%-44s %11s ms %11s ms %7s\n' "  fleetd start (median of 3) | empty state" "$(ms "$(median < "$BT/startN")")" "$(ms "$(median < "$BT/start0")")" "$(ratio "$(median < "$BT/startN")" "$(median < "$BT/start0")")"
		echo "  starts (ms): $FLEET agents $(tr '\n' ' ' < "$BT/startN" | awk '{for (i = 1; i <= NF; i++) printf "%s%.1f", (i > 1 ? ", " : ""), $i / 1e3}'); empty $(tr '\n' ' ' < "$BT/start0" | awk '{for (i = 1; i <= NF; i++) printf "%s%.1f", (i > 1 ? ", " : ""), $i / 1e3}')"
		echo "  first exec in $A after the last start (its session made again): $([ -n "$fl_exec_after" ] && echo "$(ms "$fl_exec_after") ms" || echo failed)"
	fi
} > "$BT/table"
cat "$BT/table"

# The rows of issue #16 this measures, one line each (tests/bench/quick.sh gathers them).
ratio_line() { echo "ratio|$1|$(ms "$2") ms|$(ms "$3") ms $4|$(ratio "$2" "$3")x|$5"; }
echo
ratio_line 'exec `true` as root' "$fr" "$bm" "reused OpenSSH connection" "keep"
ratio_line 'exec `true` as the agent' "$f2" "$bm" "reused OpenSSH connection" "<= 1.1x"
ratio_line 'exec `true` as the agent' "$f1" "$bf" "a new OpenSSH connection" "<= 0.4x"
if [ -s "$BT/startN" ]; then
	sN=$(median < "$BT/startN"); s0=$(median < "$BT/start0")
	echo "ratio|reconcile at fleetd start, $FLEET VM agents ($fl_running running)|$(ms "$sN") ms|empty state dir: $(ms "$s0") ms|$(ratio "$sN" "$s0")x|< 2 s + 20 ms/agent = $(ms $((2000000 + 20000 * FLEET))) ms"
	echo "ratio|\`fleetctl list\`, $FLEET VM agents|$(ms "$fl_listN") ms|same, 1 agent: $(ms "$fl_list1") ms|$(ratio "$fl_listN" "$fl_list1")x|<= 2x"
	echo "ratio|\`fleetctl status\`, $FLEET VM agents|$(ms "$fl_statusN") ms|same, 1 agent: $(ms "$fl_status1") ms|$(ratio "$fl_statusN" "$fl_status1")x|<= 2x"
	echo "ratio|\`fleetctl show\`, $FLEET VM agents|$(ms "$fl_showN") ms|same, 1 agent: $(ms "$fl_show1") ms|$(ratio "$fl_showN" "$fl_show1")x|<= 2x"
fi

figures() {
	echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "cpus $(nproc)"
	echo "kernel $(uname -r)"
	echo "domain_type qemu"
	echo "rounds $rounds_done"
	echo "fleet_provision_median_s $(sec "$fp") s"
	echo "base_provision_median_s $(sec "$bp") s"
	echo "fleet_boot_median_s $(sec "$fb") s"
	echo "base_boot_median_s $(sec "$bb") s"
	echo "fleet_total_median_s $(sec "$ft") s"
	echo "base_total_median_s $(sec "$bt") s"
	echo "ratio_total $(ratio "$ft" "$bt")"
	echo "fleet_total_each_s $(awk '{printf "%s%.2f", (NR > 1 ? "," : ""), $1 / 1e6}' "$BT/f.total") s"
	echo "base_total_each_s $(awk '{printf "%s%.2f", (NR > 1 ? "," : ""), $1 / 1e6}' "$BT/b.total") s"
	echo "exec_samples_fresh $n1"
	echo "fleet_exec_median_ms $(ms "$f1") ms"
	echo "fleet_exec_p95_ms $(ms "$f1p") ms"
	echo "ssh_fresh_median_ms $(ms "$bf") ms"
	echo "ssh_fresh_p95_ms $(ms "$bfp") ms"
	echo "ratio_exec_fresh_median $(ratio "$f1" "$bf")"
	echo "ratio_exec_fresh_p95 $(ratio "$f1p" "$bfp")"
	echo "exec_samples_reused $n2"
	echo "fleet_exec2_median_ms $(ms "$f2") ms"
	echo "fleet_exec2_p95_ms $(ms "$f2p") ms"
	echo "ssh_reused_median_ms $(ms "$bm") ms"
	echo "ssh_reused_p95_ms $(ms "$bmp") ms"
	echo "ratio_exec_reused_median $(ratio "$f2" "$bm")"
	echo "ratio_exec_reused_p95 $(ratio "$f2p" "$bmp")"
	echo "fleet_exec_root_median_ms $(ms "$fr") ms"
	echo "fleet_exec_root_p95_ms $(ms "$frp") ms"
	echo "exec_samples_root_line $n3"
	echo "ssh_reused_fleet_line_median_ms $(ms "$bl") ms"
	echo "ssh_reused_fleet_line_p95_ms $(ms "$blp") ms"
	echo "failures_fleet_exec $fail_f"
	echo "failures_ssh_fresh $fail_fresh"
	echo "failures_ssh_reused $((fail_mux + fail_line))"
	echo "fleet_agents $FLEET"
	echo "fleet_list_ms $(ms "${fl_listN:-0}") ms (1 agent: $(ms "${fl_list1:-0}") ms)"
	echo "fleet_status_ms $(ms "${fl_statusN:-0}") ms (1 agent: $(ms "${fl_status1:-0}") ms)"
	echo "fleet_show_ms $(ms "${fl_showN:-0}") ms (1 agent: $(ms "${fl_show1:-0}") ms)"
	echo "fleetd_start_agents_ms $(ms "$(median < "$BT/startN")") ms"
	echo "fleetd_start_empty_ms $(ms "$(median < "$BT/start0")") ms"
	echo "elapsed_s $SECONDS s"
}
if [ -n "$OUT" ] && [ "$OUT" != - ]; then
	figures > "$OUT"
else
	echo
	figures
fi
