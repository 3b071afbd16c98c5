#!/usr/bin/env bash
# Makes `FROM debian:bookworm-slim` resolve without a registry: a Debian
# bookworm minbase from debootstrap (Debian's mirror), trimmed of apt lists,
# docs and locales, imported into podman under both names a Dockerfile can
# use. Skipped when the image is there; the rootfs tarball is cached under
# $CACHE/images so a lost image is re-imported in seconds.
#   tools/images/base.sh            (CACHE defaults to the repository's .cache)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${CACHE:-$ROOT/.cache}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/tools/images/containers.conf}
NAME=docker.io/library/debian:bookworm-slim
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
TAR=$CACHE/images/debian-bookworm-minbase.tar

if podman image exists "$NAME"; then
  exit 0
fi
mkdir -p "$CACHE/images"
if [ ! -s "$TAR" ]; then
  command -v debootstrap >/dev/null || { echo "base.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }
  dir=$(mktemp -d "$CACHE/images/rootfs.XXXXXX")
  trap 'rm -rf "$dir"' EXIT
  echo "base.sh: debootstrap --variant=minbase bookworm (about a minute)"
  debootstrap --variant=minbase bookworm "$dir" "$MIRROR" >"$CACHE/images/debootstrap.log" 2>&1 \
    || { tail -n 20 "$CACHE/images/debootstrap.log" >&2; exit 1; }
  # What the official slim image also leaves out: package caches, docs, locales.
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/cache/apt/*.bin "$dir"/var/lib/apt/lists/* \
         "$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/* \
         "$dir"/var/log/*.log "$dir"/debootstrap
  # The updates and security suites, as in the official image.
  cat >"$dir/etc/apt/sources.list" <<LIST
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
LIST
  tar --numeric-owner -C "$dir" -cf "$TAR.tmp" . && mv "$TAR.tmp" "$TAR"
fi
podman import --change 'CMD ["bash"]' "$TAR" "$NAME" >/dev/null
podman tag "$NAME" localhost/debian:bookworm-slim
echo "base.sh: imported $NAME ($(podman image inspect --format '{{.Size}}' "$NAME" | numfmt --to=iec))"
