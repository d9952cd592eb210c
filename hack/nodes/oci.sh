# Images as OCI image layouts, pinned by digest, for the test registry. Sourced by
# hack/nodes/images.sh and hack/nodes/wasm-images.sh after `repo`, `out` and `die` are set.
#
# Each image is an OCI image layout directory OUT/oci/<name> (hack/nodes/oci-image.py writes
# it), recorded as one line `<name> <repository> <digest>` in OUT/images.list, which
# `hack/nodes/images.sh push` reads to push every image. Images are referred to by digest in
# the registry the nodes pull from, IMAGE_REGISTRY (hack/nodes/lib.sh: NODE_REGISTRY):
# IMAGE_REGISTRY/<repository>@sha256:<hex>. The tag each is pushed with (id-<12 hex digits of
# the digest>) is for humans; nothing pulls by it.

oci_image_py="$repo/hack/nodes/oci-image.py"

# oci_record <name> <repository> <digest>: records an image built into OUT/oci/<name> and prints
# its pinned reference.
oci_record() {
  local name="$1" repository="$2" digest="$3" list="$out/images.list"
  [[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "image $name: '$digest' is not a sha256 digest"
  touch "$list"
  # One line per image: a rebuilt image replaces its old line.
  awk -v n="$name" '$1 != n' "$list" >"$list.partial"
  echo "$name $repository $digest" >>"$list.partial"
  mv "$list.partial" "$list"
  echo "$IMAGE_REGISTRY/$repository@$digest"
}

# oci_image <name> <repository> <oci-image.py arguments...>: builds a single-platform image
# (or, with --index, an index of one platform) into a fresh OUT/oci/<name>, records it and
# prints its pinned reference.
oci_image() {
  local name="$1" repository="$2" digest
  shift 2
  rm -rf "$out/oci/$name"
  digest="$("$oci_image_py" --out "$out/oci/$name" --name "$IMAGE_REGISTRY/$repository" "$@")" \
    || die "building image $name failed"
  oci_record "$name" "$repository" "$digest"
}
