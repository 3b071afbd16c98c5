#!/usr/bin/env bash
# build.sh: the unit tests' two tiny images in root's podman storage, made from this host's own
# binaries (no registry, no base image): localhost/localnode-test:root (no USER) and
# localhost/localnode-test:user (USER 1234:1234). Both: ENTRYPOINT ["/bin/sh","-c"], CMD a line
# that prints "image-cmd", ENV IMG=1. Rebuilt only when missing (podman image exists).
set -euo pipefail
PODMAN=${LOCALNODE_PODMAN:-podman}
if "$PODMAN" image exists localhost/localnode-test:root && "$PODMAN" image exists localhost/localnode-test:user; then
  exit 0
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,etc,tmp,proc,sys,dev,run,data}
chmod 1777 "$root/tmp"
# The tools the tests run, with the shared libraries each one loads.
for b in sh sleep cat id true false env dd echo ls touch mkdir stat head printf test; do
  p=$(type -P "$b")
  cp -L "$p" "$root/bin/$b"
  for lib in $(ldd "$p" 2>/dev/null | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -Ln "$lib" "$root$lib"
  done
done
printf 'root:x:0:0::/:/bin/sh\napp:x:1234:1234::/:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\napp:x:1234:\n' >"$root/etc/group"
common=(--change 'ENTRYPOINT ["/bin/sh","-c"]' --change 'CMD ["echo image-cmd"]' --change 'ENV IMG=1')
tar -C "$root" -c . | "$PODMAN" import -q "${common[@]}" - localhost/localnode-test:root >/dev/null
tar -C "$root" -c . | "$PODMAN" import -q "${common[@]}" --change 'USER 1234:1234' - localhost/localnode-test:user >/dev/null
