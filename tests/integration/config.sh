#!/bin/bash
# fleetd.conf: --check-config, precedence of the command line, SIGHUP reload.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=cfg$(test_run_id)	# agent names of this run (two checkouts at once never collide)

conf=$TEST_TMP/fleetd.conf
cat > "$conf" <<CONF
# a comment
state_dir = $TEST_TMP/from-file
log_level = notice

max_body_bytes = 4096
CONF
out=$("$FLEETD" --config "$conf" --check-config); ok $? "--check-config accepts a good file"
like "$out" "state_dir = $TEST_TMP/from-file	# file" "prints the effective state_dir and where it came from"
like "$out" "socket = /run/fleet/fleetd.sock	# default" "prints defaults too"
out=$("$FLEETD" --config "$conf" --check-config --log-level debug); ok $? "options combine with the file"
like "$out" "log_level = debug	# command line" "the command line wins over the file"
for key in state_dir socket socket_group log_level log_file max_body_bytes user_uid_min user_uid_max libvirt_uri image_dir; do
	like "$out" "^$key = " "--check-config prints $key"
done

# The sample fleetd.conf (systemd/fleetd.conf.sample, installed to the doc dir) names every key
# --check-config prints, commented out at the default --help gives, and passes once uncommented.
sample=$FLEET_SRCDIR/systemd/fleetd.conf.sample
: > "$TEST_TMP/empty.conf"
keys=$("$FLEETD" --check-config --config "$TEST_TMP/empty.conf" | sed -n 's/^\([a-z0-9_]*\) = .*/\1/p')
check "--check-config prints keys" -- test "$(printf '%s\n' "$keys" | wc -l)" -ge 30
missing=""
for key in $keys; do
	grep -q "^#$key =\( \|$\)" "$sample" || missing="$missing $key"
done
is "$missing" "" "the sample fleetd.conf names every key"
wrong=""
while read -r key def; do
	grep -qxF "#$key =${def:+ $def}" "$sample" || wrong="$wrong $key"
done < <("$FLEETD" --help | sed -n "s/.*(key '\([a-z0-9_]*\)', default '\([^']*\)'.*/\1 \2/p")
is "$wrong" "" "the sample gives every key its default"
reload_sample=$(awk '/^$/ { r = 0 } /SIGHUP reloads/ { r = 1 }
	/^#[a-z0-9_]+ =( |$)/ && r { sub(/^#/, ""); sub(/ =.*/, ""); print }' "$sample" | sort)
reload_fleetd=$("$FLEETD" --help | sed -n "s/.*(key '\\([a-z0-9_]*\\)', default '[^']*', SIGHUP reloads it).*/\\1/p" | sort)
check "fleetd --help names reloadable keys" -- test -n "$reload_fleetd"
is "$reload_sample" "$reload_fleetd" "the sample says SIGHUP reloads exactly the keys fleetd reloads"
listed=$(tr '\n' ' ' < "$FLEET_SRCDIR/docs/operations.md" | sed -n 's/.*The keys SIGHUP reloads: \(.*\)\. The others.*/\1/p' |
	grep -o '`[a-z0-9_]*`' | tr -d '`' | sort)
is "$listed" "$reload_fleetd" "docs/operations.md names exactly the keys SIGHUP reloads"
# A socket_group set in the file must exist; this host need not have 'fleet': root stands in.
sed 's/^#\([a-z0-9_]* =\)/\1/; s/^socket_group = fleet$/socket_group = root/' "$sample" > "$TEST_TMP/sample.conf"
out=$("$FLEETD" --check-config --config "$TEST_TMP/sample.conf" 2>&1); ok $? "the sample, uncommented, passes --check-config"
is "$(grep -c '	# file$' <<<"$out")" "$(printf '%s\n' "$keys" | wc -l)" "and sets every key from the file"

cat > "$TEST_TMP/bad.conf" <<CONF
sokcet = /tmp/x
log_level = shouty
what is this
CONF
err=$("$FLEETD" --config "$TEST_TMP/bad.conf" --check-config 2>&1); rc=$?
is "$rc" 1 "--check-config exits 1 on errors"
like "$err" "^$TEST_TMP/bad.conf:1: unknown key 'sokcet'" "FILE:LINE for an unknown key"
like "$err" "$TEST_TMP/bad.conf:2: log_level 'shouty' must be one of" "FILE:LINE for a bad value"
like "$err" "$TEST_TMP/bad.conf:3: expected 'key = value'" "FILE:LINE for a malformed line"
err=$("$FLEETD" --config "$TEST_TMP/bad.conf" --state-dir "$TEST_TMP/never" 2>&1); is "$?" 1 "fleetd refuses to start on a bad file"
check "and created nothing" -- test ! -e "$TEST_TMP/never"
err=$("$FLEETD" --config "$TEST_TMP/missing.conf" --check-config 2>&1); is "$?" 1 "a missing --config file is an error"
like "$err" "missing.conf: cannot open: No such file or directory" "and says so"
err=$("$FLEETD" --user-uid-min 300000 --user-uid-max 200000 --check-config --config "$TEST_TMP/none.conf" 2>&1)
is "$?" 1 "an empty uid range is an error"
like "$err" "user_uid_min \(300000\) is above user_uid_max \(200000\)" "and says so"
err=$("$FLEETD" --socket-group no-such-group-x --check-config --config "$TEST_TMP/none.conf" 2>&1)
is "$?" 1 "a socket group that does not exist is an error"

# Socket group: the socket belongs to the configured group.
groupadd -f fleet-test-$$ 2>/dev/null
on_exit "groupdel fleet-test-$$"
start_fleetd grp --socket-group "fleet-test-$$" || ok 1 "fleetd starts with a socket group"
is "$(stat -c %G "$SOCK")" "fleet-test-$$" "the socket's group is the configured group"
if useradd -M -N -g "fleet-test-$$" -s /usr/sbin/nologin "fltst$$" 2>/dev/null; then
	on_exit "userdel fltst$$"
	chmod 0755 "$TEST_TMP"
	out=$(setpriv --reuid="fltst$$" --regid="fleet-test-$$" --init-groups "$FLEETCTL" -s "$SOCK" status 2>&1)
	ok $? "a member of the socket group may use fleetd"
	out=$(setpriv --reuid="fltst$$" --regid="fleet-test-$$" --init-groups "$FLEETCTL" -s "$SOCK" create $U-member --backend user 2>&1)
	is "$("$FLEETCTL" --json audit | jq -r --arg t "$U-member" '[.[] | select(.target == $t)][0].uid')" "$(id -u "fltst$$")" \
		"the audit log records the member's uid"
else
	ok 1 "useradd works"
fi
stop_fleetd

# SIGHUP: a good file applies reloadable settings; a bad file keeps the old ones.
cat > "$conf" <<CONF
max_body_bytes = 4096
CONF
start_fleetd hup --config "$conf" || ok 1 "fleetd starts with a config file"
body=$(printf '{"name":"%s","backend":"user","command":"%s"}' "$U-b" "$(head -c 3000 /dev/zero | tr '\0' x)")
code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$SOCK" -H 'Content-Type: application/json' -d "$body" http://fleet/v1/agents)
is "$code" 201 "a 3 kB body fits max_body_bytes = 4096"
echo "max_body_bytes = 2048" > "$conf"
kill -HUP "$FLEETD_PID"
for ((i = 0; i < 500; i++)); do grep -q "reload: configuration re-read" "$STATE/fleetd.log" && break; sleep 0.01; done
code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$SOCK" -H 'Content-Type: application/json' -d "${body/$U-b/$U-c}" http://fleet/v1/agents)
is "$code" 413 "after SIGHUP, max_body_bytes = 2048 applies"

printf 'max_body_bytes = 8192\nnonsense here\n' > "$conf"
kill -HUP "$FLEETD_PID"
for ((i = 0; i < 500; i++)); do grep -q "keeping the running configuration" "$STATE/fleetd.log" && break; sleep 0.01; done
like "$(cat "$STATE/fleetd.log")" "reload: $conf:2: expected 'key = value'" "a bad file on SIGHUP is logged with FILE:LINE"
like "$(cat "$STATE/fleetd.log")" "keeping the running configuration" "and the running config is kept"
code=$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$SOCK" -H 'Content-Type: application/json' -d "${body/$U-b/$U-d}" http://fleet/v1/agents)
is "$code" 413 "the old limit (2048) still applies"
check "fleetd is still running" -- "$FLEETCTL" status

printf 'log_file = /elsewhere.log\n' > "$conf"
kill -HUP "$FLEETD_PID"
for ((i = 0; i < 500; i++)); do grep -q "log_file changed" "$STATE/fleetd.log" && break; sleep 0.01; done
like "$(cat "$STATE/fleetd.log")" "log_file changed to '/elsewhere.log'; it takes effect after a restart" \
	"a setting that needs a restart says so"
check "and fleetd keeps logging where it did" -- test ! -e /elsewhere.log
stop_fleetd

done_testing
