#!/bin/bash
# fleetd's heap after large answers (api/server.c heap_policy): three GETs at once of a
# 200 MiB memory value pass 200 MiB through fleetd each; once they are
# answered fleetd's RSS must come back near where it was, not stay at their
# peak (it stayed at about 210 MB before the policy covered answers too).
# Requests bodies are held to the same in hostile-clients.sh.
. "$FLEET_SRCDIR/tests/lib/common.sh"
A=umhp$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
SLACK_KB=$((8 * 1024))	# what fleetd may keep beyond its RSS before the GETs (trimmed: about 100 kB)

user_fleetd_setup umhp
user_fleetd_start; ok $? "fleetd starts"
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$FLEETD_PID/status"; }
"$FLEETCTL" create $A --backend user --memory-quota 256 >/dev/null; ok $? "create $A with a 256 MiB store"
head -c $((200 << 20)) /dev/zero | "$FLEETCTL" memory $A put big; ok $? "put a 200 MiB value"
before=$(rss)
diag "fleetd's RSS before the GETs: $before kB"
# Three at once, so their buffers interleave with each other's and with what fleetd keeps.
for i in 1 2 3; do "$FLEETCTL" memory $A get big | wc -c > "$TEST_TMP/get$i" & done
wait
for i in 1 2 3; do is "$(cat "$TEST_TMP/get$i")" $((200 << 20)) "GET $i gave the whole value back"; done
# The trim follows the answer in the same loop pass; a status call is answered after it.
"$FLEETCTL" status >/dev/null; ok $? "fleetd answers"
after=$(rss)
diag "fleetd's RSS after the GETs: $after kB"
ok $([ "$after" -le $((before + SLACK_KB)) ] && echo 0 || echo 1) \
	"fleetd gave the answers' memory back ($after kB <= $before + $SLACK_KB kB)"
"$FLEETCTL" rm --force $A >/dev/null; ok $? "remove it"

done_testing
