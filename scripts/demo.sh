#!/bin/bash
# The main job, end to end on this machine: install what fleet needs, build
# and install it, start fleetd (as the systemd unit would), create agents and
# show them. Safe to run again. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "Installing Debian packages"
bash scripts/deps.sh

step "Building (autotools, warnings are errors)"
bash scripts/build.sh

step "Installing into /usr/local"
make -C build install >/dev/null
export PATH=/usr/local/sbin:/usr/local/bin:$PATH

SOCK=/run/fleet/fleetd.sock
step "Starting fleetd"
if fleetctl -s "$SOCK" status >/dev/null 2>&1; then
	echo "fleetd is already running"
else
	# Detaches once its control socket is ready; logs to /var/lib/fleet/fleetd.log.
	fleetd
fi
fleetctl status

step "Creating agents"
for a in demo-triage demo-review; do
	fleetctl show "$a" >/dev/null 2>&1 && fleetctl rm --force "$a" >/dev/null
done
fleetctl create demo-triage --backend vm --memory 256 --command 'agentd run triage'
fleetctl create demo-review --backend user --command 'agentd run review'

step "The fleet"
fleetctl list
echo
fleetctl show demo-triage

step "The control API, straight from curl"
curl -s --unix-socket "$SOCK" http://fleet/v1/agents/demo-review | jq .

step "Bad input is refused and changes nothing"
fleetctl create 'Bad/Name' || true
curl -s --unix-socket "$SOCK" -H 'Content-Type: application/json' \
	-d '{"name":"x","memory_mib":"lots"}' http://fleet/v1/agents | jq -c .

step "Audit log"
fleetctl audit --limit 10

cat <<MSG

fleetd keeps running (pid $(head -1 /var/lib/fleet/fleetd.lock)); stop it with: kill \$(head -1 /var/lib/fleet/fleetd.lock)
MSG
