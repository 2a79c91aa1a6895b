# shellcheck shell=bash
# host2.sh: a second private libvirtd for the more-hosts tests (#15), in its
# own mount and network namespace (a second vmns_start), next to the first
# one that vmfleet_setup started (where fleetd runs: fleetd_ns_start). Source
# it after vmfleet_setup, then:
#
#   host2_start          start it (fail_all when it cannot); h2_stop is on_exit's
#   h2_libvirtd_pid      its libvirtd's pid (for kill tests)
#   h2_libvirtd_restart  start its libvirtd again after a kill (listening as before)
#   virsh_h2 ARGS...     virsh against it, from inside its namespace
#
# After host2_start: H2 (its holder pid, dir, varlib, id, as vmns.sh's
# variables), H2_URI (what `fleetctl host add` gets), H2_ADDR (its address,
# tcp only). H2_TRANSPORT, set before host2_start, chooses how fleetd reaches
# it:
#
#   tcp (the default)  the issue's proof: the two namespaces joined by a veth
#                      pair (H2_NS1_ADDR in the first, H2_ADDR in h2's, a /30
#                      of 198.18.0.0/15, RFC 2544's range for tests, that
#                      exists only inside these two namespaces), h2's libvirtd
#                      listening on TCP on H2_ADDR only (libvirtd.conf of its
#                      own mount namespace: listen_tcp, no TLS, auth_tcp none),
#                      H2_URI=qemu+tcp://H2_ADDR/system. Clear text and no
#                      authentication: for this test only, never across a
#                      real network.
#   unix               its Unix socket through /proc/PID/root
#                      (qemu+unix:///system?socket=...), no network at all.
#
# Either way no traffic leaves the namespaces the test made.

H2=()
H2_URI=
H2_TRANSPORT=${H2_TRANSPORT:-tcp}
H2_NS1_ADDR=198.18.15.1
H2_ADDR=198.18.15.2
_H2_NS1_PID=

host2_start() {
	local ns1=("$VMNS_PID" "$VMNS_DIR" "$VMNS_VARLIB" "$VMNS_ID") rc
	# shellcheck disable=SC2034 # VMNS_BEFORE_DAEMONS, VMNS_LIBVIRTD_ARGS: read by vmns_start
	case "$H2_TRANSPORT" in
	tcp) VMNS_BEFORE_DAEMONS=_h2_before_tcp VMNS_LIBVIRTD_ARGS=--listen ;;
	unix) VMNS_BEFORE_DAEMONS=_h2_no_kvm VMNS_LIBVIRTD_ARGS='' ;;
	*) fail_all "H2_TRANSPORT=$H2_TRANSPORT: tcp or unix" ;;
	esac
	_H2_NS1_PID=$VMNS_PID
	VMNS_PID='' VMNS_DIR='' VMNS_VARLIB='' VMNS_ID=''
	vmns_start; rc=$?	# on failure it has stopped what it started
	H2=("$VMNS_PID" "$VMNS_DIR" "$VMNS_VARLIB" "$VMNS_ID")
	VMNS_PID=${ns1[0]} VMNS_DIR=${ns1[1]} VMNS_VARLIB=${ns1[2]} VMNS_ID=${ns1[3]}	# the first one's cleanup is on_exit's
	# shellcheck disable=SC2034 # as above
	VMNS_BEFORE_DAEMONS='' VMNS_LIBVIRTD_ARGS=''
	[ "$rc" = 0 ] || fail_all "cannot start a second private libvirtd ($H2_TRANSPORT)"
	on_exit h2_stop
	if [ "$H2_TRANSPORT" = tcp ]; then
		H2_URI="qemu+tcp://$H2_ADDR/system"
		# The socket is there before libvirtd listens on TCP: wait for an answer over it.
		wait_for 30 vmns_exec virsh -c "$H2_URI" uri || fail_all "h2's libvirtd does not answer on $H2_URI"
	else
		H2_URI="qemu+unix:///system?socket=/proc/${H2[0]}/root/run/libvirt/libvirt-sock"
	fi
}

# h2 runs its guests under TCG, as vmfleet_setup --tcg makes the first one do: on some
# development machines /dev/kvm answers its ioctls but a KVM guest never leaves its
# kernel's decompressor, and fleet's KVM watchdog covers fleetd's own host only
# (docs/multi-host.md). /dev/null over /dev/kvm in h2's mount namespace: its libvirtd
# and QEMU find no KVM, on every machine alike.
_h2_no_kvm() {
	[ -e /dev/kvm ] || return 0
	nsenter -t "$VMNS_PID" -m -- mount --bind /dev/null /dev/kvm
}
_h2_before_tcp() { _h2_no_kvm && _h2_net_setup; }

# Run by vmns_start inside h2's new namespace, before its libvirtd starts
# (VMNS_PID and VMNS_DIR are h2's): the veth pair, made inside the first
# namespace with its peer created straight in h2's (it never exists in the
# host's), and h2's libvirtd.conf (the private copy of /etc/libvirt that its
# mount namespace sees) listening on H2_ADDR only.
_h2_net_setup() {
	nsenter -t "$_H2_NS1_PID" -n -- ip link add fleet-h1 type veth peer name fleet-h2 netns "$VMNS_PID" &&
		nsenter -t "$_H2_NS1_PID" -n -- ip addr add "$H2_NS1_ADDR/30" dev fleet-h1 &&
		nsenter -t "$_H2_NS1_PID" -n -- ip link set fleet-h1 up &&
		nsenter -t "$VMNS_PID" -n -- ip addr add "$H2_ADDR/30" dev fleet-h2 &&
		nsenter -t "$VMNS_PID" -n -- ip link set fleet-h2 up || return 1
	cat >> "$VMNS_DIR/etc/libvirt/libvirtd.conf" <<-EOF

	# host2.sh: TCP on the veth address inside the test's namespaces only
	listen_tls = 0
	listen_tcp = 1
	listen_addr = "$H2_ADDR"
	auth_tcp = "none"
	EOF
}

h2_stop() {	# vmns_stop of the second namespace (the veth pair goes with it), the first one's variables kept
	[ "${#H2[@]}" -gt 0 ] || return 0
	local keep=("$VMNS_PID" "$VMNS_DIR" "$VMNS_VARLIB" "$VMNS_ID")
	VMNS_PID=${H2[0]} VMNS_DIR=${H2[1]} VMNS_VARLIB=${H2[2]} VMNS_ID=${H2[3]}
	vmns_stop
	VMNS_PID=${keep[0]} VMNS_DIR=${keep[1]} VMNS_VARLIB=${keep[2]} VMNS_ID=${keep[3]}
}

h2_libvirtd_pid() { cat "/proc/${H2[0]}/root/run/libvirtd.pid" 2>/dev/null; }
h2_libvirtd_restart() {
	if [ "$H2_TRANSPORT" = tcp ]; then
		nsenter -t "${H2[0]}" -m -n -- libvirtd -d --listen
	else
		nsenter -t "${H2[0]}" -m -n -- libvirtd -d
	fi
}
virsh_h2() { nsenter -t "${H2[0]}" -m -n -- virsh -q -c qemu:///system "$@"; }
