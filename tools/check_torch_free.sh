#!/usr/bin/env bash
# Fails when a crate that must not link libtorch does: the protocol, text
# and config crates, model-files (without its `tch` feature), the tuner,
# the CRDs, the operator, the load generator, and the gateway built
# without its `inproc` feature (the gateway pod).
# Reads the resolved dependency graph (`cargo tree`), compiles nothing.
set -euo pipefail
status=0
check() {
    local what="$1"; shift
    local tree
    tree=$(cargo tree "$@" -e normal --prefix none) # set -e: a failing cargo tree fails the check
    if grep -qE '^(torch-sys|tch) ' <<<"$tree"; then
        echo "check_torch_free: $what links libtorch:" >&2
        cargo tree "$@" -e normal -i torch-sys >&2 || true
        status=1
    else
        echo "check_torch_free: $what: no libtorch"
    fi
}
for crate in protocol textio engine-config model-files tuner crds operator loadgen logging; do
    check "$crate" -p "$crate"
done
check "gateway --no-default-features" -p gateway --no-default-features
exit $status
