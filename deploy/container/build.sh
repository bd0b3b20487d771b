#!/usr/bin/env bash
# Builds the msgx container image with podman (or buildah-compatible
# `podman build`), offline: a static binary (CGO_ENABLED=0) built here, put on
# an empty base with CA certificates and a user database.
#
#   deploy/container/build.sh [IMAGE]      default IMAGE: localhost/msgx:VERSION
#   MSGX_BUILD_TAGS=nopulsar deploy/container/build.sh    without the Pulsar adapter
#
# The binary is built with the tag grpcnotrace: gRPC (linked by the OTLP
# trace exporter) then leaves out golang.org/x/net/trace, whose request pages
# execute an html/template and so keep the linker from dropping unused
# methods anywhere in the binary (docs/operations.md, Builds).
#
# VERSION is MSGX_VERSION, else `git describe --tags --always --dirty`; the
# binary carries it (msgx version) and the image's OCI labels carry it with
# the revision and the commit time.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
version=${MSGX_VERSION:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)}
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
created=$(git -C "$root" log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
image=${1:-localhost/msgx:$version}

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/etc/msgx" "$ctx/rootfs/tmp" "$ctx/rootfs/var/lib" "$ctx/data"
chmod 1777 "$ctx/rootfs/tmp"
tags=grpcnotrace${MSGX_BUILD_TAGS:+,$MSGX_BUILD_TAGS}
(cd "$root" && CGO_ENABLED=0 go build -trimpath -buildvcs=auto -tags "$tags" -ldflags "-s -w -X main.version=$version" \
  -o "$ctx/rootfs/usr/local/bin/msgx" ./cmd/msgx)
ca=/etc/ssl/certs/ca-certificates.crt
[ -r "$ca" ] || { echo "build.sh: no CA bundle at $ca (Debian: apt-get install ca-certificates)" >&2; exit 1; }
cp "$ca" "$ctx/rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nmsgx:x:65532:65532:msgx:/var/lib/msgx:/sbin/nologin\n' >"$ctx/rootfs/etc/passwd"
printf 'root:x:0:\nmsgx:x:65532:\n' >"$ctx/rootfs/etc/group"
cp "$root/deploy/msgx.production.yaml" "$ctx/rootfs/etc/msgx/msgx.production.yaml"
cp "$root/deploy/container/Containerfile" "$ctx/Containerfile"

podman build --quiet --timestamp 0 \
  --build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg CREATED="$created" \
  -t "$image" "$ctx" >/dev/null
echo "$image"
