#!/bin/bash
# Rebuilding the guest image leaves existing VM agents alone (issue #9 item
# 7). An agent's disk is an overlay on a base image; the overlay and the
# domain used to name <image_dir>/base.qcow2 and its kernel, so a rebuild in
# place (what scripts/demo.sh does after an agentd change) swapped the base
# under every agent's disk. Now each agent uses a copy in the image store
# (<state_dir>/images/sha256/ID/), pinned in its domain XML (<backingStore>,
# item 5), and 'fleetctl upgrade' moves an agent to a newer image's kernel,
# initramfs and agentd without touching its disk's base. Real guests (TCG).
. "$FLEET_SRCDIR/tests/lib/common.sh"

. "$FLEET_SRCDIR/tests/lib/vmfleet.sh"
vmfleet_setup --tcg jq sqlite3 perl

IMGDIR=$STATE/images		# fleetd's image_dir: the default
cp "$IMG/manifest.json" "$IMGDIR/"
# A second agentd, different in a harmless way (a byte after the ELF's end).
AGENTD2=$TEST_TMP/agentd
cp "$AGENTD" "$AGENTD2" && printf '\n' >> "$AGENTD2"
OLD_SHA=$(sha256sum "$AGENTD" | cut -d' ' -f1)
NEW_SHA=$(sha256sum "$AGENTD2" | cut -d' ' -f1)

# guest_sums: checksums of files the agent did not write, as the guest reads them.
guest_sums() { "$FLEETCTL" exec iua --root -- sh -c 'sha256sum /bin/busybox /sbin/init /etc/passwd /usr/sbin/dropbear'; }
guest_agentd() { "$FLEETCTL" exec iua --root -- sha256sum /usr/bin/agentd | cut -d' ' -f1; }
images_json() { "$FLEETCTL" --json image ls; }
# users ID: "agent:as ..." for a stored image (IDs may be prefixes)
users() { images_json | jq -r --arg id "$1" '.images[] | select(.id | startswith($id)) | [.used_by[] | "\(.agent):\(.as)"] | join(" ")'; }

fleetd_ns_start; ok $? "fleetd starts inside the namespace"
"$FLEETCTL" create iua --backend vm --network none --health-interval 0 --restart never >/dev/null &&
	"$FLEETCTL" start iua >/dev/null
ok $? "a VM agent is created and runs"
"$FLEETCTL" exec iua -- sh -c 'echo precious > /home/agent/keep'; ok $? "a file is written on its disk"
is "$(guest_agentd)" "$OLD_SHA" "it runs the agentd it was built with"
sums_before=$(guest_sums)

# --- its own copy of the image, pinned in the domain --------------------------------------------------
ID1=$(images_json | jq -r '.current')
like "$ID1" '^[0-9a-f]{64}$' "the image it was created from is stored, and is the current one"
is "$(users "$ID1")" "iua:disk iua:boot" "image ls: the agent uses it for its disk and its boot"
STORE1=$STATE/images/sha256/$ID1
is "$(stat -c %a "$STORE1/vmlinuz")" 444 "the stored files are read-only"
backing=$(qemu-img info -U --output=json "$STATE/vms/iua/disk.qcow2" | jq -r '."backing-filename"')
is "$backing" "$STORE1/base.qcow2" "its overlay is backed by the store's copy, not image_dir's"
xml=$(virsh_ns dumpxml fleet-iua)
like "$xml" "<kernel>$STORE1/vmlinuz</kernel>" "the domain boots the store's kernel"
like "$(printf '%s\n' "$xml" | tr -d '\n' | sed 's/  */ /g')" \
	"<backingStore type='file'[^>]*> ?<format type='qcow2'/> ?<source file='$STORE1/base.qcow2'[^>]*/>" \
	"the domain XML pins the backing chain (<backingStore> with the store's base)"
xml_inactive=$(virsh_ns dumpxml --inactive fleet-iua | tr -d '\n' | sed 's/  */ /g')
like "$xml_inactive" "<backingStore type='file'> ?<format type='qcow2'/> ?<source file='$STORE1/base.qcow2'/>" \
	"the persistent definition pins it too"

# --- an agent from before the image store ------------------------------------------------------------
# Made as the old code made them: an overlay on image_dir/base.qcow2, image_dir's kernel in its
# domain, no <backingStore>, no image recorded. fleetd adopts it at start (the image now in
# image_dir, which its disk is younger than); its next boot moves it to the store's copy.
"$FLEETCTL" create iul --backend vm --network none --health-interval 0 --restart never >/dev/null
ok $? "another agent is created"
stop_fleetd; ok $? "fleetd stops"
sqlite3 "$STATE/fleet.db" "UPDATE agents SET image = NULL, boot_image = NULL WHERE name = 'iul'" &&
	qemu-img rebase -u -f qcow2 -F qcow2 -b "$IMGDIR/base.qcow2" "$STATE/vms/iul/disk.qcow2" &&
	virsh_ns dumpxml --inactive fleet-iul | sed "s|$STORE1/|$IMGDIR/|g" |
	perl -0pe 's|\s*<backingStore.*?</backingStore>||s' > "$TEST_TMP/iul.xml" &&
	virsh_ns define "$TEST_TMP/iul.xml" >/dev/null
ok $? "it is made into an agent from before the image store"
like "$(virsh_ns dumpxml --inactive fleet-iul)" "<kernel>$IMGDIR/vmlinuz</kernel>" "its domain boots image_dir's kernel"
fleetd_ns_start; ok $? "fleetd starts again"
is "$(users "$ID1")" "iua:disk iua:boot iul:disk iul:boot" "fleetd adopted it: it uses the image then in image_dir"

# --- rebuild in place, with a changed agentd --------------------------------------------------------
"$FLEET_SRCDIR/images/build-image.sh" --agentd "$AGENTD2" --dropbear "$IMAGE_DROPBEAR" --out "$IMGDIR" 2>&1 |
	sed 's/^/#   /'
ok "${PIPESTATUS[0]}" "the image is rebuilt in image_dir with a changed agentd"
grep -q "\"agentd_sha256\": \"$NEW_SHA\"" "$IMGDIR/manifest.json"; ok $? "image_dir now holds the new build"

"$FLEETCTL" restart iua >/dev/null; ok $? "the agent restarts after the rebuild (and boots)"
is "$("$FLEETCTL" exec iua -- cat /home/agent/keep)" precious "the file on its disk is still there"
is "$(guest_sums)" "$sums_before" "the rest of its disk reads as before"
is "$(guest_agentd)" "$OLD_SHA" "it still runs the agentd of its own image"

"$FLEETCTL" start iul >/dev/null; ok $? "the adopted agent starts after the rebuild (and boots)"
backing=$(qemu-img info -U --output=json "$STATE/vms/iul/disk.qcow2" | jq -r '."backing-filename"')
is "$backing" "$STORE1/base.qcow2" "its overlay was moved to the store's copy"
like "$(virsh_ns dumpxml --inactive fleet-iul)" "<kernel>$STORE1/vmlinuz</kernel>" "its domain to the store's kernel"
is "$("$FLEETCTL" exec iul --root -- sha256sum /usr/bin/agentd | cut -d' ' -f1)" "$OLD_SHA" \
	"it runs the agentd of the image it was made from"
"$FLEETCTL" rm --force iul >/dev/null; ok $? "it is removed"

# --- a new agent gets the new image; image ls shows both -------------------------------------------
"$FLEETCTL" create iub --backend vm --network none --health-interval 0 --restart never >/dev/null
ok $? "a second agent is created from the rebuilt image"
ID2=$(images_json | jq -r '.current')
like "$ID2" '^[0-9a-f]{64}$' "the rebuilt image is stored and current"
[ "$ID1" != "$ID2" ]; ok $? "it is another image than the first"
is "$(images_json | jq '.images | length')" 2 "image ls shows two images"
is "$(users "$ID1")" "iua:disk iua:boot" "the first is used by the first agent"
is "$(users "$ID2")" "iub:disk iub:boot" "the second by the second agent"
"$FLEETCTL" image ls | sed 's/^/#   /'

out=$("$FLEETCTL" image rm "${ID1:0:12}" 2>&1); rc=$?
is "$rc" 1 "image rm of an image in use is refused"
like "$out" "in use by 'iua' \(disk\)" "and says which agent uses it"
[ -s "$STORE1/base.qcow2" ]; ok $? "the image is still there"
"$FLEETCTL" rm iub >/dev/null; ok $? "the second agent is removed"
is "$(users "$ID2")" "" "its image is used by no agent now"
"$FLEETCTL" image rm "$ID2" >/dev/null; ok $? "image rm of an unused image works"
[ ! -e "$STATE/images/sha256/$ID2" ]; ok $? "it is gone from the store"
is "$(images_json | jq '.images | length')" 1 "image ls shows one image"

# --- upgrade: the new agentd and kernel, the same disk ---------------------------------------------
"$FLEETCTL" upgrade iua; ok $? "fleetctl upgrade: the agent will boot the current image"
ID3=$(images_json | jq -r '.current')
is "$ID3" "$ID2" "the same build is stored again under the same ID"
"$FLEETCTL" restart iua >/dev/null; ok $? "the upgraded agent restarts (and boots)"
is "$(guest_agentd)" "$NEW_SHA" "it runs the new image's agentd"
is "$("$FLEETCTL" exec iua -- cat /home/agent/keep)" precious "the file on its disk is still there"
like "$(virsh_ns dumpxml fleet-iua)" "<kernel>$STATE/images/sha256/$ID3/vmlinuz</kernel>" "it boots the new kernel"
backing=$(qemu-img info -U --output=json "$STATE/vms/iua/disk.qcow2" | jq -r '."backing-filename"')
is "$backing" "$STORE1/base.qcow2" "its disk keeps the base it was made on"
is "$(users "$ID1")" "iua:disk" "image ls: the first image is its disk's base"
is "$(users "$ID3")" "iua:boot" "the new one is what it boots"
"$FLEETCTL" image rm "$ID1" >/dev/null 2>&1; is $? 1 "the base of its disk cannot be removed"

"$FLEETCTL" stop iua >/dev/null
done_testing
