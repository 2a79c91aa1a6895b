#!/bin/bash
# fleetctl backup and fleetd --restore-from (#14), with user agents and a
# real fleetd: two agents with memory keys, a secret, a webhook route and a
# schedule are backed up (passphrase on stdin); the directory's modes and
# manifest are checked; fleetd is stopped, its state dir wiped and the
# agents' Unix users removed; a wrong passphrase, a tampered file and a
# backup without its manifest are refused with the state dir untouched;
# then the restore (with other uids) brings the agents back with their
# homes, memory and secrets: a run sees its secret, the route takes a
# delivery signed with the old secret, the schedule is there. A symlink an
# agent planted towards a root-only host file comes back as a symlink,
# and the backup holds none of that file's content.
. "$FLEET_SRCDIR/tests/lib/common.sh"
U=bkp$(test_run_id)	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
for t in jq curl openssl tar sha256sum; do command -v $t >/dev/null || skip_all "$t not installed"; done

HUSER=bkp-$$	# the listener's user, of this run alone
_bkp_cleanup() {
	local i
	[ -n "$FLEETD_PID" ] && kill -TERM "$FLEETD_PID" 2>/dev/null
	for ((i = 0; i < 100; i++)); do kill -0 "$FLEETD_PID" 2>/dev/null || break; sleep 0.1; done
	sleep 0.3
	userdel "$HUSER" 2>/dev/null
	groupdel "$HUSER" 2>/dev/null
}
on_exit _bkp_cleanup
# A root-only host file an agent points a symlink at: the backup must not hold its content.
HOSTFILE=$(mktemp /var/lib/bkp-hostfile.XXXXXX); on_exit "rm -f '$HOSTFILE'"
HOSTSECRET="root-only-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
echo "$HOSTSECRET" > "$HOSTFILE"; chmod 0600 "$HOSTFILE"

user_fleetd_setup bkp
hooks() { "$FLEETCTL" --json status | jq -r ".hooks.$1"; }
wait_up() {
	local deadline=$((SECONDS + 60))
	until [ "$(hooks state)" = up ]; do [ $SECONDS -ge $deadline ] && return 1; sleep 0.2; done
}
HOOKSECRET=bkp-github-secret-0123456789
deliver() {	# deliver ID: a signed GitHub push to route bkp-gh; prints "BODY STATUS"
	local body='{"ref":"refs/heads/main"}' sig port
	port=$(hooks listen); port=${port##*:}
	sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$HOOKSECRET" | sed 's/^.*= *//')
	curl -sS -X POST -H 'Content-Type: application/json' -H 'X-GitHub-Event: push' \
		-H "X-GitHub-Delivery: $1" -H "X-Hub-Signature-256: sha256=$sig" --data-binary "$body" \
		-w ' %{http_code}' "http://127.0.0.1:$port/hooks/bkp-gh"
}
LISTEN=(--hooks-listen 127.0.0.1:0 --hooks-user "$HUSER")

user_fleetd_start "${LISTEN[@]}"; ok $? "fleetd starts"
wait_up; ok $? "its webhook listener is up"
"$FLEETCTL" create $U-a --backend user --autostart on --command 'echo "TOKEN=${TOKEN:-unset}"' >/dev/null
ok $? "create agent $U-a (autostart on)"
"$FLEETCTL" create $U-b --backend user --command 'cat' >/dev/null; ok $? "create agent $U-b"
"$FLEETCTL" start $U-a >/dev/null && "$FLEETCTL" start $U-b >/dev/null; ok $? "start both"
printf 'alpha value' | "$FLEETCTL" memory $U-a put note; ok $? "memory put $U-a note"
printf 'beta value' | "$FLEETCTL" memory $U-b put plan; ok $? "memory put $U-b plan"
TOKEN="tok-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf '%s' "$TOKEN" | "$FLEETCTL" secret set $U-a TOKEN >/dev/null; ok $? "secret set $U-a TOKEN"
printf '%s\n' "$HOOKSECRET" | "$FLEETCTL" hook add $U-b --source github --route bkp-gh >/dev/null
ok $? "hook add $U-b (github route bkp-gh)"
"$FLEETCTL" schedule add $U-a '17 3 * * *' >/dev/null; ok $? "schedule add $U-a"
"$FLEETCTL" exec $U-a -- sh -c "echo home-data > ~/work.txt && mkdir -p ~/d && echo deep > ~/d/f && ln -s '$HOSTFILE' ~/host-link && echo x > ~/locked && chmod 000 ~/locked"
ok $? "$U-a writes files in its home and plants a symlink to a root-only host file"
"$FLEETCTL" stop $U-b >/dev/null; ok $? "$U-b is stopped when the backup is made"
"$FLEETCTL" snapshot $U-a s1 >/dev/null; ok $? "snapshot $U-a s1"
"$FLEETCTL" exec $U-a -- sh -c 'echo after > ~/later.txt'; ok $? "$U-a writes a file after the snapshot"
OLD_UID=$(id -u fleet-$U-a)
OLD_MODE=$(stat -c %a "$STATE/users/$U-a/work.txt")

# --- backup: refusals first ---
B=$TEST_TMP/backup
out=$(: | "$FLEETCTL" backup "$B" 2>&1); is $? 2 "backup without a passphrase on stdin is a usage error"
like "$out" "no passphrase" "and says so"
out=$(echo pass | "$FLEETCTL" backup relative/dir 2>&1); is $? 2 "a relative DIR is a usage error"
out=$(api POST /v1/backup "{\"dir\": \"$TEST_TMP/api\", \"passphrase\": \"\"}"); is "${out##* }" 400 "the API refuses an empty passphrase (400)"
out=$(api POST /v1/backup "{\"dir\": \"relative\", \"passphrase\": \"p\"}"); is "${out##* }" 400 "and a relative dir"
ok "$([ ! -e "$TEST_TMP/api" ] && echo 0 || echo 1)" "making nothing"
mkdir "$TEST_TMP/full" && touch "$TEST_TMP/full/x"
out=$(echo pass | "$FLEETCTL" backup "$TEST_TMP/full" 2>&1); is $? 1 "a DIR that exists and is not empty is refused"
like "$out" "not empty" "and says so"
ln -s "$TEST_TMP/full" "$TEST_TMP/link"
out=$(echo pass | "$FLEETCTL" backup "$TEST_TMP/link" 2>&1); is $? 1 "a DIR that is a symlink is refused"
is "$(ls "$TEST_TMP/full")" "x" "and nothing was written through it"
is "$(ls "$B" 2>&1 | grep -c 'No such')" 1 "a refused backup made no directory"

# --- backup ---
out=$(printf 'correct horse\n' | "$FLEETCTL" backup "$B" --with-disks); ok $? "fleetctl backup DIR --with-disks (passphrase on stdin)"
like "$out" "backup of 2 agent\(s\) in $B: 5 file\(s\)" "it says what it copied"
is "$(stat -c '%a %u' "$B")" "700 0" "DIR is 0700 root"
is "$(stat -c '%a %u' "$B"/* | sort -u)" "600 0" "every file in it is 0600 root"
M=$B/manifest.json
is "$(jq -r '.format, .schema_version > 0, (.files | map(.name) | sort | join(","))' "$M" | paste -sd' ')" \
	"1 true fleet.db,home-$U-a.tar,home-$U-b.tar,secret.key.enc,snap-$U-a@s1.tar" \
	"the manifest: format 1, a schema version, every file"
is "$(jq -r '.agents | map(.name + ":" + .backend + ":" + (.copied | sort | join("+"))) | join(" ")' "$M")" \
	"$U-a:user:home+memory+snapshots $U-b:user:home+memory" "and each agent with what was copied"
bad=0
for n in $(jq -r '.files[].name' "$M"); do
	[ "$(sha256sum < "$B/$n" | cut -d' ' -f1)" = "$(jq -r --arg n "$n" '.files[] | select(.name == $n) | .sha256' "$M")" ] || bad=1
	[ "$(stat -c %s "$B/$n")" = "$(jq -r --arg n "$n" '.files[] | select(.name == $n) | .size' "$M")" ] || bad=1
done
ok $bad "each file's size and SHA-256 are the manifest's"
grep -qaF "$TOKEN" "$B"/*; is $? 1 "the secret's value is in no file of the backup (sealed)"
grep -qaF "$HOSTSECRET" "$B"/*; is $? 1 "the root-only file the symlink points at is not in the backup"
is "$(tar -tf "$B/snap-$U-a@s1.tar" | grep -c later.txt)" 0 "the snapshot's archive is the home as it was then"
is "$(tar -xOf "$B/snap-$U-a@s1.tar" ./work.txt)" "home-data" "with its files"
like "$(tar -tvf "$B/home-$U-a.tar" ./host-link)" "^l.* \./host-link -> $HOSTFILE" "the symlink is in it as a symlink"
is "$(tar -xOf "$B/home-$U-a.tar" ./memory/note)" "alpha value" "$U-a's memory store is in its home's archive"
is "$(tar -tf "$B/home-$U-a.tar" | grep -c locked)" 0 "a file the agent made unreadable to itself is left out, the backup done"
is "$(jq -r --arg b "$B" '.[] | select(.action == "backup.create" and .target == $b) | .outcome' <<<"$("$FLEETCTL" --json audit)")" \
	"ok" "the audit log has the backup (and the refusals)"
grep -qF "correct horse" "$STATE/fleetd.log"; is $? 1 "the passphrase is not in fleetd's log"

# --- wipe: stop everything, remove the users, empty the state dir ---
"$FLEETCTL" stop $U-a >/dev/null; "$FLEETCTL" stop $U-b >/dev/null
stop_fleetd; ok $? "fleetd stops"
_remove_agents
_umount_under "$STATE"
rm -rf "${STATE:?}"/*
getent passwd fleet-$U-a fleet-$U-b >/dev/null; is $? 2 "the agents' Unix users are gone"
is "$(ls -A "$STATE")" "" "the state dir is empty"

restore() {	# restore DIR PASSPHRASE [ARGS...]: fleetd --restore-from, detached, with other uids
	local dir=$1 pass=$2; shift 2
	printf '%s\n' "$pass" | "$FLEETD" --state-dir "$STATE" --socket "$SOCK" --config "$TEST_TMP/none.conf" \
		--user-uid-min "$((_uid_base + 500))" --user-uid-max "$((_uid_base + 999))" --restore-from "$dir" "$@" \
		2>"$TEST_TMP/restore.err"
}
out=$(restore "$B" "wrong horse"); is $? 1 "a wrong passphrase is refused"
like "$(cat "$TEST_TMP/restore.err")" "wrong passphrase" "saying so"
is "$(ls -A "$STATE")" "" "and the state dir is untouched"
cp -a "$B" "$TEST_TMP/tampered"
printf 'X' | dd of="$TEST_TMP/tampered/home-$U-b.tar" bs=1 seek=700 conv=notrunc 2>/dev/null
restore "$TEST_TMP/tampered" "correct horse"; is $? 1 "a backup with a changed file is refused"
like "$(cat "$TEST_TMP/restore.err")" "home-$U-b.tar of the backup does not match its manifest" "naming the file"
is "$(ls -A "$STATE")" "" "and the state dir is untouched"
cp -a "$B" "$TEST_TMP/partial"; rm "$TEST_TMP/partial/manifest.json"
restore "$TEST_TMP/partial" "correct horse"; is $? 1 "a backup without its manifest is refused"
like "$(cat "$TEST_TMP/restore.err")" "incomplete" "as incomplete"

# --- restore ---
restore "$B" "correct horse" "${LISTEN[@]}"; ok $? "fleetd --restore-from DIR restores and starts"
FLEETD_PID=$(head -1 "$STATE/fleetd.lock"); _pids+=("$FLEETD_PID"); _sockets+=("$SOCK")
like "$(cat "$STATE/fleetd.log")" "restore: agent '$U-a' \(user\) restored with its home" "its log says what it restored"
is "$(stat -c '%a %s' "$STATE/secret.key")" "400 32" "the host key is back, 0400"
is "$("$FLEETCTL" --json list | jq -r 'map(.name) | join(" ")')" "$U-a $U-b" "both agents are listed"
NEW_UID=$(id -u fleet-$U-a); ok $? "$U-a has its Unix user again"
ok "$([ "$NEW_UID" != "$OLD_UID" ] && echo 0 || echo 1)" "with another uid ($OLD_UID -> $NEW_UID)"
H=$STATE/users/$U-a
is "$(stat -c '%u %a' "$H/work.txt") $(cat "$H/work.txt")" "$NEW_UID $OLD_MODE home-data" "its files are back with their modes, the new uid's"
is "$(cat "$H/d/f")" "deep" "directories too"
is "$(stat -c %u "$H/memory/note")" "$NEW_UID" "its memory store's files are the new uid's"
ok "$([ -L "$H/host-link" ] && [ "$(readlink "$H/host-link")" = "$HOSTFILE" ] && echo 0 || echo 1)" \
	"the planted symlink came back as a symlink"
# autostart: a fresh state dir has no boot id, so fleetd starts agents with autostart on.
for ((i = 0; i < 300; i++)); do [ "$("$FLEETCTL" --json show $U-a | jq -r .state)" = running ] && break; sleep 0.2; done
is "$("$FLEETCTL" --json show $U-a | jq -r .state)" running "$U-a (autostart on) is started"
is "$("$FLEETCTL" --json show $U-b | jq -r .state)" stopped "$U-b (autostart off) stays stopped"
"$FLEETCTL" start $U-b >/dev/null; ok $? "start $U-b"
is "$("$FLEETCTL" memory $U-a get note)" "alpha value" "memory get on $U-a returns its value"
is "$("$FLEETCTL" memory $U-b get plan)" "beta value" "memory get on $U-b too"
out=$("$FLEETCTL" trigger $U-a --wait 2>/dev/null); ok $? "a run of $U-a"
is "$out" "TOKEN=[secret TOKEN]" "sees its secret (the run log shows it redacted)"
is "$("$FLEETCTL" --json schedule ls $U-a | jq -r '.[].cron')" "17 3 * * *" "the schedule is there"
wait_up; ok $? "the webhook listener is up"
out=$(deliver bkp-after-restore-1); is "${out##* }" 202 "the route accepts a delivery signed with the old secret"
id=$("$FLEETCTL" --json events --route bkp-gh | jq -r '.[0].runs[0]')
is "$(run_wait $U-b "$id")" succeeded "its run of $U-b succeeds"
is "$("$FLEETCTL" logs $U-b "$id" | jq -r .body)" '{"ref":"refs/heads/main"}' "with the delivery on its stdin"

# The snapshot came back too, with the new uid's files.
is "$("$FLEETCTL" --json snapshots $U-a | jq -r 'map(.name) | join(" ")')" "s1" "$U-a's snapshot s1 is listed"
"$FLEETCTL" stop $U-a >/dev/null && "$FLEETCTL" restore $U-a s1 >/dev/null; ok $? "restore $U-a s1"
ok "$([ ! -e "$H/later.txt" ] && echo 0 || echo 1)" "the home is as it was at the snapshot"
is "$(stat -c %u "$H/work.txt") $(cat "$H/work.txt")" "$NEW_UID home-data" "its files the new uid's"
is "$("$FLEETCTL" memory $U-a get note)" "alpha value" "its memory store too"
like "$("$FLEETD" --help)" "--restore-from DIR" "fleetd --help documents --restore-from"

# A state dir with a database is refused.
restore "$B" "correct horse"; is $? 1 "--restore-from onto a state dir with a database is refused"
like "$(cat "$TEST_TMP/restore.err")" "fleet.db exists" "saying so"

# A VM agent's record while the vm backend is unavailable (its vms/ dir cannot be made: a dangling
# link is in the way): --with-disks cannot copy its disks and says so (503), nothing is written,
# fleetd lives on (it once followed a NULL backend there), and a backup without disks still works.
# (A second fleetd beside the restored one, which the cleanup removes agents through.)
RESTORED_PID=$FLEETD_PID RESTORED_SOCK=$SOCK RESTORED_STATE=$STATE
NOVIRT="qemu+unix:///system?socket=$TEST_TMP/no-libvirtd.sock"
start_fleetd novm --libvirt-uri "$NOVIRT"; ok $? "a fleetd with a libvirt nothing answers"
stop_fleetd; ok $? "it stops, its database made"
# The record of a VM agent provisioned before the backend broke (a real one needs libvirt and a
# guest image, and would not make the backend unavailable).
sqlite3 "$STATE/fleet.db" "INSERT INTO agents (name, backend, state, memory_mib, vcpus, disk_gib, created_at, updated_at)
	VALUES ('bkp-vm', 'vm', 'stopped', 256, 1, 2, strftime('%s'), strftime('%s'))"; ok $? "a stopped vm agent's record"
rm -rf "$STATE/vms" && ln -s "$TEST_TMP/nowhere" "$STATE/vms"
start_fleetd novm --libvirt-uri "$NOVIRT"; ok $? "fleetd starts again, its vm backend unavailable"
like "$("$FLEETCTL" --json status | jq -r .backends.vm)" "unavailable" "status says the vm backend is unavailable"
out=$(api POST /v1/backup "{\"dir\": \"$TEST_TMP/bkp-novm\", \"passphrase\": \"x\", \"with_disks\": true}")
is "${out##* }" 503 "curl: backup with_disks answers 503"
like "$(jq -r .error <<<"${out% *}")" \
	"agent 'bkp-vm': the vm backend is unavailable .*: its disks cannot be copied" "naming the agent and why"
ok $([ ! -e "$TEST_TMP/bkp-novm" ] && echo 0 || echo 1) "nothing was written"
out=$(printf 'x\n' | "$FLEETCTL" backup "$TEST_TMP/bkp-novm2" --with-disks 2>&1); is $? 1 "fleetctl backup --with-disks: exit 1"
like "$out" "the vm backend is unavailable" "and says why"
ok $(kill -0 "$FLEETD_PID" 2>/dev/null; echo $?) "fleetd lives on"
printf 'x\n' | "$FLEETCTL" backup "$TEST_TMP/bkp-novm3" >/dev/null; ok $? "a backup without disks works"
is "$(jq -r '.agents[] | select(.name == "bkp-vm") | .copied | length' "$TEST_TMP/bkp-novm3/manifest.json")" 0 \
	"with the vm agent's record only"
"$FLEETCTL" rm --force bkp-vm >/dev/null 2>&1
stop_fleetd; ok $? "that fleetd stops"
FLEETD_PID=$RESTORED_PID SOCK=$RESTORED_SOCK STATE=$RESTORED_STATE FLEET_SOCKET=$RESTORED_SOCK

done_testing

