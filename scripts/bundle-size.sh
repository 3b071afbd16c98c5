#!/usr/bin/env bash
# Measures a GPU bundle against the device tool's carry limit (64 MiB for
# everything a run carries) and fails, naming the largest files, when over.
#
#   scripts/bundle-size.sh DIR [LIMIT_BYTES]
set -euo pipefail
DIR=${1:?usage: bundle-size.sh DIR [LIMIT_BYTES]}
LIMIT=${2:-$((64 * 1024 * 1024))}
[ -d "$DIR" ] || { echo "bundle-size: no directory $DIR" >&2; exit 2; }
# -L: a dry bundle links its files; what would be carried is their content.
SIZE=$(du -sbL "$DIR" | cut -f1)
MIB() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
if [ "$SIZE" -gt "$LIMIT" ]; then
  echo "bundle-size: FAIL: $DIR is $(MIB "$SIZE"), over the carry limit of $(MIB "$LIMIT"). Largest files:" >&2
  find -L "$DIR" -type f -printf '%s\t%p\n' | sort -rn | head -5 \
    | while IFS=$'\t' read -r b p; do echo "  $(MIB "$b")  $p" >&2; done
  exit 1
fi
echo "bundle-size: PASS: $DIR is $(MIB "$SIZE") of the $(MIB "$LIMIT") carry limit"
