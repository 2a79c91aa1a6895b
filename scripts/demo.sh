#!/bin/bash
# The main job, end to end on this machine: install what fleet needs, build
# and install it, build the guest image, start libvirtd (if it is not
# running) and fleetd, create a VM agent and a user agent, run commands in
# both, and show the fleet; roll a wrecked VM back; fire signed webhooks, the
# last ones at the two example bots (examples/wire-bots.sh). Safe to run
# again. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
STATE=/var/lib/fleet
SOCK=/run/fleet/fleetd.sock

step "Installing Debian packages"
bash scripts/deps.sh

step "Building (autotools, warnings are errors)"
bash scripts/build.sh

step "Installing into /usr/local"
make -C build install >/dev/null
export PATH=/usr/local/sbin:/usr/local/bin:$PATH

step "Building fleet's patched dropbear from Debian's source (images/README.md)"
# Offline, from the source scripts/deps.sh fetched; a no-op when up to date.
images/build-dropbear.sh --out build/images/dropbear
DROPBEAR=$PWD/build/images/dropbear/dropbear

step "Starting libvirtd"
if virsh -c qemu:///system version >/dev/null 2>&1; then
	echo "libvirtd is already running"
else
	pgrep -x virtlogd >/dev/null || virtlogd -d
	libvirtd -d
	for _ in $(seq 1 100); do
		virsh -c qemu:///system version >/dev/null 2>&1 && break
		sleep 0.1
	done
	# Not "| head -1": head exits after one line, virsh gets SIGPIPE on the
	# next, and pipefail turns that into the demo's end.
	version=$(virsh -c qemu:///system version) || { echo "libvirtd does not answer" >&2; exit 1; }
	echo "${version%%$'\n'*}"
fi

step "Starting fleetd"
if fleetctl -s "$SOCK" status >/dev/null 2>&1; then
	echo "fleetd is already running"
else
	# Detaches once its control socket is ready; logs to $STATE/fleetd.log.
	fleetd
fi
fleetctl status

step "Building the guest image from Debian packages (kernel, busybox, dropbear, agentd)"
# After fleetd started: an agent made by a fleetd from before the image
# store is adopted at start with the image then in $STATE/images, so that
# image must still be there. From then on, rebuilding in place is safe:
# every VM agent uses its own copy in the image
# store ($STATE/images/sha256/, 'fleetctl image ls'); 'fleetctl upgrade NAME'
# moves one to the new build's agentd and kernel (docs/vm-backend.md).
mkdir -p "$STATE/images"
want=$(sha256sum /usr/local/bin/agentd | cut -d' ' -f1)
want_db=$(sha256sum "$DROPBEAR" | cut -d' ' -f1)
if grep -q "\"agentd_sha256\": \"$want\"" "$STATE/images/manifest.json" 2>/dev/null &&
	grep -q "\"dropbear_sha256\": \"$want_db\"" "$STATE/images/manifest.json"; then
	echo "up to date: $STATE/images"
else
	images/build-image.sh --agentd /usr/local/bin/agentd --dropbear "$DROPBEAR" --out "$STATE/images"
fi

step "Creating agents: a VM (no network at all) and a Unix user"
for a in demo-vm demo-user; do
	fleetctl show "$a" >/dev/null 2>&1 && fleetctl rm --force "$a" >/dev/null
done
# Each agent's command is what a trigger runs: here a tiny "bot" that keeps a journal in its memory.
fleetctl create demo-vm --backend vm --memory 256 --network none --snapshot-policy before-run --snapshot-keep 3 \
	--command 'echo "triage run $FLEET_RUN_ID ($FLEET_TRIGGER)" >> ~/memory/journal; echo "runs so far: $(wc -l < ~/memory/journal)"'
fleetctl create demo-user --backend user --memory 128 \
	--command 'line="review run $FLEET_RUN_ID ($FLEET_TRIGGER${FLEET_EVENT_TYPE:+ $FLEET_EVENT_TYPE})"; echo "$line" >> ~/memory/journal; echo "$line; journal has $(wc -l < ~/memory/journal) lines"'

step "Booting demo-vm (fleetctl start returns once SSH over its control channel answers)"
t0=$SECONDS
fleetctl start demo-vm
echo "booted in $((SECONDS - t0)) s"

step "Running commands in each agent's own environment"
echo "$ fleetctl exec demo-vm -- sh -c 'id; uname -r; echo remembered > ~/memory/note'"
fleetctl exec demo-vm -- sh -c 'id; uname -r; echo remembered > ~/memory/note'
echo "$ fleetctl exec demo-user -- sh -c 'id; echo \$HOME; ls /proc | grep -c ^[0-9]'"
fleetctl exec demo-user -- sh -c 'id; echo $HOME; echo "processes visible: $(ls /proc | grep -c "^[0-9]")"'
echo "$ echo 'stdin works' | fleetctl exec demo-vm -- cat"
echo 'stdin works' | fleetctl exec demo-vm -- cat

step "Triggers: each agent runs its own command (demo-vm takes a snapshot first: --snapshot-policy before-run)"
echo "$ fleetctl trigger demo-vm --wait"
fleetctl trigger demo-vm --wait
echo "$ fleetctl trigger demo-user --wait      # demo-user is stopped: the run starts it"
fleetctl trigger demo-user --wait
fleetctl trigger demo-vm --wait >/dev/null 2>&1
fleetctl runs demo-vm
fleetctl snapshots demo-vm

step "The fleet, as fleet and libvirt see it"
fleetctl list
echo
virsh -c qemu:///system list --all

step "Persistence: restart the VM, the file is still there"
fleetctl restart demo-vm >/dev/null
fleetctl exec demo-vm -- cat /home/agent/memory/note

step "The rescue: a good snapshot, a deliberately broken guest, the automatic rollback"
fleetctl set demo-vm --auto-rollback on --health-interval 5 >/dev/null
fleetctl snapshot demo-vm known-good --note "before the accident"
fleetctl snapshots demo-vm
echo "$ fleetctl exec demo-vm --root -- rm -rf /usr /bin /sbin    # the agent wrecks its machine"
fleetctl exec demo-vm --root -- sh -c 'rm -rf /usr /bin /sbin' >/dev/null 2>&1 || true
fleetctl exec demo-vm -- ls >/dev/null 2>&1 || echo "(commands no longer run in it)"
printf 'waiting for the health check to fail and fleet to roll back'
for _ in $(seq 1 120); do
	fleetctl show demo-vm | grep -q "rollback: .*restored 'known-good'" &&
		fleetctl show demo-vm | grep -q "^state: *running" && break
	printf '.'
	sleep 2
done
echo
fleetctl show demo-vm | grep -E "^(state|health|rollback):"
echo "$ fleetctl exec demo-vm -- cat ~/memory/note"
fleetctl exec demo-vm -- cat /home/agent/memory/note

step "Bad input is refused and changes nothing"
fleetctl create 'Bad/Name' || true
curl -s --unix-socket "$SOCK" -H 'Content-Type: application/json' \
	-d '{"name":"x","memory_mib":"lots"}' http://fleet/v1/agents | jq -c .

step "A signed webhook runs an agent: GitHub's form, sent with curl to fleet's listener"
# fleetd serves webhooks on hooks_listen (default 127.0.0.1:8470, loopback
# only) through an unprivileged child process; it answers 202 only once the
# delivery and its run are on disk (docs/webhooks.md). A real sender reaches
# it through a TLS proxy or tunnel and gets the URL and secret pasted in.
listen=$(fleetctl --json status | jq -r '.hooks.listen // empty')
fleetctl status | grep '^webhooks:'
[ -n "$listen" ] || { echo "fleetd's webhook listener is not up" >&2; exit 1; }
echo "$ fleetctl hook add demo-user --source github --route demo-github --events push --generate"
hook=$(fleetctl hook add demo-user --source github --route demo-github --events push --generate)
echo "$hook"
secret=$(sed -n 's/^secret (shown once; give it to the sender): //p' <<<"$hook")
body='{"ref":"refs/heads/main","head_commit":{"id":"59b20b8d","message":"Fix the flaky test"},"pusher":{"name":"octocat"}}'
delivery=$(cat /proc/sys/kernel/random/uuid)
# What GitHub sends: the body's HMAC-SHA256 under the secret, a delivery id, the event type.
sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$secret" -r | cut -d' ' -f1)
echo "$ curl -H 'X-GitHub-Event: push' -H 'X-GitHub-Delivery: $delivery' -H 'X-Hub-Signature-256: sha256=${sig:0:12}...' \\"
echo "       -H 'Content-Type: application/json' --data-binary '$body' http://$listen/hooks/demo-github"
curl -sS --max-time 60 -w ' (HTTP %{http_code})\n' -H 'Content-Type: application/json' -H 'X-GitHub-Event: push' \
	-H "X-GitHub-Delivery: $delivery" -H "X-Hub-Signature-256: sha256=$sig" \
	--data-binary "$body" "http://$listen/hooks/demo-github"
echo "$ curl ... (the same body, a wrong signature)"
curl -sS --max-time 60 -w ' (HTTP %{http_code})\n' -H 'Content-Type: application/json' -H 'X-GitHub-Event: push' \
	-H "X-GitHub-Delivery: $(cat /proc/sys/kernel/random/uuid)" -H "X-Hub-Signature-256: sha256=${sig//?/0}" \
	--data-binary "$body" "http://$listen/hooks/demo-github"
echo "$ fleetctl events --route demo-github"
fleetctl events --route demo-github
run=$(fleetctl --json events --route demo-github --limit 1 | jq -r '.[0].runs[0]')
echo "$ fleetctl logs demo-user $run -f      # waits for the run to end"
fleetctl logs demo-user "$run" -f
fleetctl runs demo-user

step "Two example bots, each with its own secret, memory and webhook route (examples/)"
# examples/triage-bot (DataDog alerts) and examples/review-bot (GitHub pull
# requests) as user agents, set up as their READMEs say; one signed webhook
# fired at each; their runs, logs and memory; and each failing to read the
# other's memory or secret. Their `agentd` is fleetd's, which every user
# agent's sandbox shows at /run/fleet/bin/agentd, first on its PATH.
bash examples/wire-bots.sh

step "Audit log"
fleetctl audit --limit 12

cat <<MSG

fleetd keeps running (pid $(head -1 $STATE/fleetd.lock)) and so do the agents.
Webhooks: $(fleetctl status | grep '^webhooks:' || echo 'webhooks: ?') (docs/webhooks.md: what to give each sender).
The example bots are demo-triage and demo-review (examples/*/README.md: how to adapt them).
Stop the VM with 'fleetctl stop demo-vm'; stop fleetd with: kill \$(head -1 $STATE/fleetd.lock)
MSG
