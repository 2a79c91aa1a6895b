# image.sh: make sure a guest image built with this tree's agentd and fleet's
# patched dropbear exists. Source it, then: image_ensure || ...; it sets IMG.
# When it fails for want of the patched dropbear, IMAGE_ERROR says so (and to
# run scripts/deps.sh): callers fail then, never skip or use the stock one.
# FLEET_IMAGE_DIR overrides where the image is cached (default
# $FLEET_BUILDDIR/images/out); FLEET_DROPBEAR is the patched dropbear (make
# check builds it; default $FLEET_BUILDDIR/images/dropbear/dropbear, built
# here when missing). Concurrent tests share one build via flock.

IMG=${FLEET_IMAGE_DIR:-${FLEET_BUILDDIR:-$PWD}/images/out}
IMAGE_DROPBEAR=${FLEET_DROPBEAR:-${FLEET_BUILDDIR:-$PWD}/images/dropbear/dropbear}
IMAGE_ERROR=

# image_dropbear: build (if needed: a no-op when up to date) the patched
# dropbear. Without the Debian source (scripts/deps.sh not run) it fails and
# IMAGE_ERROR says what to do: the tests never fall back to the stock one.
image_dropbear() {
	local out
	if ! out=$("$FLEET_SRCDIR/images/build-dropbear.sh" --out "${IMAGE_DROPBEAR%/*}" 2>&1); then
		printf '%s\n' "$out" | sed 's/^/#   /'
		IMAGE_ERROR="no patched dropbear (images/build-dropbear.sh failed; run scripts/deps.sh as root to fetch its source)"
		return 1
	fi
	[ -x "$IMAGE_DROPBEAR" ] || { IMAGE_ERROR="$IMAGE_DROPBEAR missing after images/build-dropbear.sh"; return 1; }
}

_image_fresh() {
	local f
	for f in vmlinuz initramfs.img base.qcow2 manifest.json; do [ -s "$IMG/$f" ] || return 1; done
	grep -q "\"agentd_sha256\": \"$(sha256sum "$AGENTD" | cut -d' ' -f1)\"" "$IMG/manifest.json" &&
		grep -q "\"dropbear_sha256\": \"$(sha256sum "$IMAGE_DROPBEAR" | cut -d' ' -f1)\"" "$IMG/manifest.json" &&
		grep -q "\"build_script_sha256\": \"$(sha256sum "$FLEET_SRCDIR/images/build-image.sh" | cut -d' ' -f1)\"" "$IMG/manifest.json"
}

image_ensure() {
	image_dropbear || return 1
	mkdir -p "$IMG" || return 1
	(
		flock 9
		_image_fresh && exit 0
		echo "# building the guest image into $IMG"
		"$FLEET_SRCDIR/images/build-image.sh" --agentd "$AGENTD" --dropbear "$IMAGE_DROPBEAR" --out "$IMG" 2>&1 |
			sed 's/^/#   /'
		exit "${PIPESTATUS[0]}"
	) 9>"$IMG/.lock" && _image_fresh
}
