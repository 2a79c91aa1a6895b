# shellcheck shell=bash
# own-netns.sh: run this test file in network and mount namespaces of its
# own, for tests whose fleetd makes NAT agents (forwarding, fleet's nftables
# tables, veths) or listens on fixed addresses: nothing of it may touch the
# host's own network. Source it FIRST, before common.sh: it re-executes the
# file under `unshare --net --mount` (as root, where unshare exists). After
# common.sh and the root check, call own_netns_ready: it skips the file when
# the re-run was impossible (a skip fails under CI=true) and brings lo up.
if [ -z "${FLEET_OWN_NETNS:-}" ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
	exec unshare --net --mount -- env FLEET_OWN_NETNS=1 bash "$0" "$@"
fi

own_netns_ready() {
	[ -n "${FLEET_OWN_NETNS:-}" ] || skip_all "unshare missing"
	ip link set lo up || fail_all "cannot bring up lo in the test's network namespace"
}
