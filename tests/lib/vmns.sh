# shellcheck shell=bash
# vmns.sh: a private libvirtd for tests, in a mount + network namespace this
# test creates (see docs: "Testing with real parts"). Source it, then:
#
#   vmns_start            start the namespace, virtlogd and libvirtd
#   vmns_exec CMD...      run CMD inside it (virsh, qemu-img, ...)
#   vmns_stop             destroy guests and networks, stop the daemons, remove
#                         everything; safe to call twice, and from a trap
#
# After vmns_start: VMNS_PID (the holder process), VMNS_DIR (host-side temp
# dir), VMNS_VARLIB (host path of the namespace's /var/lib/libvirt, so
# VMNS_VARLIB/x is /var/lib/libvirt/x inside), VMNS_ID (unique per run, for
# naming guests and networks). vmns_start adds vmns_stop to the EXIT trap.
# Optional, read by vmns_start: VMNS_BEFORE_DAEMONS (a function run once the
# namespace exists, before virtlogd and libvirtd start; VMNS_PID and VMNS_DIR
# are set) and VMNS_LIBVIRTD_ARGS (extra words for libvirtd, e.g. --listen).
# Needs root, util-linux (unshare, nsenter), libvirt-daemon-system.

VMNS_PID=
VMNS_DIR=
VMNS_VARLIB=
VMNS_ID=
VMNS_START_TIMEOUT=${VMNS_START_TIMEOUT:-60}

_vmns_log() { echo "# vmns: $*" >&2; }

# Run a command inside the namespace.
vmns_exec() {
    [ -n "$VMNS_PID" ] || { _vmns_log "vmns_exec: not started"; return 1; }
    nsenter -t "$VMNS_PID" -m -n -- "$@"
}

# _vmns_wait_for SECONDS TEST...: poll until TEST succeeds (0); give up at
# once when it returns 2.
_vmns_wait_for() {
    local deadline=$((SECONDS + $1)) rc
    shift
    while :; do
        "$@"
        rc=$?
        [ $rc = 0 ] && return 0
        [ $rc = 2 ] && return 1
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.1
    done
}

# _vmns_pid_in_ns FILE: read a pid file that lives inside the namespace.
_vmns_pid_in_ns() {
    local f=/proc/$VMNS_PID/root$1 pid
    [ -r "$f" ] || return 1
    pid=$(cat "$f" 2>/dev/null)   # no trailing newline: read(1) would fail
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    echo "$pid"
}

# _vmns_stop_pid PID: TERM, wait up to 10 s, then KILL.
_vmns_stop_pid() {
    local pid=$1
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null
    _vmns_wait_for 10 _vmns_gone "$pid" && return 0
    _vmns_log "pid $pid ignored SIGTERM, killing it"
    kill -KILL "$pid" 2>/dev/null
    _vmns_wait_for 5 _vmns_gone "$pid"
}
_vmns_gone() { ! kill -0 "$1" 2>/dev/null || [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" = Z ]; }

_vmns_add_exit_trap() {
    local cur
    # Under tests/lib/common.sh: one more cleanup of its list, so it runs after
    # the test's own (registered later, run first). Put before the test's
    # cleanups, it stopped the test's fleetd (in this network namespace)
    # before they could remove their user agents through it: their Unix users
    # and cgroups were left behind by every run (tests/vm/state-files.sh).
    if declare -F on_exit >/dev/null; then
        case " ${_cleanups[*]:-} " in *" vmns_stop "*) ;; *) on_exit vmns_stop ;; esac
        return 0
    fi
    cur=$(trap -p EXIT)
    case "$cur" in *vmns_stop*) return 0 ;; esac
    if [ -n "$cur" ]; then
        eval "set -- $cur"   # -> trap -- 'CMD' EXIT
        trap "vmns_stop; $3" EXIT
    else
        trap vmns_stop EXIT
    fi
    # Turn signals into exit so the EXIT trap runs.
    [ -n "$(trap -p INT)" ] || trap 'exit 130' INT
    [ -n "$(trap -p TERM)" ] || trap 'exit 143' TERM
}

vmns_start() {
    if [ -n "$VMNS_PID" ]; then
        _vmns_log "already started (holder $VMNS_PID)"
        return 0
    fi
    local cmd
    for cmd in unshare nsenter libvirtd virtlogd virsh ip; do
        command -v "$cmd" >/dev/null 2>&1 || { _vmns_log "missing command: $cmd"; return 1; }
    done
    [ "$(id -u)" = 0 ] || { _vmns_log "needs root"; return 1; }

    VMNS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/fleet-vmns.XXXXXX") || return 1
    VMNS_ID=$(basename "$VMNS_DIR" | sed 's/^fleet-vmns\.//' | tr 'A-Z' 'a-z')
    VMNS_VARLIB=$VMNS_DIR/varlib
    _vmns_add_exit_trap

    # QEMU runs as the qemu user and must traverse /var/lib/libvirt.
    mkdir -p "$VMNS_VARLIB"/{qemu,dnsmasq,images,network} "$VMNS_DIR/etc" "$VMNS_DIR/cache" "$VMNS_DIR/cgroup"
    chmod 0755 "$VMNS_DIR" "$VMNS_VARLIB" "$VMNS_VARLIB"/*
    # A private copy of /etc/libvirt: persistent domains and networks are
    # written there, and must not land in (or come from) the host's config.
    cp -a /etc/libvirt "$VMNS_DIR/etc/libvirt"
    rm -f "$VMNS_DIR"/etc/libvirt/qemu/*.xml "$VMNS_DIR"/etc/libvirt/qemu/autostart/*
    rm -f "$VMNS_DIR"/etc/libvirt/qemu/networks/*.xml "$VMNS_DIR"/etc/libvirt/qemu/networks/autostart/*
    # Seed the QEMU capabilities cache so libvirtd need not probe QEMU again;
    # writes stay private.
    [ -d /var/cache/libvirt ] && cp -a /var/cache/libvirt/. "$VMNS_DIR/cache/" 2>/dev/null

    # The holder: sets up its namespace, reports, then sleeps until killed.
    # unshare without --fork execs the shell, so $! is inside the namespace.
    local setup='
        set -e
        D=$1
        mount -t tmpfs -o mode=0755 tmpfs /run
        mkdir -p /run/libvirt /run/lock
        mount --bind "$D/varlib" /var/lib/libvirt
        mkdir -p /var/log/libvirt
        mount -t tmpfs -o mode=0755 tmpfs /var/log/libvirt
        mkdir -p /var/log/libvirt/qemu
        mount --bind "$D/etc/libvirt" /etc/libvirt
        mkdir -p /var/cache/libvirt
        mount --bind "$D/cache" /var/cache/libvirt
        # A fresh /sys for this network namespace, keeping the cgroup mounts.
        mount --rbind /sys/fs/cgroup "$D/cgroup"
        mount -t sysfs sysfs /sys
        mount --rbind "$D/cgroup" /sys/fs/cgroup
        umount -l "$D/cgroup"
        ip link set lo up
        echo ok > "$D/setup.done"
        exec sleep infinity'
    unshare --mount --net --propagation private -- bash -c "$setup" vmns-holder "$VMNS_DIR" \
        </dev/null >"$VMNS_DIR/holder.log" 2>&1 &
    VMNS_PID=$!

    if ! _vmns_wait_for 10 _vmns_setup_done; then
        _vmns_log "namespace setup failed: $(tr '\n' ' ' < "$VMNS_DIR/holder.log")"
        vmns_stop
        return 1
    fi
    # A caller's setup inside the namespace before the daemons start (host2.sh:
    # a veth address for libvirtd to listen on), and libvirtd's extra arguments.
    if [ -n "${VMNS_BEFORE_DAEMONS:-}" ] && ! "$VMNS_BEFORE_DAEMONS"; then
        _vmns_log "$VMNS_BEFORE_DAEMONS failed"
        vmns_stop
        return 1
    fi
    # shellcheck disable=SC2086 # VMNS_LIBVIRTD_ARGS: words on purpose
    if ! vmns_exec virtlogd -d || ! vmns_exec libvirtd -d ${VMNS_LIBVIRTD_ARGS:-}; then
        _vmns_log "could not start virtlogd/libvirtd"
        vmns_stop
        return 1
    fi
    if ! _vmns_wait_for "$VMNS_START_TIMEOUT" _vmns_sock_ready; then
        _vmns_log "libvirtd did not create /run/libvirt/libvirt-sock within ${VMNS_START_TIMEOUT}s"
        vmns_stop
        return 1
    fi
    # The socket appears before libvirtd answers; wait for a real answer.
    if ! _vmns_wait_for "$VMNS_START_TIMEOUT" _vmns_answers; then
        _vmns_log "libvirtd does not answer"
        vmns_stop
        return 1
    fi
    return 0
}
_vmns_setup_done() { [ -e "$VMNS_DIR/setup.done" ] || { ! kill -0 "$VMNS_PID" 2>/dev/null && return 2; return 1; }; }
_vmns_sock_ready() { [ -S "/proc/$VMNS_PID/root/run/libvirt/libvirt-sock" ]; }
_vmns_answers() { vmns_exec virsh -c qemu:///system uri >/dev/null 2>&1; }

# vmns_virsh ARGS...: virsh against the namespace's libvirtd.
vmns_virsh() { vmns_exec virsh -q -c qemu:///system "$@"; }

vmns_stop() {
    local pid dom net netns p
    if [ -n "$VMNS_PID" ] && kill -0 "$VMNS_PID" 2>/dev/null; then
        if _vmns_sock_ready 2>/dev/null; then
            for dom in $(vmns_virsh list --name 2>/dev/null); do
                vmns_virsh destroy "$dom" >/dev/null 2>&1
            done
            for net in $(vmns_virsh net-list --name 2>/dev/null); do
                vmns_virsh net-destroy "$net" >/dev/null 2>&1
            done
        fi
        pid=$(_vmns_pid_in_ns /run/libvirtd.pid) && _vmns_stop_pid "$pid"
        pid=$(_vmns_pid_in_ns /run/virtlogd.pid) && _vmns_stop_pid "$pid"
        # Anything else still in our network namespace is ours (a QEMU or
        # dnsmasq that outlived its daemon): stop it by pid.
        netns=$(readlink "/proc/$VMNS_PID/ns/net" 2>/dev/null)
        if [ -n "$netns" ]; then
            for p in /proc/[0-9]*; do
                pid=${p#/proc/}
                [ "$pid" = "$VMNS_PID" ] && continue
                [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$netns" ] || continue
                _vmns_log "stopping leftover pid $pid ($(cat "$p/comm" 2>/dev/null))"
                _vmns_stop_pid "$pid"
            done
        fi
        kill -TERM "$VMNS_PID" 2>/dev/null
        wait "$VMNS_PID" 2>/dev/null
    fi
    VMNS_PID=
    if [ -n "$VMNS_DIR" ] && [ -d "$VMNS_DIR" ]; then
        # Mounts were private to the namespace and died with it.
        rm -rf "$VMNS_DIR"
    fi
    VMNS_DIR=
    VMNS_VARLIB=
    return 0
}
