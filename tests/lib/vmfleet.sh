# vmfleet.sh: what every VM test needs first. Source after common.sh, then
# call vmfleet_setup [--tcg] [EXTRA_TOOL...]: it skips (fails under CI=true)
# without root or the tools, fails without fleet's patched dropbear (run
# scripts/deps.sh), builds the guest image if needed, starts a
# private libvirtd in a namespace (tests/lib/vmns.sh), and lays out a state dir
# with the image in it. Then fleetd_ns_start runs fleetd inside that namespace.
# --tcg pre-seeds vms/virt-type: KVM answers its ioctls on the development host
# but does not run guests, and only fleet-vm.sh needs to prove the watchdog.
#
# Sets STATE, SOCK, FLEET_SOCKET, IMG; defines fleetd_ns_start, virsh_ns,
# wait_for.

vmfleet_setup() {
	local tcg= c
	if [ "${1:-}" = --tcg ]; then tcg=1; shift; fi
	[ "$(id -u)" = 0 ] || skip_all "needs root"
	for c in qemu-system-x86_64 qemu-img libvirtd virtlogd virsh mke2fs unshare nsenter "$@"; do
		command -v "$c" >/dev/null || skip_all "$c not installed (scripts/deps.sh installs it)"
	done
	. "$FLEET_SRCDIR/tests/lib/image.sh"
	if ! image_ensure; then
		[ -z "$IMAGE_ERROR" ] || fail_all "$IMAGE_ERROR"
		skip_all "cannot build the guest image"
	fi
	. "$FLEET_SRCDIR/tests/lib/vmns.sh"
	vmns_start || skip_all "cannot start a private libvirtd"	# it adds vmns_stop to on_exit's list

	STATE=$TEST_TMP/state
	SOCK=$TEST_TMP/fleetd.sock
	export FLEET_SOCKET=$SOCK
	mkdir -p "$STATE/images" "$STATE/vms"
	cp "$IMG/vmlinuz" "$IMG/initramfs.img" "$IMG/base.qcow2" "$STATE/images/"
	[ -z "$tcg" ] || echo qemu > "$STATE/vms/virt-type"
}

# fleetd_ns_start [ARGS...]: start fleetd inside the namespace (it detaches once ready).
fleetd_ns_start() {
	vmns_exec "$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$TEST_TMP/none.conf" \
		$(_hooks_listen_default "$@") "$@" \
		2>>"$TEST_TMP/fleetd.start" || return 1
	FLEETD_PID=$(head -1 "$STATE/fleetd.lock")
	_pids+=("$FLEETD_PID")
}

virsh_ns() { vmns_exec virsh -q -c qemu:///system "$@"; }

# wait_for SECONDS CMD...: poll until CMD (a command or a function) succeeds.
wait_for() {
	local deadline=$((SECONDS + $1)); shift
	until "$@" >/dev/null 2>&1; do [ $SECONDS -lt $deadline ] || return 1; sleep 0.3; done
}
