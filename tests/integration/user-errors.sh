#!/bin/bash
# Bad input for user agents through fleetctl: names taken by system users or
# groups, names too long for a user name, an existing home, an exhausted uid
# range. Each is refused with a clear message, and nothing is half-created:
# passwd, group, homes and the agent list are checked after every failure.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=uerr$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"

UMIN=$((4600000 + ($$ % 500) * 100)); UMAX=$((UMIN + 1))	# room for two agents only
NAMES="$U-a $U-b $U-c $U-pre $U-grp $U-home uerr-abcdefghijklmnopqrstu"
cleanup_agents() {
	for n in $NAMES; do "$FLEETCTL" rm --force $n >/dev/null 2>&1; done
	for n in $NAMES; do userdel fleet-$n 2>/dev/null; groupdel fleet-$n 2>/dev/null; done
}
on_exit cleanup_agents

start_fleetd uerr --user-uid-min $UMIN --user-uid-max $UMAX || { ok 1 "fleetd starts"; done_testing; }
status=$(api GET /v1/status)
if ! printf '%s' "${status% *}" | jq -e '.. | objects | select(has("user")) | .user | test("^available")' >/dev/null 2>&1; then
	skip_all "this fleetd has no user backend yet"
fi

nothing_of() {	# nothing_of NAME DESC: no user, group, home or agent record
	local n=$1
	getent passwd fleet-$n >/dev/null; is "$?" 2 "$2: no user fleet-$n"
	getent group fleet-$n >/dev/null; is "$?" 2 "$2: no group fleet-$n"
	[ -e "$STATE/users/$n" ]; is "$?" 1 "$2: no home"
	"$FLEETCTL" show $n >/dev/null 2>&1; is "$?" 1 "$2: no agent record"
}

# A system user that already has the name.
useradd --system -M -s /usr/sbin/nologin fleet-$U-pre
before=$(getent passwd fleet-$U-pre)
err=$("$FLEETCTL" create $U-pre --backend user 2>&1); is "$?" 1 "create over an existing system user fails"
like "$err" "system user 'fleet-$U-pre' already exists" "and names the user"
is "$(getent passwd fleet-$U-pre)" "$before" "the existing user is untouched"
[ -e "$STATE/users/$U-pre" ]; is "$?" 1 "no home was made"
"$FLEETCTL" show $U-pre >/dev/null 2>&1; is "$?" 1 "no agent record"
userdel fleet-$U-pre

# A group that already has the name.
groupadd fleet-$U-grp
err=$("$FLEETCTL" create $U-grp --backend user 2>&1); is "$?" 1 "create over an existing group fails"
like "$err" "group 'fleet-$U-grp' already exists" "and names the group"
getent passwd fleet-$U-grp >/dev/null; is "$?" 2 "no user was made"
getent group fleet-$U-grp >/dev/null; ok $? "the existing group is untouched"
groupdel fleet-$U-grp

# A name whose user name would not fit (fleet- + 27 > 32 characters).
err=$("$FLEETCTL" create uerr-abcdefghijklmnopqrstuv --backend user 2>&1); is "$?" 1 "a name too long for a user agent fails"
like "$err" "too long for a user agent" "and says why"
nothing_of uerr-abcdefghijklmnopqrstuv "too long"

# A home that already exists.
mkdir -p "$STATE/users"; mkdir "$STATE/users/$U-home"; echo keep > "$STATE/users/$U-home/file"
err=$("$FLEETCTL" create $U-home --backend user 2>&1); is "$?" 1 "create over an existing home fails"
like "$err" "home .*/users/$U-home already exists" "and names the home"
getent passwd fleet-$U-home >/dev/null; is "$?" 2 "no user was made"
getent group fleet-$U-home >/dev/null; is "$?" 2 "no group was made"
is "$(cat "$STATE/users/$U-home/file")" "keep" "the existing home is untouched"
rm -rf "$STATE/users/$U-home"

# The uid range holds two agents; the third is refused.
"$FLEETCTL" create $U-a --backend user >/dev/null 2>&1; ok $? "first agent in a range of two"
"$FLEETCTL" create $U-b --backend user >/dev/null 2>&1; ok $? "second agent"
err=$("$FLEETCTL" create $U-c --backend user 2>&1); is "$?" 1 "third agent: range exhausted"
like "$err" "no free uid.*$UMIN\.\.$UMAX" "the message names the range"
nothing_of $U-c "range exhausted"
"$FLEETCTL" rm $U-a >/dev/null 2>&1; ok $? "remove one"
# A freed uid is never handed out again: a new agent must not inherit what the old one left on the host.
err=$("$FLEETCTL" create $U-c --backend user 2>&1); is "$?" 1 "the third still does not fit: the freed uid is not reused"
like "$err" "never handed out again" "the message says why"
nothing_of $U-c "freed uid not reused"

# A second create of the same agent name is the API's 409; the user stays intact.
err=$("$FLEETCTL" create $U-b --backend user 2>&1); is "$?" 1 "creating an existing agent fails"
getent passwd fleet-$U-b >/dev/null; ok $? "and does not remove the first one's user"

for n in $U-b; do "$FLEETCTL" rm $n >/dev/null 2>&1; ok $? "rm $n"; nothing_of $n "after rm"; done

done_testing
