#!/bin/bash
# Install every Debian package fleet needs to build, test and run its demo,
# then fetch the Debian source of the installed dropbear (fleet builds a
# patched dropbear from it: images/README.md) and curl (fleetctl's HTTP-only
# libcurl: scripts/build-libcurl-min.sh). One list, used by the
# README's commands and by .ci/run. This is the only step of fleet that
# downloads anything; tests, benchmarks and the demo never do.
set -euo pipefail

PACKAGES=(
	# build
	autoconf automake make gcc pkg-config
	libvirt-dev libssh2-1-dev libevent-dev libsqlite3-dev libssl-dev libjansson-dev
	libarchive-dev libyaml-dev libxml2-dev
	# fleetctl's HTTP to fleetd's socket
	libcurl4-openssl-dev
	# run: libvirt + QEMU for VM agents, the guest image's ingredients
	libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils
	linux-image-amd64 busybox-static dropbear-bin e2fsprogs cpio dnsmasq-base iptables
	# fleet's patched dropbear: Debian's source package (apt-get source, checked
	# with the archive keyring) and what building its server needs
	dpkg-dev debian-archive-keyring libtomcrypt-dev libtommath-dev zlib1g-dev
	# user agents
	passwd util-linux debootstrap kmod
	# user agents' --network nat: namespaces and veth pairs (ip), fleet's firewall rules (nft)
	iproute2 nftables
	# tests and demo
	# the libFuzzer harnesses (tests/fuzz): clang and its sanitizer/fuzzer runtime
	clang libclang-rt-14-dev
	curl jq socat sqlite3 openssh-client procps valgrind
	# tests/integration/clock-jump.sh: fleetd alone under a moved clock (LD_PRELOAD)
	libfaketime
	# tests/integration/agentd-shell.sh counts the programs an exec starts; ctl-noresolve.sh
	# traces what fleetctl opens
	strace
	# the webhook tests' raw HTTP client (tests/lib/hookraw.py, standard library only)
	python3
	# tests/integration/metrics.sh: promtool checks GET /metrics, a real Prometheus scrapes it
	prometheus
	# test_cron's DST tests need the zone files (they skip without, and CI fails)
	tzdata
	# the man pages' lint (tests/integration/manpages.sh: mandoc -T lint)
	mandoc
)

if [ "${1:-}" = --list ]; then
	printf '%s\n' "${PACKAGES[@]}"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "scripts/deps.sh: run as root (it installs packages with apt-get)" >&2
	exit 1
fi
missing=()
for p in "${PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ] && [ "${FLEET_FORCE_APT:-}" != 1 ]; then
	echo "deps: all ${#PACKAGES[@]} packages are installed"
else
	echo "deps: installing ${missing[*]:-(forced)}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q "${PACKAGES[@]}"
fi
# Debian's prometheus package starts its own server (on every address, :9090) and, as a
# recommended package, node-exporter (:9100). fleet's tests start a Prometheus of their own on
# loopback: services this script brought in are stopped and disabled, not left listening.
new_prometheus=
case " ${missing[*]} " in *" prometheus "*) new_prometheus=1 ;; esac
[ "${FLEET_FORCE_APT:-}" = 1 ] && new_prometheus=1
for svc in ${new_prometheus:+prometheus prometheus-node-exporter}; do
	dpkg-query -W -f='${Status}' "$svc" 2>/dev/null | grep -q "install ok installed" || continue
	if [ -d /run/systemd/system ]; then
		systemctl disable --now "$svc.service" >/dev/null 2>&1 || true
	elif [ -x "/etc/init.d/$svc" ]; then
		"/etc/init.d/$svc" stop >/dev/null 2>&1 || true
		update-rc.d "$svc" disable >/dev/null 2>&1 || true
	fi
done
# Into /var/cache/fleet/dropbear-src (FLEET_DROPBEAR_SRC); skipped when there.
bash "$(dirname "$0")/../images/fetch-dropbear-source.sh"
# fleetctl's HTTP-only libcurl (scripts/build-libcurl-min.sh): Debian's source of the installed
# libcurl4-openssl-dev, into /var/cache/fleet/curl-src (FLEET_CURL_SRC); skipped when there.
# Not fatal: without it configure links fleetctl with the system's libcurl (slower to start).
bash "$(dirname "$0")/fetch-debian-source.sh" --package libcurl4-openssl-dev --cache "${FLEET_CURL_SRC:-/var/cache/fleet/curl-src}" ||
	echo "deps: warning: no curl source; fleetctl will link the system's libcurl (README.md: Building by hand)" >&2
