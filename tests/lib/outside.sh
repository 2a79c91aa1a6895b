# shellcheck shell=bash
# outside.sh: "the outside" of a test that runs fleetd in a network namespace
# of its own (user-network, user-dns, examples, the isolation matrix): one
# more network namespace behind a veth pair from the test's ("the host"),
# so agents with --network nat have somewhere to go and nothing leaves the
# test's namespaces. Source after common.sh.
#
#   the host     uplink0  198.51.100.1/24  2001:db8:5::1/64 (TEST-NET-2, the documentation prefix)
#   the outside  o-eth0   198.51.100.2/24  2001:db8:5::2/64, default routes back through the host,
#                         plus every address of OUTSIDE_EXTRA (space-separated, IPv4 or IPv6): one
#                         off those subnets (169.254.169.254, fd00:ec2::254) gets a host route
#                         through the outside, so the host reaches it and agents have a route to it.
#
# outside_setup [RUNNER...]: make it (RUNNER: a command prefix that runs a command on the host,
# e.g. nsenter into a vmns namespace; a command, not a function, so each background server's $!
# is the server itself). Registers the unmount of the namespace file. Nonzero if a step failed.
# out CMD...: run CMD in the outside (on the host side of RUNNER, set by outside_setup).
# outside_serve ADDR PORT WORD: a TCP server in the outside answering "WORD PEER-ADDRESS" (v6: [ADDR]).

OUTSIDE_NS=$TEST_TMP/outside.ns
OUTSIDE_RUN=()

outside_setup() {
	OUTSIDE_RUN=("$@")
	touch "$OUTSIDE_NS" && "$@" unshare --net="$OUTSIDE_NS" true || return 1
	on_exit "$* umount '$OUTSIDE_NS'"
	"$@" ip link add uplink0 type veth peer name o-eth0 netns "$OUTSIDE_NS" || return 1
	"$@" sh -c 'ip addr add 198.51.100.1/24 dev uplink0 && ip link set uplink0 up &&
		{ [ ! -d /proc/sys/net/ipv6 ] || ip -6 addr add 2001:db8:5::1/64 dev uplink0 nodad; }' || return 1
	"$@" nsenter --net="$OUTSIDE_NS" sh -c 'ip link set lo up && ip link set o-eth0 up &&
		ip addr add 198.51.100.2/24 dev o-eth0 && ip route add default via 198.51.100.1 &&
		{ [ ! -d /proc/sys/net/ipv6 ] || { ip -6 addr add 2001:db8:5::2/64 dev o-eth0 nodad &&
			ip -6 route add default via 2001:db8:5::1; }; }' || return 1
	local a
	for a in ${OUTSIDE_EXTRA:-}; do
		case $a in *:*) "$@" test -d /proc/sys/net/ipv6 || continue ;; esac
		case $a in
		198.51.100.*) out ip addr add "$a/24" dev o-eth0 || return 1 ;;
		2001:db8:5::*) out ip -6 addr add "$a/64" dev o-eth0 nodad || return 1 ;;
		*:*) out ip -6 addr add "$a/128" dev o-eth0 nodad && "$@" ip -6 route add "$a/128" via 2001:db8:5::2 || return 1 ;;
		*) out ip addr add "$a/32" dev o-eth0 && "$@" ip route add "$a/32" via 198.51.100.2 || return 1 ;;
		esac
	done
}

out() { "${OUTSIDE_RUN[@]}" nsenter --net="$OUTSIDE_NS" "$@"; }

outside_serve() {
	local listen="TCP-LISTEN:$2,bind=$1"
	case $1 in *:*) listen="TCP6-LISTEN:$2,bind=[$1]" ;; esac
	"${OUTSIDE_RUN[@]}" nsenter --net="$OUTSIDE_NS" socat "$listen,fork,reuseaddr" SYSTEM:"echo $3 \$SOCAT_PEERADDR" 2>/dev/null &
	_pids+=($!)
}
