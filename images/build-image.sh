#!/bin/bash
# build-image.sh: build fleet's small guest (kernel, initramfs, qcow2 root)
# from the host's own Debian packages; nothing is downloaded.
#
#   images/build-image.sh --agentd PATH --dropbear PATH --out DIR [--size-mib N] [--kernel VERSION]
#
# --dropbear: fleet's patched dropbear server, made by images/build-dropbear.sh
# (its dropbear.info beside it goes into the manifest). Debian's stock
# /usr/sbin/dropbear is accepted only when named explicitly: it has the bug
# images/patches/dropbear-close-before-exec.patch fixes (images/README.md).
#
# Output in DIR: vmlinuz, initramfs.img, base.qcow2, manifest.json.
# Boot with: console=ttyS0 root=/dev/vda rw   (see images/README.md)
set -euo pipefail

PROG=build-image.sh
STEPS=6
SIZE_MIB=1024
AGENTD=
DROPBEAR=
OUT=
KVER=

# Modules the initramfs loads, in this order after dependency expansion.
# button+evdev let busybox acpid see the ACPI power button (virsh shutdown);
# virtio_rng feeds the kernel's RNG from the host, when the domain has an
# <rng model='virtio'> device, so dropbear need not wait for entropy.
MODULES="virtio_ring virtio virtio_pci virtio_blk virtio_console virtio_net
crc32c_generic libcrc32c crc16 mbcache jbd2 ext4 button evdev virtio_rng"

die() { echo "$PROG: error: $*" >&2; exit 1; }
step() { echo "[$1/$STEPS] $2"; }

usage() {
    echo "usage: $PROG --agentd PATH_TO_AGENTD --dropbear PATH_TO_DROPBEAR --out DIR [--size-mib N] [--kernel VERSION]" >&2
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
    --agentd) AGENTD=${2:?}; shift 2 ;;
    --dropbear) DROPBEAR=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --size-mib) SIZE_MIB=${2:?}; shift 2 ;;
    --kernel) KVER=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "$PROG: unknown argument: $1" >&2; usage ;;
    esac
done
[ -n "$AGENTD" ] && [ -n "$OUT" ] || usage
[ -f "$AGENTD" ] && [ -x "$AGENTD" ] || die "--agentd $AGENTD: not an executable file"
[ -n "$DROPBEAR" ] || die "--dropbear PATH is required: build fleet's patched dropbear with" \
    "images/build-dropbear.sh --out DIR (after scripts/deps.sh) and pass DIR/dropbear"
[ -f "$DROPBEAR" ] && [ -x "$DROPBEAR" ] || die "--dropbear $DROPBEAR: not an executable file"
case "$SIZE_MIB" in ''|*[!0-9]*) die "--size-mib wants a number of MiB" ;; esac
[ "$SIZE_MIB" -ge 64 ] || die "--size-mib must be at least 64"

# need CMD PACKAGE: fail early, naming the Debian package that provides CMD.
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found; install the Debian package '$2'"; }
need mke2fs e2fsprogs
need debugfs e2fsprogs
need qemu-img qemu-utils
need cpio cpio
need gzip gzip
need ldd libc-bin
need dpkg-query dpkg
need sha256sum coreutils
BUSYBOX=/bin/busybox
[ -x "$BUSYBOX" ] || die "$BUSYBOX not found; install the Debian package 'busybox-static'"
if ldd "$BUSYBOX" >/dev/null 2>&1; then
    die "$BUSYBOX is dynamically linked; install the Debian package 'busybox-static' (not 'busybox')"
fi
# Which dropbear, for the manifest: build-dropbear.sh's info file, checked
# against the binary; or Debian's own, named explicitly.
DROPBEAR_SHA=$(sha256sum "$DROPBEAR" | cut -d' ' -f1)
info() { sed -n "s/^$1=//p" "$DROPBEAR.info"; }
if [ -f "$DROPBEAR.info" ]; then
    [ "$(info sha256)" = "$DROPBEAR_SHA" ] || die "$DROPBEAR.info does not describe $DROPBEAR (sha256 differs); rebuild it with images/build-dropbear.sh"
    DROPBEAR_DESC="$(info debian_version) + fleet patches: $(info fleet_patches)"
elif [ "$DROPBEAR_SHA" = "$(sha256sum /usr/sbin/dropbear 2>/dev/null | cut -d' ' -f1)" ]; then
    DROPBEAR_DESC="$(dpkg-query -W -f '${Version}' dropbear-bin 2>/dev/null || echo unknown) (Debian's stock build, unpatched)"
    echo "$PROG: warning: $DROPBEAR is Debian's stock dropbear, without fleet's fix (images/README.md)" >&2
else
    die "--dropbear $DROPBEAR: neither built by images/build-dropbear.sh (no $DROPBEAR.info) nor Debian's /usr/sbin/dropbear"
fi

# Kernel: the newest /boot/vmlinuz-* that has modules, unless --kernel says.
if [ -z "$KVER" ]; then
    for k in $(ls -1 /boot/vmlinuz-* 2>/dev/null | sed 's|^/boot/vmlinuz-||' | sort -V); do
        [ -f "/lib/modules/$k/modules.dep" ] && KVER=$k
    done
    [ -n "$KVER" ] || die "no /boot/vmlinuz-* with /lib/modules/*/modules.dep; install the Debian package 'linux-image-amd64'"
fi
KERNEL=/boot/vmlinuz-$KVER
MODDIR=/lib/modules/$KVER
[ -r "$KERNEL" ] || die "$KERNEL missing or unreadable; install the Debian package 'linux-image-$KVER'"
[ -r "$MODDIR/modules.dep" ] || die "$MODDIR/modules.dep missing; install the Debian package 'linux-image-$KVER'"

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fleet-image.XXXXXX")
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
IS_ROOT=0
[ "$(id -u)" = 0 ] && IS_ROOT=1

# ---------------------------------------------------------------- kernel
step 1 "kernel $KVER"
cp "$KERNEL" "$WORK/vmlinuz"

# ---------------------------------------------------------------- modules
step 2 "initramfs: modules from $MODDIR/modules.dep"
declare -A MODPATH=() LOADED=()
while IFS=: read -r path _; do
    base=${path##*/}
    base=${base%%.ko*}
    MODPATH[${base//-/_}]=$path
done < "$MODDIR/modules.dep"
ORDER=()
# add_module NAME: its dependencies first (modules.dep lists them transitively,
# innermost last), then itself.
add_module() {
    local name=${1//-/_} path deps d i
    local -a darr=()
    [ -n "${LOADED[$name]:-}" ] && return 0
    path=${MODPATH[$name]:-}
    if [ -z "$path" ]; then
        # Built into the kernel? Then there is nothing to load.
        if grep -qE "/$name\.ko" "$MODDIR/modules.builtin" 2>/dev/null ||
           grep -qE "/${name//_/-}\.ko" "$MODDIR/modules.builtin" 2>/dev/null; then
            LOADED[$name]=builtin
            return 0
        fi
        die "kernel module '$name' not found in $MODDIR (package linux-image-$KVER)"
    fi
    LOADED[$name]=1
    deps=$(grep -E "^$path:" "$MODDIR/modules.dep" | cut -d: -f2)
    read -r -a darr <<<"$deps"
    for ((i = ${#darr[@]} - 1; i >= 0; i--)); do
        d=${darr[$i]##*/}
        add_module "${d%%.ko*}"
    done
    ORDER+=("$name")
}
for m in $MODULES; do add_module "$m"; done

INITRD=$WORK/initrd
mkdir -p "$INITRD"/{bin,dev,proc,sys,newroot,lib/modules}
cp "$BUSYBOX" "$INITRD/bin/busybox"
ln -s busybox "$INITRD/bin/sh"
: > "$INITRD/lib/modules/load-order"
for name in "${ORDER[@]}"; do
    src=$MODDIR/${MODPATH[$name]}
    dst=$INITRD/lib/modules/$name.ko
    case "$src" in
    *.ko) cp "$src" "$dst" ;;
    *.ko.xz) need xz xz-utils; xz -dc "$src" > "$dst" ;;
    *.ko.zst) need zstd zstd; zstd -qdc "$src" > "$dst" ;;
    *.ko.gz) gzip -dc "$src" > "$dst" ;;
    *) die "unknown module format: $src" ;;
    esac
    echo "$name" >> "$INITRD/lib/modules/load-order"
done
echo "      modules: ${ORDER[*]}"

cat > "$INITRD/init" <<'EOF'
#!/bin/sh
# initramfs /init: load the virtio and ext4 modules, mount the root disk,
# hand over to its /sbin/init.
export PATH=/bin
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

rescue() {
    echo "initramfs: $*" >&2
    echo "initramfs: dropping to a shell on the console" >&2
    exec setsid cttyhack sh
}

root=/dev/vda rootflags=rw init=/sbin/init
for arg in $(cat /proc/cmdline); do
    case "$arg" in
    root=*) root=${arg#root=} ;;
    ro) rootflags=ro ;;
    rw) rootflags=rw ;;
    init=*) init=${arg#init=} ;;
    esac
done

while read -r m; do
    insmod "/lib/modules/$m.ko" || echo "initramfs: insmod $m failed" >&2
done < /lib/modules/load-order

# virtio-blk probes asynchronously; give the disk up to 10 s to appear.
i=0
while [ ! -b "$root" ] && [ $i -lt 100 ]; do usleep 100000; i=$((i + 1)); done
[ -b "$root" ] || rescue "root device $root did not appear"
mount -t ext4 -o "$rootflags" "$root" /newroot || rescue "cannot mount $root"
[ -x "/newroot$init" ] || rescue "$init not found on $root"

# This image's agentd and dropbear onto the root disk, when they differ: an
# agent's disk keeps the files of the image it was made from, and an agent
# upgraded to a newer image (fleetctl upgrade: it boots that image's kernel
# and initramfs) gets the newer ones here. Renamed into place: never half.
if [ "$rootflags" = rw ]; then
    for f in usr/bin/agentd usr/sbin/dropbear; do
        [ -f "/fleet/$f" ] && [ -d "/newroot/${f%/*}" ] || continue
        cmp -s "/fleet/$f" "/newroot/$f" && continue
        if cp "/fleet/$f" "/newroot/$f.fleet-new" && chmod 0755 "/newroot/$f.fleet-new" &&
            mv -f "/newroot/$f.fleet-new" "/newroot/$f"; then
            echo "initramfs: installed this image's /$f"
        else
            echo "initramfs: could not install /$f" >&2
            rm -f "/newroot/$f.fleet-new"
        fi
    done
    sync
fi

# The memory store's own disk (fleetd's memory.qcow2: /dev/vdc, ext4 labelled
# fleet-memory) on the agent's ~/memory, before anything of the agent runs, so
# the guest's kernel holds every write there to the quota (docs/memory.md).
# A fresh disk still has mke2fs's lost+found: what the root disk's ~/memory
# held (an agent made before memory disks) is copied in first, then that
# marker goes (the commit point: a crash before it copies again), then the
# old copy under the mount is emptied.
mem=/dev/vdc home=/newroot/home/agent
i=0
while [ ! -b $mem ] && [ $i -lt 50 ]; do usleep 100000; i=$((i + 1)); done
if [ "$rootflags" = rw ] && [ -b $mem ] && [ "$(findfs LABEL=fleet-memory 2>/dev/null)" = $mem ] &&
    [ -d $home ] && [ ! -L $home ]; then
    # Whatever the agent left under the name (a link, a file) is no mount point.
    if [ -L $home/memory ] || { [ -e $home/memory ] && [ ! -d $home/memory ]; }; then
        rm -f $home/memory
    fi
    mkdir -p /mem $home/memory
    if mount -t ext4 -o nosuid,nodev $mem /mem; then
        if [ -d /mem/lost+found ]; then
            cp -a $home/memory/. /mem/ && sync && rmdir /mem/lost+found && sync &&
                find $home/memory -mindepth 1 -maxdepth 1 -exec rm -rf {} \; &&
                echo "initramfs: the memory store is on its own disk now"
        fi
        chown 1000:1000 /mem && chmod 0700 /mem
        umount /mem
        mount -t ext4 -o nosuid,nodev $mem $home/memory || echo "initramfs: cannot mount the memory disk" >&2
    else
        echo "initramfs: cannot mount the memory disk $mem" >&2
    fi
fi

umount /proc /sys
# Move /dev rather than unmount it: our console fds live on it.
mount --move /dev /newroot/dev
exec switch_root /newroot "$init"
EOF
chmod 0755 "$INITRD/init"
# What /init installs on the root disk (see there); their libraries are the disk's.
install -D -m 0755 "$AGENTD" "$INITRD/fleet/usr/bin/agentd"
install -D -m 0755 "$DROPBEAR" "$INITRD/fleet/usr/sbin/dropbear"
(cd "$INITRD" && find . -print0 | sort -z | cpio --null -o -H newc --quiet -R 0:0) | gzip -9 > "$WORK/initramfs.img"

# ---------------------------------------------------------------- root tree
step 3 "root tree: busybox, dropbear ($DROPBEAR_DESC), agentd, users, init"
ROOT=$WORK/root
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,etc/dropbear,etc/acpi/PWRF,dev,proc,sys,run,tmp,var/log,root/.ssh}
mkdir -p "$ROOT/home/agent/.ssh" "$ROOT/home/agent/memory" "$ROOT/usr/share/udhcpc"
ln -s ../run "$ROOT/var/run"
chmod 1777 "$ROOT/tmp"
chmod 0700 "$ROOT/root" "$ROOT/root/.ssh" "$ROOT/home/agent" "$ROOT/home/agent/.ssh"
chmod 0700 "$ROOT/home/agent/memory"

cp "$BUSYBOX" "$ROOT/bin/busybox"
# Applet links where busybox says they live; our own /sbin/init is a script.
"$BUSYBOX" --list-full | while read -r applet; do
    case "$applet" in sbin/init|linuxrc|bin/busybox) continue ;; esac
    [ -e "$ROOT/$applet" ] || [ -L "$ROOT/$applet" ] && continue
    dir=${applet%/*}
    rel=$(echo "$dir" | sed 's|[^/][^/]*|..|g')
    ln -s "$rel/bin/busybox" "$ROOT/$applet"
done

# copy_with_libs BIN DEST: the binary plus every shared object ldd names.
copy_with_libs() {
    local bin=$1 dest=$2 lib libs
    install -D -m 0755 "$bin" "$ROOT$dest"
    # a static program (agentd: configure.ac) has none: ldd says so and fails
    libs=$(ldd "$bin" 2>/dev/null | grep -oE '(/[^ ]+)') || libs=
    for lib in $libs; do
        [ -e "$ROOT$lib" ] && continue
        mkdir -p "$ROOT${lib%/*}"
        cp -L "$lib" "$ROOT$lib"
    done
}
copy_with_libs "$DROPBEAR" /usr/sbin/dropbear
copy_with_libs "$AGENTD" /usr/bin/agentd
# libarchive for agentd's memory export and import, which dlopen it (agentd itself
# links libc only, so an older disk without it still boots: agentd/memory.c).
# With its dependencies (libxml2 brings ICU) it adds about 40 MiB to the root disk.
# awk reads to the end: an early exit would SIGPIPE ldconfig, which pipefail makes fatal.
LIBARCHIVE=$(ldconfig -p | awk '$1 == "libarchive.so.13" && /x86-64/ && !found { print $NF; found = 1 }')
[ -n "$LIBARCHIVE" ] || die "libarchive.so.13 not found; install the Debian package 'libarchive13' (scripts/deps.sh)"
copy_with_libs "$LIBARCHIVE" "$LIBARCHIVE"

# root's login shell is agentd: fleetd's session is root's, and dropbear runs
# every exec as `SHELL -c LINE`; agentd does fleetd's run-as line itself (one
# program start less than /bin/sh exec'ing agentd) and hands any other line,
# and an interactive login, to /bin/sh (agentd/shell.h).
cat > "$ROOT/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/bin/agentd
agent:x:1000:1000:fleet agent:/home/agent:/bin/sh
EOF
cat > "$ROOT/etc/group" <<'EOF'
root:x:0:
tty:x:5:
agent:x:1000:
EOF
# '*' = no password, yet not "locked": dropbear refuses locked ('!') accounts.
cat > "$ROOT/etc/shadow" <<'EOF'
root:*:19000:0:99999:7:::
agent:*:19000:0:99999:7:::
EOF
chmod 0600 "$ROOT/etc/shadow"
printf '/bin/sh\n/bin/ash\n/usr/bin/agentd\n' > "$ROOT/etc/shells"	# dropbear refuses a shell not listed
printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n' > "$ROOT/etc/nsswitch.conf"
echo fleet-guest > "$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n' > "$ROOT/etc/hosts"
cat > "$ROOT/etc/profile" <<'EOF'
export PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin
EOF

# busybox acpid runs /etc/acpi/PWRF/00000080 on an ACPI power-button press
# (virsh shutdown, and virsh reboot which libvirt does as shutdown + reset).
cat > "$ROOT/etc/acpi/PWRF/00000080" <<'EOF'
#!/bin/sh
exec poweroff
EOF
chmod 0755 "$ROOT/etc/acpi/PWRF/00000080"

cat > "$ROOT/usr/share/udhcpc/default.script" <<'EOF'
#!/bin/sh
# udhcpc hook: apply the lease to $interface.
case "$1" in
deconfig)
    ip -4 addr flush dev "$interface"
    ip link set "$interface" up
    ;;
bound|renew)
    ip -4 addr flush dev "$interface"
    ip addr add "$ip/${mask:-24}" dev "$interface"
    if [ -n "$router" ]; then
        ip route del default 2>/dev/null
        for r in $router; do ip route add default via "$r" dev "$interface"; break; done
    fi
    : > /run/resolv.conf
    for d in $dns; do echo "nameserver $d" >> /run/resolv.conf; done
    ;;
esac
exit 0
EOF
chmod 0755 "$ROOT/usr/share/udhcpc/default.script"
ln -s ../run/resolv.conf "$ROOT/etc/resolv.conf"

cat > "$ROOT/sbin/init" <<'EOF'
#!/bin/sh
# /sbin/init of the fleet guest: PID 1, a busybox sh script.
# Mounts the API filesystems, installs per-agent keys from the seed disk
# (/dev/vdb, made by fleetd), starts dropbear on 127.0.0.1:22 and
# "agentd relay" (virtio-serial port org.fleet.ctl -> dropbear), then reaps
# children and waits for poweroff/reboot (busybox poweroff/reboot/halt signal
# PID 1: USR2/TERM/USR1; acpid turns the ACPI power button into poweroff).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
umask 022

log() { echo "init: $*"; }
mounted() { grep -q " $1 " /proc/mounts; }

mount -t proc proc /proc
mounted /sys || mount -t sysfs sysfs /sys
mounted /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
mount -o remount,rw / 2>/dev/null

# put_key SRC SSHDIR OWNER: install SRC as SSHDIR/authorized_keys (empty if
# SRC is missing). busybox has no install(1).
put_key() {
    mkdir -p "$2"
    if [ -f "$1" ]; then cp "$1" "$2/authorized_keys"; else : > "$2/authorized_keys"; fi
    chown "$3" "$2" "$2/authorized_keys"
    chmod 0700 "$2"
    chmod 0600 "$2/authorized_keys"
}

# Per-agent identity from the seed disk, copied in at every boot.
SEED=/run/seed
mkdir -p $SEED
i=0
while [ ! -b /dev/vdb ] && [ $i -lt 20 ]; do usleep 100000; i=$((i + 1)); done
if [ -b /dev/vdb ] && mount -o ro /dev/vdb $SEED; then
    [ -s $SEED/hostname ] && cp $SEED/hostname /etc/hostname
    if [ -s $SEED/dropbear_ed25519_host_key ]; then
        cp $SEED/dropbear_ed25519_host_key /etc/dropbear/dropbear_ed25519_host_key
        chmod 0600 /etc/dropbear/dropbear_ed25519_host_key
    fi
    put_key $SEED/authorized_keys_agent /home/agent/.ssh 1000:1000
    put_key $SEED/authorized_keys_root /root/.ssh 0:0
    umount $SEED
else
    log "no seed disk on /dev/vdb: no host key or authorized keys installed"
fi
sync
hostname -F /etc/hostname

ip link set lo up
if [ -e /sys/class/net/eth0 ]; then
    ip link set eth0 up
    # In the background: a guest without DHCP must not wait for it.
    udhcpc -f -S -i eth0 -t 5 -T 2 -A 10 -s /usr/share/udhcpc/default.script >/dev/null 2>&1 &
fi

# respawn CMD...: run CMD again whenever it exits.
respawn() {
    (
        trap - TERM USR1 USR2 INT
        while :; do
            "$@"
            log "$1 exited with status $?, restarting"
            sleep 1
        done
    ) &
}

HOSTKEY=/etc/dropbear/dropbear_ed25519_host_key
if [ -s $HOSTKEY ]; then
    respawn dropbear -F -E -s -p 127.0.0.1:22 -r $HOSTKEY
else
    respawn dropbear -F -E -s -R -p 127.0.0.1:22
fi
respawn /usr/bin/agentd relay
[ -d /dev/input ] && respawn acpid -d -c /etc/acpi

# busy: is any user process other than PID 1 left? (kernel threads have
# an empty cmdline)
busy() {
    for p in /proc/[0-9]*; do
        [ "${p#/proc/}" = 1 ] && continue
        x=
        { read -r x < "$p/cmdline"; } 2>/dev/null   # it may just have exited
        [ -n "$x" ] && return 0
    done
    return 1
}

# halt_now poweroff|reboot: stop everything, make the disk clean, go.
halt_now() {
    log "$1"
    trap '' TERM USR1 USR2 INT
    kill -TERM -1 2>/dev/null
    i=0
    while [ $i -lt 20 ] && busy; do usleep 100000; i=$((i + 1)); done
    kill -KILL -1 2>/dev/null
    sync
    umount -a -r 2>/dev/null
    mount -o remount,ro / 2>/dev/null
    sync
    "$1" -f
}
trap 'halt_now poweroff' USR2
trap 'halt_now poweroff' USR1
trap 'halt_now reboot' TERM
trap 'halt_now reboot' INT

log "up: $(hostname), $(cut -d' ' -f1 /proc/uptime)s since boot"
# Reap children (orphans too: ash's wait collects any child) until told to stop.
while :; do
    wait
    sleep 1
done
EOF
chmod 0755 "$ROOT/sbin/init"

# ---------------------------------------------------------------- ext4 image
step 4 "ext4 root filesystem (${SIZE_MIB} MiB, mke2fs -d, no loop mounts)"
RAW=$WORK/root.raw
truncate -s "${SIZE_MIB}M" "$RAW"
if [ $IS_ROOT = 1 ]; then
    chown -R 0:0 "$ROOT"
    chown -R 1000:1000 "$ROOT/home/agent"
fi
# lazy init off: otherwise the guest's ext4lazyinit thread would zero the
# inode tables at first boot, on every agent's overlay.
mke2fs -q -F -t ext4 -L fleet-root -m 1 -E lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0 \
    -d "$ROOT" "$RAW"
if [ $IS_ROOT = 0 ]; then
    # Without root the staged files carry our uid: fix owners in the image.
    (cd "$ROOT" && find . -mindepth 1 ! -type l) | sed 's|^\.||' | while read -r p; do
        case "$p" in /home/agent|/home/agent/*) o=1000 ;; *) o=0 ;; esac
        echo "sif $p uid $o"
        echo "sif $p gid $o"
    done > "$WORK/owners.debugfs"
    debugfs -w -f "$WORK/owners.debugfs" "$RAW" >/dev/null 2>&1 ||
        die "debugfs could not set file owners in the image"
fi

# ---------------------------------------------------------------- qcow2
step 5 "qcow2 base image"
qemu-img convert -q -f raw -O qcow2 -c "$RAW" "$WORK/base.qcow2" 2>/dev/null ||
    qemu-img convert -q -f raw -O qcow2 "$RAW" "$WORK/base.qcow2"
rm -f "$RAW"

# ---------------------------------------------------------------- manifest
step 6 "manifest"
pkgver() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null || echo unknown; }
size() { stat -c %s "$1"; }
jstr() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
{
    echo "{"
    echo "  \"format\": 1,"
    echo "  \"build_time\": $(jstr "$(date -u +%Y-%m-%dT%H:%M:%SZ)"),"
    echo "  \"kernel_version\": $(jstr "$KVER"),"
    echo "  \"kernel_package\": $(jstr "linux-image-$KVER $(pkgver "linux-image-$KVER")"),"
    echo "  \"busybox_static_version\": $(jstr "$(pkgver busybox-static)"),"
    echo "  \"dropbear_bin_version\": $(jstr "$(pkgver dropbear-bin)"),"
    echo "  \"dropbear\": $(jstr "$DROPBEAR_DESC"),"
    echo "  \"dropbear_sha256\": $(jstr "$DROPBEAR_SHA"),"
    echo "  \"agentd_sha256\": $(jstr "$(sha256sum "$AGENTD" | cut -d' ' -f1)"),"
    echo "  \"build_script_sha256\": $(jstr "$(sha256sum "$0" | cut -d' ' -f1)"),"
    echo "  \"modules\": [$(printf '"%s",' "${ORDER[@]}" | sed 's/,$//')],"
    echo "  \"root_fs_mib\": $SIZE_MIB,"
    echo "  \"cmdline\": \"console=ttyS0 root=/dev/vda rw\","
    echo "  \"files\": {"
    echo "    \"vmlinuz\": $(size "$WORK/vmlinuz"),"
    echo "    \"initramfs.img\": $(size "$WORK/initramfs.img"),"
    echo "    \"base.qcow2\": $(size "$WORK/base.qcow2")"
    echo "  }"
    echo "}"
} > "$WORK/manifest.json"

# Install atomically file by file; manifest last marks a complete build.
rm -f "$OUT/manifest.json"
for f in vmlinuz initramfs.img base.qcow2 manifest.json; do
    mv -f "$WORK/$f" "$OUT/$f.tmp"
    mv -f "$OUT/$f.tmp" "$OUT/$f"
done
chmod 0644 "$OUT"/vmlinuz "$OUT"/initramfs.img "$OUT"/base.qcow2 "$OUT"/manifest.json
echo "done: $OUT ($(du -sh --apparent-size "$OUT" | cut -f1) total)"
ls -l "$OUT"
