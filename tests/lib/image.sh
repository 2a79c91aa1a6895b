# image.sh: make sure a guest image built with this tree's agentd exists.
# Source it, then: image_ensure || skip_all "..."; it sets IMG.
# FLEET_IMAGE_DIR overrides where the image is cached (default
# $FLEET_BUILDDIR/images/out); concurrent tests share one build via flock.

IMG=${FLEET_IMAGE_DIR:-${FLEET_BUILDDIR:-$PWD}/images/out}

_image_fresh() {
	local f want have
	for f in vmlinuz initramfs.img base.qcow2 manifest.json; do [ -s "$IMG/$f" ] || return 1; done
	want=$(sha256sum "$AGENTD" | cut -d' ' -f1)
	have=$(sed -n 's/.*"agentd_sha256": "\([0-9a-f]*\)".*/\1/p' "$IMG/manifest.json")
	[ "$want" = "$have" ]
}

image_ensure() {
	mkdir -p "$IMG" || return 1
	(
		flock 9
		_image_fresh && exit 0
		echo "# building the guest image into $IMG"
		"$FLEET_SRCDIR/images/build-image.sh" --agentd "$AGENTD" --out "$IMG" 2>&1 | sed 's/^/#   /'
		exit "${PIPESTATUS[0]}"
	) 9>"$IMG/.lock" && _image_fresh
}
