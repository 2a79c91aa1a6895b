#!/bin/bash
# DNS for user agents with --network nat: the /etc/resolv.conf their
# sandbox shows (user_dns in fleetd.conf, user/dns.c). The host's resolver
# is often on its own loopback (systemd-resolved's 127.0.0.53), which no
# agent reaches; fleet gives the agent the host's other servers, or
# systemd-resolved's upstream ones, or the configured list. Runs in a
# network and mount namespace of its own (its own /run and resolv.conf),
# with "the outside" in one more namespace: a real DNS server (dnsmasq) on
# 198.51.100.53 that knows api.example.test, and a TCP server on
# 198.51.100.2 (TEST-NET-2: nothing leaves the test's namespaces).
. "$FLEET_SRCDIR/tests/lib/own-netns.sh"
. "$FLEET_SRCDIR/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
own_netns_ready
for t in nft ip nsenter socat dnsmasq getent; do command -v $t >/dev/null || skip_all "$t missing"; done

R=$(test_run_id) A=udns${R}-a N=udns${R}-n	# agent names of this run (two checkouts at once never collide)

# ---- the test's world: its own /run (for systemd-resolved's file), the outside with its servers ----
mount -t tmpfs -o mode=0755 tmpfs /run || fail_all "cannot mount a /run of the test's own"
. "$FLEET_SRCDIR/tests/lib/outside.sh"
OUTSIDE_EXTRA=198.51.100.53
outside_setup || fail_all "cannot make the outside namespace"
# nsenter execs the server: $! is the server itself, so the cleanup stops it (and its stdout is not the TAP pipe's)
nsenter --net="$OUTSIDE_NS" dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv --no-hosts --no-poll --user=root \
	--listen-address=198.51.100.53 --bind-interfaces --pid-file= --address=/api.example.test/198.51.100.2 \
	>"$TEST_TMP/dnsmasq.out" 2>&1 &
_pids+=($!)
outside_serve 198.51.100.2 8080 api-answer
# The host's own view: the test's resolv.conf, bound over /etc/resolv.conf in this mount namespace only.
host_resolv() { printf '%b' "$1" > "$TEST_TMP/resolv.conf"; }
host_resolv 'nameserver 198.51.100.53\n'
mount --bind "$TEST_TMP/resolv.conf" /etc/resolv.conf || fail_all "cannot bind a resolv.conf in the test's mount namespace"
for ((i = 0; i < 100; i++)); do [ "$(getent hosts api.example.test | cut -d' ' -f1)" = 198.51.100.2 ] && break; sleep 0.1; done
is "$(getent hosts api.example.test | cut -d' ' -f1)" 198.51.100.2 "the host resolves api.example.test through the outside's DNS server (control)"

FLEETD_PID=
on_exit '[ -n "$FLEETD_PID" ] && kill -TERM $FLEETD_PID; for _w in $(seq 100); do kill -0 $FLEETD_PID || break; sleep 0.1; done'
user_fleetd_setup udns
user_fleetd_start || { ok 1 "fleetd starts"; done_testing; }
"$FLEETCTL" create $A --backend user --network nat >/dev/null; ok $? "create $A --network nat"
"$FLEETCTL" create $N --backend user >/dev/null; ok $? "create $N (network none)"
in_agent() { local a=$1; shift; "$FLEETCTL" exec $a -- sh -c "$*" </dev/null 2>&1; }
lookup() { in_agent $1 'getent hosts api.example.test' | cut -d' ' -f1; }
fetch() { in_agent $1 'socat -T3 - TCP:api.example.test:8080,connect-timeout=3 </dev/null' | cut -d' ' -f1; }

# 1. auto, the host's servers are usable: the agent gets them, loopback ones left out
host_resolv 'search example.test\nnameserver 127.0.0.53\nnameserver 198.51.100.53\n'
conf=$(in_agent $A 'cat /etc/resolv.conf')
like "$conf" 'nameserver 198\.51\.100\.53' "auto: $A's resolv.conf names the host's outside server"
ok $(grep -q '127\.0\.0\.53' <<<"$conf" && echo 1 || echo 0) "auto: and not the host's loopback one"
is "$(lookup $A)" 198.51.100.2 "auto: $A resolves a name"
is "$(fetch $A)" api-answer "auto: and reaches the server by its name (a bot's API call)"
is "$(in_agent $N 'cat /etc/resolv.conf')" "$(cat /etc/resolv.conf)" "$N (network none) sees the host's file unchanged"

# 2. auto, the host's only server is systemd-resolved's stub: its upstream servers
host_resolv 'nameserver 127.0.0.53\noptions edns0\n'
is "$(lookup $A)" "" "stub only, no upstream file: $A cannot resolve (control)"
like "$(in_agent $A 'cat /etc/resolv.conf')" '# none: .*set user_dns' "and its resolv.conf says why"
grep -q 'get no DNS server' "$STATE/fleetd.log" 2>/dev/null || grep -q 'get no DNS server' "$TEST_TMP/start.err"
ok $? "fleetd's log says so once"
mkdir -p /run/systemd/resolve && printf 'nameserver 198.51.100.53\n' > /run/systemd/resolve/resolv.conf
like "$(in_agent $A 'cat /etc/resolv.conf')" "nameserver 198\.51\.100\.53" "with systemd-resolved's upstream file: $A gets its servers"
is "$(lookup $A)" 198.51.100.2 "and resolves (no fleetd restart: read at each sandbox's start)"

# 3. user_dns in fleetd.conf wins over the host's files; a loopback server is refused at start
rm -r /run/systemd
stop_fleetd; ok $? "fleetd stops"
out=$("$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$TEST_TMP/none.conf" --user-dns 127.0.0.1 2>&1)
ok $([ $? -ne 0 ]; echo $?) "user_dns with a loopback address is refused"
like "$out" "user.dns.*loopback" "and the error says why"
user_fleetd_start --user-dns 198.51.100.53; ok $? "fleetd starts with user_dns 198.51.100.53"
conf=$(in_agent $A 'cat /etc/resolv.conf')
like "$conf" 'nameserver 198\.51\.100\.53' "user_dns: $A's resolv.conf names it"
like "$conf" 'user_dns in fleetd.conf' "and says where it came from"
is "$(lookup $A)" 198.51.100.2 "user_dns: $A resolves while the host's only server is on loopback"
check "$A cannot replace its resolv.conf" -- sh -c "! '$FLEETCTL' exec $A -- sh -c 'echo nameserver 10.0.0.1 > /etc/resolv.conf' </dev/null 2>/dev/null"

"$FLEETCTL" rm --force $A >/dev/null; "$FLEETCTL" rm --force $N >/dev/null
done_testing
