#!/usr/bin/env bash
# Lays out what an image's runtime stage copies (OUT/bin, OUT/lib or
# OUT/site-packages), from a built binary and the pip site-packages that hold
# its libtorch. One script for both ways the Dockerfiles get their artifacts:
# their BUILD_FROM=source stage runs it inside the builder, and
# tools/images/build.sh runs it on the host for BUILD_FROM=host.
#
#   deploy/stage.sh cpu      BIN SITE OUT   engine + only the libraries it loads
#   deploy/stage.sh cuda     BIN SITE OUT   engine + torch/lib and nvidia/*/lib
#   deploy/stage.sh operator BIN OUT        the operator alone
#
# Files are hard-linked from SITE when they can be (same filesystem), so
# staging costs no copy; the binary is always copied (it gets stripped).
set -euo pipefail

die() { echo "stage.sh: $*" >&2; exit 1; }

# put SRC DST: DST becomes SRC's content (symlinks followed).
put() {
  local src
  src=$(readlink -f "$1")
  mkdir -p "$(dirname "$2")"
  ln -f "$src" "$2" 2>/dev/null || cp -f "$src" "$2"
}

# put_bin BIN OUT: the stripped binary at OUT/bin/<name>.
put_bin() {
  [ -x "$1" ] || die "no executable $1"
  install -D -m 0755 "$1" "$2/bin/$(basename "$1")"
  strip --strip-debug "$2/bin/$(basename "$1")"
}

# resolved BIN: every "name path" pair the loader resolves for BIN; fails on
# a library it cannot find (libcuda.so.1 excepted: the node's driver brings it).
resolved() {
  local out
  out=$(ldd "$1") || die "ldd $1 failed"
  if grep 'not found' <<<"$out" | grep -v 'libcuda\.so\.1' >&2; then
    die "$1 has unresolved libraries (above)"
  fi
  awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' <<<"$out"
}

mode=${1:-}
case $mode in
  cpu)
    [ $# -eq 4 ] || die "usage: stage.sh cpu BIN SITE OUT"
    bin=$2 site=$(readlink -f "$3") out=$4
    rm -rf "$out" && put_bin "$bin" "$out"
    exe=$out/bin/$(basename "$bin")
    # A binary built where libtorch_cuda's own dependencies resolve links it
    # (subserver/libtorch_link.rs) although the CPU path never calls into it;
    # the CPU image drops that entry, as a build without them would have.
    if readelf -d "$exe" | grep -q 'NEEDED.*\[libtorch_cuda\.so\]'; then
      command -v patchelf >/dev/null || die "needs patchelf to drop libtorch_cuda from $exe"
      patchelf --remove-needed libtorch_cuda.so "$exe"
    fi
    # Only what the loader resolves from the pip tree (libtorch_cpu, libc10,
    # libgomp, the CUDA runtime stubs they name); the system's come from the base.
    n=0
    while read -r name path; do
      case $(readlink -f "$path") in
        "$site"/*) put "$path" "$out/lib/$name"; n=$((n + 1)) ;;
      esac
    done < <(resolved "$exe")
    [ "$n" -gt 0 ] || die "$exe resolves nothing from $site (is its RUNPATH there?)"
    if ls "$out/lib" | grep -q 'torch_cuda\|cudnn\|cublas'; then
      die "the CPU stage picked up CUDA libraries: $(ls "$out/lib")"
    fi
    ;;
  cuda)
    [ $# -eq 4 ] || die "usage: stage.sh cuda BIN SITE OUT"
    bin=$2 site=$(readlink -f "$3") out=$4
    rm -rf "$out" && put_bin "$bin" "$out"
    # libtorch_cuda finds the nvidia libraries through its RPATH
    # ($ORIGIN/../../nvidia/*/lib) and dlopens some (cuDNN's engines, NVRTC),
    # so the tree keeps its shape; Python, headers and static archives stay out.
    for f in "$site"/torch/lib/*.so*; do
      case $(basename "$f") in libtorch_python.so | libshm*) continue ;; esac
      put "$f" "$out/site-packages/torch/lib/$(basename "$f")"
    done
    for d in "$site"/nvidia/*/lib; do
      rel=${d#"$site"/}
      for f in "$d"/*.so*; do put "$f" "$out/site-packages/$rel/$(basename "$f")"; done
    done
    exe=$out/bin/$(basename "$bin")
    # The image's LD_LIBRARY_PATH (deploy/Dockerfile), pointed at the stage.
    LD_LIBRARY_PATH=$out/site-packages/torch/lib:$out/site-packages/nvidia/cu13/lib resolved "$exe" \
      | awk -v out="$out" '$2 !~ "^" out && $2 !~ "^/(usr/)?lib" { print; bad = 1 } END { exit bad }' \
      || die "$exe resolves the libraries above outside the stage"
    readelf -d "$exe" | grep -q 'NEEDED.*\[libtorch_cuda\.so\]' \
      || die "$exe does not link libtorch_cuda (build it with TOKENROUTER_LINK_CUDA=1)"
    ;;
  operator)
    [ $# -eq 3 ] || die "usage: stage.sh operator BIN OUT"
    rm -rf "$3" && put_bin "$2" "$3"
    resolved "$3/bin/$(basename "$2")" >/dev/null
    ;;
  *) die "usage: stage.sh cpu|cuda|operator ..." ;;
esac
echo "stage.sh: $mode -> $(du -shL "${!#}" | cut -f1) in ${!#}"
