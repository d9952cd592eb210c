#!/bin/sh
# Downloads one upstream release file for a payload image and checks it against the checksum
# pinned in the payload's Dockerfile. Runs inside the Dockerfiles' fetch stage (POSIX sh,
# curl, and sha256sum or sha512sum).
#
#   fetch.sh URL ALGORITHM CHECKSUM OUT
#
# ALGORITHM is sha256 or sha512, CHECKSUM its lowercase hex digest. An empty CHECKSUM stops
# the build: it means nobody has pinned the file's checksum yet (see README.md).
set -eu

if [ "$#" -ne 4 ]; then
  echo "usage: $0 URL ALGORITHM CHECKSUM OUT" >&2
  exit 2
fi
url=$1 algorithm=$2 sum=$3 out=$4

case "$algorithm" in
  sha256) length=64 ;;
  sha512) length=128 ;;
  *) echo "fetch: unknown checksum algorithm '$algorithm' (sha256 or sha512)" >&2; exit 2 ;;
esac
if [ -z "$sum" ]; then
  echo "fetch: no $algorithm checksum is pinned for $url." >&2
  echo "fetch: set it in the payload's Dockerfile to the value checked against the publisher's" >&2
  echo "fetch: release (see the Dockerfile's comment and hack/images/payloads/README.md)." >&2
  exit 1
fi
case "$sum" in
  *[!0-9a-f]*) echo "fetch: the $algorithm checksum for $url is not lowercase hex: $sum" >&2; exit 1 ;;
esac
if [ "${#sum}" -ne "$length" ]; then
  echo "fetch: the $algorithm checksum for $url has ${#sum} hex digits, not $length" >&2
  exit 1
fi

partial="$out.partial"
rm -f "$partial"
curl --fail --silent --show-error --location --proto '=https' --retry 3 --output "$partial" "$url"
printf '%s  %s\n' "$sum" "$partial" >"$partial.$algorithm"
if ! "${algorithm}sum" -c "$partial.$algorithm" >/dev/null; then
  echo "fetch: $url does not match the pinned $algorithm checksum $sum" >&2
  rm -f "$partial" "$partial.$algorithm"
  exit 1
fi
rm -f "$partial.$algorithm"
mv "$partial" "$out"
echo "fetch: $url ($algorithm $sum) -> $out"
