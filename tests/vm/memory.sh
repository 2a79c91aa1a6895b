#!/bin/bash
# The memory store of a VM agent (#12, docs/memory.md) with a real guest:
# fleetctl memory put/get/ls through agentd in the guest (as the agent
# user), export/import with the guest's libarchive, the store surviving a
# guest restart, and rollback with and without --keep-memory.
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg

A=vmem
m() { "$FLEETCTL" memory "$A" "$@"; }
ex() { "$FLEETCTL" exec "$A" "$@"; }

fleetd_ns_start; ok $? "fleetd starts inside the namespace"
"$FLEETCTL" create "$A" --backend vm --memory-quota 1 >/dev/null && "$FLEETCTL" start "$A" >/dev/null; ok $? "a VM agent runs"

printf 'remember this' | m put note; ok $? "put a value into the guest's store"
is "$(m get note)" "remember this" "get gives it back"
is "$(ex -- stat -c '%U %a' /home/agent/memory/note)" "agent 600" "it is the agent user's file, 0600, in ~/memory"
is "$("$FLEETCTL" --json memory "$A" ls | jq -r '.keys[0].key + "=" + (.keys[0].size|tostring)')" "note=13" "ls"
head -c $((2 * 1024 * 1024)) /dev/zero > "$TEST_TMP/2m"
out=$(m put big < "$TEST_TMP/2m" 2>&1); rc=$?
is "$rc" 1 "a put over the 1 MiB quota fails"
like "$out" "memory store full" "with a clear error"

m export > "$TEST_TMP/a.tar"; ok $? "export (libarchive in the guest)"
like "$(tar -tf "$TEST_TMP/a.tar")" "^note$" "the archive holds the key"
m rm note; ok $? "rm"
m import < "$TEST_TMP/a.tar"; ok $? "import it back"
is "$(m get note)" "remember this" "the value is back"
python3 -c 'import io, tarfile, sys
with tarfile.open(sys.argv[1], "w") as t:
    i = tarfile.TarInfo("link"); i.type = tarfile.SYMTYPE; i.linkname = "/etc/shadow"; t.addfile(i)' "$TEST_TMP/bad.tar"
out=$(m import < "$TEST_TMP/bad.tar" 2>&1); rc=$?
is "$rc" 1 "an archive with a symlink out is refused"
like "$out" "import refused: 'link' is a symbolic link" "and says why"

"$FLEETCTL" restart "$A" >/dev/null; ok $? "restart the guest"
is "$(m get note)" "remember this" "the value survives a guest restart"

"$FLEETCTL" snapshot "$A" s1 >/dev/null; ok $? "snapshot (full checkpoint)"
printf 'changed' | m put note
"$FLEETCTL" restore "$A" s1 >/dev/null; ok $? "restore"
is "$(m get note)" "remember this" "the restore rolled the memory back"
printf 'changed' | m put note
ex -- touch /home/agent/outside-memory
"$FLEETCTL" restore "$A" s1 --keep-memory >/dev/null; ok $? "restore --keep-memory"
is "$(m get note)" "changed" "the memory is kept"
ex -- test -e /home/agent/outside-memory; is "$?" 1 "while the rest of the guest rolled back"

done_testing
