# shellcheck shell=bash
# host2.sh: a second private libvirtd for the more-hosts tests (#15), in its
# own mount and network namespace (a second vmns_start), next to the first
# one that vmfleet_setup started. Source it after vmfleet_setup, then:
#
#   host2_start          start it (fail_all when it cannot); h2_stop is on_exit's
#   h2_libvirtd_pid      its libvirtd's pid (for kill tests)
#   h2_libvirtd_restart  start its libvirtd again after a kill
#   virsh_h2 ARGS...     virsh against it, from inside its namespace
#
# After host2_start: H2 (its holder pid, dir, varlib, id, as vmns.sh's
# variables), H2_URI (what `fleetctl host add` gets). The socket is reached
# through /proc/PID/root: no traffic leaves the namespaces the test made.

H2=()
H2_URI=

host2_start() {
	local ns1=("$VMNS_PID" "$VMNS_DIR" "$VMNS_VARLIB" "$VMNS_ID") rc
	VMNS_PID='' VMNS_DIR='' VMNS_VARLIB='' VMNS_ID=''
	vmns_start; rc=$?	# on failure it has stopped what it started
	H2=("$VMNS_PID" "$VMNS_DIR" "$VMNS_VARLIB" "$VMNS_ID")
	VMNS_PID=${ns1[0]} VMNS_DIR=${ns1[1]} VMNS_VARLIB=${ns1[2]} VMNS_ID=${ns1[3]}	# the first one's cleanup is on_exit's
	[ "$rc" = 0 ] || fail_all "cannot start a second private libvirtd"
	on_exit h2_stop
	H2_URI="qemu+unix:///system?socket=/proc/${H2[0]}/root/run/libvirt/libvirt-sock"
}

h2_stop() {	# vmns_stop of the second namespace, the first one's variables kept
	[ "${#H2[@]}" -gt 0 ] || return 0
	local keep=("$VMNS_PID" "$VMNS_DIR" "$VMNS_VARLIB" "$VMNS_ID")
	VMNS_PID=${H2[0]} VMNS_DIR=${H2[1]} VMNS_VARLIB=${H2[2]} VMNS_ID=${H2[3]}
	vmns_stop
	VMNS_PID=${keep[0]} VMNS_DIR=${keep[1]} VMNS_VARLIB=${keep[2]} VMNS_ID=${keep[3]}
}

h2_libvirtd_pid() { cat "/proc/${H2[0]}/root/run/libvirtd.pid" 2>/dev/null; }
h2_libvirtd_restart() { nsenter -t "${H2[0]}" -m -n -- libvirtd -d; }
virsh_h2() { nsenter -t "${H2[0]}" -m -n -- virsh -q -c qemu:///system "$@"; }
