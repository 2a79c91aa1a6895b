#!/bin/bash
# The memory store of a user agent (#12, docs/memory.md): fleetctl memory
# put/get/ls/rm through fleetd and agentd in the sandbox, a run's command
# reading and writing ~/memory, persistence over a fleetd restart and a
# stop/start, export/import round trip, hostile archives refused with
# nothing written, the quota, and rollback with and without --keep-memory.
. "$FLEET_SRCDIR/tests/lib/common.sh"
R=$(test_run_id) A=umem${R}a B=umem${R}b	# agent names of this run (two checkouts at once never collide)

[ "$(id -u)" = 0 ] || skip_all "needs root (user agents are Unix users)"
command -v python3 >/dev/null || skip_all "needs python3 (builds the hostile archives)"

user_fleetd_setup umem
user_fleetd_start; ok $? "fleetd starts"
m() { "$FLEETCTL" memory "$@"; }

"$FLEETCTL" create $A --backend user --memory-quota 2 \
	--command 'cat "$HOME/memory/question" > "$HOME/memory/answer"; echo " and more" >> "$HOME/memory/answer"' >/dev/null
ok $? "create a user agent with --memory-quota 2"
like "$("$FLEETCTL" show $A)" "memory: +store ~/memory, quota 2 MiB" "show gives the quota"
"$FLEETCTL" start $A >/dev/null; ok $? "start it"
HOME_DIR=$STATE/users/$A

# put / get / ls / rm
printf 'what is 6*7?' | m $A put question; ok $? "put a value from stdin"
is "$(m $A get question)" "what is 6*7?" "get gives it back"
# What a put killed in an earlier exec leaves behind (agentd is pid 2 in every
# sandbox's PID namespace) must not block the next put of the key.
"$FLEETCTL" exec $A -- sh -c 'for p in 1 2 3 4; do echo half > ~/memory/.put-question.$p.tmp; done'
printf 'what is 6*7?' | m $A put question; ok $? "a put succeeds next to a killed put's leftover temp files"
is "$(find "$HOME_DIR/memory" -name '.put-*' | wc -l)" 0 "and sweeps them (no live put holds their lock)"
is "$(stat -c '%U %a' "$HOME_DIR/memory/question")" "fleet-$A 600" "the file is the agent's own, 0600"
head -c 100000 /dev/urandom > "$TEST_TMP/bin"
m $A put blob < "$TEST_TMP/bin"; ok $? "put 100 kB of binary"
m $A get blob > "$TEST_TMP/bin.out"; ok $? "get it"
check "the binary value comes back byte for byte (NULs too)" -- cmp "$TEST_TMP/bin" "$TEST_TMP/bin.out"
: | m $A put empty; ok $? "put an empty value"
is "$(m $A get empty | wc -c)" 0 "an empty value is empty"
is "$("$FLEETCTL" --json memory $A ls | jq -r '[.keys[] | .key + "=" + (.size|tostring)] | join(" ")')" \
	"blob=100000 empty=0 question=12" "ls lists keys with sizes"
like "$(m $A ls)" "question +12  20[0-9-]+T" "ls shows sizes and mtimes"
m $A rm empty; ok $? "rm a key"
out=$(m $A get empty 2>&1); rc=$?
is "$rc" 1 "get of a removed key fails"
like "$out" "no key 'empty'" "and says there is no such key"
out=$(printf x | m $A put ../etc 2>&1); rc=$?
is "$rc" 2 "fleetctl refuses the key '../etc'"
out=$(curl -s --unix-socket "$SOCK" -X PUT --data-binary x "http://f/v1/agents/$A/memory/.hidden")
like "$out" '"code":"invalid"' "the API refuses a key with a leading dot"

# A run's command reads what put wrote and writes what get then sees.
"$FLEETCTL" trigger $A --wait >/dev/null 2>&1; ok $? "a run succeeds"
is "$(m $A get answer)" "what is 6*7? and more" "the run read the value and wrote a new key"

# The quota (2 MiB): agentd's put and the import refuse to go over it.
head -c $((3 * 1024 * 1024)) /dev/zero > "$TEST_TMP/3m"
out=$(m $A put big < "$TEST_TMP/3m" 2>&1); rc=$?
is "$rc" 1 "a put over the quota fails"
like "$out" "memory store full: 'big' would take it over its quota of 2097152 bytes" "with a clear error"
out=$(m $A get big 2>&1); ok $([ $? -ne 0 ] && echo 0 || echo 1) "nothing was stored"
is "$(ls -A "$HOME_DIR/memory" | grep -c '^\.put-')" 0 "no temp file left behind"
# The quota is the store's own file system (user/memfs.c): the agent's own
# writes stop at it too, with ENOSPC, and what was stored before stays.
printf keep | m $A put before-dd
out=$("$FLEETCTL" exec $A -- dd if=/dev/zero of=memory/dd bs=64k count=64 2>&1); rc=$?
ok $([ "$rc" -ne 0 ]; echo $?) "the agent's own dd of 4 MiB into ~/memory (quota 2 MiB) fails"
like "$out" "No space left on device" "  with ENOSPC"
is "$(m $A get before-dd)" keep "  and the store keeps what it held"
check "~/memory is a file system of its own (a mount point)" -- mountpoint -q "$HOME_DIR/memory"
out=$(printf x | m $A put after-dd 2>&1); rc=$?
like "$out" "memory store full.*quota" "a put through fleetd into the full store still speaks of the quota"
"$FLEETCTL" exec $A -- rm -f memory/dd
# A running agent's store grows online where the host can (CAP_SYS_RESOURCE),
# else the change is refused, saying so, and nothing changes.
out=$("$FLEETCTL" set $A --memory-quota 4 2>&1); rc=$?
if [ $rc -eq 0 ]; then
	ok 0 "set --memory-quota 4 on the running agent grows its store online"
else
	like "$out" "stop the agent first" "set --memory-quota 4 on the running agent: refused here, saying why"
	like "$("$FLEETCTL" show $A)" "quota 2 MiB" "  and the quota stays 2 MiB"
	"$FLEETCTL" stop $A >/dev/null
	"$FLEETCTL" set $A --memory-quota 4 >/dev/null; ok $? "set --memory-quota 4 on the stopped agent"
	"$FLEETCTL" start $A >/dev/null
fi
like "$("$FLEETCTL" show $A)" "quota 4 MiB" "the quota is 4 MiB"
m $A put big < "$TEST_TMP/3m"; ok $? "now 3 MiB fit"
is "$(m $A get before-dd)" keep "  and the store kept its data"
"$FLEETCTL" exec $A -- dd if=/dev/zero of=memory/dd2 bs=64k count=8 >/dev/null 2>&1
out=$("$FLEETCTL" exec $A -- dd if=/dev/zero of=memory/dd2 bs=64k count=32 2>&1)
like "$out" "No space left on device" "the agent's own writes stop at the new quota too"
"$FLEETCTL" exec $A -- rm -f memory/dd2
"$FLEETCTL" stop $A >/dev/null
out=$("$FLEETCTL" set $A --memory-quota 2 2>&1); rc=$?
ok $([ "$rc" -ne 0 ]; echo $?) "shrinking below what the store holds (3 MiB into 2) is refused"
like "$out" "holds more than 2 MiB" "  saying why"
m $A rm big >/dev/null
"$FLEETCTL" set $A --memory-quota 2 >/dev/null; ok $? "once it holds less, the stopped agent's store shrinks to 2 MiB"
"$FLEETCTL" start $A >/dev/null
is "$(m $A get before-dd)" keep "  keeping its data"
m $A rm before-dd >/dev/null

# Survives a fleetd restart and a stop/start.
stop_fleetd; ok $? "fleetd stops"
user_fleetd_start; ok $? "fleetd starts again"
is "$(m $A get question)" "what is 6*7?" "the value survives a fleetd restart"
"$FLEETCTL" stop $A >/dev/null && "$FLEETCTL" start $A >/dev/null; ok $? "stop and start the agent"
is "$(m $A get answer)" "what is 6*7? and more" "the value survives a stop/start"

# fleetd, fleet-init and agentd installed together under /tmp (as a build tree in a CI clone under
# /tmp is): every sandbox has a /tmp of its own, so agentd reaches it only through fleet-init's
# bind at /run/fleet/bin/agentd, never by its host path.
stop_fleetd; ok $? "fleetd stops"
INST=$TEST_TMP/installed
mkdir "$INST" && cp "$FLEETD" "$(dirname "$FLEETD")/fleet-init" "$AGENTD" "$INST/"; ok $? "copy the three programs under /tmp"
FLEETD=$INST/fleetd user_fleetd_start; ok $? "fleetd starts from there"
is "$(m $A get question)" "what is 6*7?" "memory get works with agentd under /tmp"
printf 'from /tmp\n' | m $A put where; ok $? "  and put"
is "$("$FLEETCTL" exec $A -- sh -c 'command -v agentd; agentd memory get where; test -e '"$INST"' || echo hidden')" \
	"$(printf '/run/fleet/bin/agentd\nfrom /tmp\nhidden')" "an agent's own \`agentd memory\` is fleetd's, though its host path is hidden"
m $A rm where >/dev/null
stop_fleetd; ok $? "fleetd stops"
user_fleetd_start; ok $? "fleetd starts again from the build tree"

# The store after a kill -9 of fleetd, and after a reboot-like loss of the
# mount with a link planted in its place: fleetd's start mounts the image
# again, on a fresh directory, never through the link.
stop_fleetd KILL; ok $? "kill -9 fleetd"
user_fleetd_start; ok $? "fleetd starts again"
is "$(m $A get question)" "what is 6*7?" "the store lost nothing"
"$FLEETCTL" stop $A >/dev/null; ok $? "stop the agent"
stop_fleetd; ok $? "stop fleetd"
umount "$HOME_DIR/memory"; ok $? "unmount the store by hand (as a reboot would)"
mkdir "$TEST_TMP/victim" && echo mine > "$TEST_TMP/victim/file"
rmdir "$HOME_DIR/memory" && ln -s "$TEST_TMP/victim" "$HOME_DIR/memory"; ok $? "plant a link at ~/memory"
user_fleetd_start; ok $? "fleetd starts"
check "~/memory is a directory again, not the link" -- test -d "$HOME_DIR/memory" -a ! -L "$HOME_DIR/memory"
check "  and the store is mounted on it" -- mountpoint -q "$HOME_DIR/memory"
check "nothing is mounted on the link's target" -- sh -c "! mountpoint -q '$TEST_TMP/victim'"
is "$(cat "$TEST_TMP/victim/file")" mine "  which is untouched"
is "$(m $A get question)" "what is 6*7?" "the store is back with its data"
"$FLEETCTL" start $A >/dev/null; ok $? "start the agent"

# Export / import round trip, into another agent: byte-identical.
"$FLEETCTL" exec $A -- sh -c 'mkdir -p ~/memory/notes && echo deep > ~/memory/notes/today.md' >/dev/null
m $A export > "$TEST_TMP/a.tar"; ok $? "export"
like "$(tar -tvf "$TEST_TMP/a.tar" | tr '\n' ' ')" "answer.* blob.* notes/today.md.* question" "the archive holds the store"
"$FLEETCTL" create $B --backend user --memory-quota 2 >/dev/null && "$FLEETCTL" start $B >/dev/null; ok $? "a second agent"
m $B import < "$TEST_TMP/a.tar"; ok $? "import into it"
m $B export > "$TEST_TMP/b.tar"; ok $? "export from it"
check "export, import, export: the archives are byte-identical" -- cmp "$TEST_TMP/a.tar" "$TEST_TMP/b.tar"
m $B get blob > "$TEST_TMP/bin.b"
check "the binary value arrived whole" -- cmp "$TEST_TMP/bin" "$TEST_TMP/bin.b"
is "$(stat -c %U "$STATE/users/$B/memory/notes/today.md")" fleet-$B "imported files are the importing agent's"

# Hostile archives: each refused, and the store unchanged.
before=$(m $B export | sha256sum)
python3 - "$TEST_TMP" <<'EOF'
import io, sys, tarfile
d = sys.argv[1]
def make(name, members):
    with tarfile.open(f"{d}/{name}.tar", "w", format=tarfile.PAX_FORMAT) as t:
        t.addfile(tarfile.TarInfo("ok.txt"), io.BytesIO(b""))
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
def reg(n, data=b"x", mode=0o600):
    i = tarfile.TarInfo(n); i.size = len(data); i.mode = mode; return (i, data)
def special(n, typ, **kw):
    i = tarfile.TarInfo(n); i.type = typ
    for k, v in kw.items(): setattr(i, k, v)
    return (i, None)
make("dotdot", [reg("../escaped")])
make("dotdot2", [reg("notes/../../escaped")])
make("absolute", [reg("/tmp/escaped")])
make("symlink", [special("link", tarfile.SYMTYPE, linkname="/etc/passwd")])
make("symlink-in", [special("link", tarfile.SYMTYPE, linkname="ok.txt")])
make("hardlink", [special("hard", tarfile.LNKTYPE, linkname="/etc/shadow")])
make("device", [special("dev", tarfile.CHRTYPE, devmajor=1, devminor=3)])
make("fifo", [special("fifo", tarfile.FIFOTYPE)])
make("setuid", [reg("suid", b"#!/bin/sh\n", 0o4755)])
make("overquota", [reg("big", b"\0" * (3 * 1024 * 1024))])
EOF
for t in dotdot dotdot2 absolute symlink symlink-in hardlink device fifo setuid overquota; do
	out=$(m $B import < "$TEST_TMP/$t.tar" 2>&1); rc=$?
	is "$rc" 1 "import of a $t archive is refused"
	like "$out" "import refused" "  and says why ($(echo "$out" | head -1 | cut -c1-120))"
done
is "$(m $B export | sha256sum)" "$before" "after every refusal the store is exactly as it was"
is "$(ls -A "$STATE/users/$B" | grep -c 'import')" 0 "no staging directory left behind"
check "nothing escaped the store" -- test ! -e "$STATE/users/escaped" -a ! -e /tmp/escaped -a ! -e "$STATE/escaped"

# Rollback: memory is part of a snapshot; --keep-memory keeps it.
"$FLEETCTL" snapshot $A s1 >/dev/null; ok $? "snapshot"
printf 'changed' | m $A put question
printf 'new' | m $A put later
"$FLEETCTL" restore $A s1 >/dev/null; ok $? "restore"
is "$(m $A get question)" "what is 6*7?" "a restore rolls the memory back"
out=$(m $A get later 2>&1); ok $([ $? -ne 0 ] && echo 0 || echo 1) "a key made after the snapshot is gone"
printf 'changed' | m $A put question
"$FLEETCTL" exec $A -- sh -c 'echo scratch > ~/work-file; echo note > ~/memory/notes/later.md' >/dev/null
"$FLEETCTL" restore $A s1 --keep-memory >/dev/null; ok $? "restore --keep-memory"
is "$(m $A get question)" "changed" "the memory is kept as it was before the restore"
is "$("$FLEETCTL" exec $A -- cat memory/notes/later.md)" note "  subdirectories too"
"$FLEETCTL" exec $A -- test -e work-file; ok $([ $? -ne 0 ] && echo 0 || echo 1) "while the rest of the home rolled back"
check "the kept archive is removed afterwards" -- test ! -e "$STATE/memory-keep/$A.tar"

# Destroy unmounts the store and removes its image.
"$FLEETCTL" rm --force $B >/dev/null; ok $? "remove the second agent"
check "its image is gone" -- test ! -e "$STATE/memfs/$B.img"
check "and nothing of it is mounted" -- sh -c "! grep -q '/users/$B/memory ' /proc/self/mounts"

done_testing
