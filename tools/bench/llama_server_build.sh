#!/usr/bin/env bash
# Builds llama.cpp's own C++ OpenAI server, `llama-server`, for
# `make bench-llamacpp`: from the llama.cpp sources that the PyPI sdist of
# llama-cpp-python vendors (vendor/llama.cpp; PyPI is reachable where GitHub
# is not), with this CPU's SIMD but without AMX (llama_cmake_args.sh says
# why), no network access at build time (no libcurl, no OpenSSL, no Web UI
# download), niced so that the machine's other work keeps its cores.
#
# Usage: llama_server_build.sh OUT_DIR VENV
#   OUT_DIR  gets bin/llama-server, VERSION and the stamp .built
#   VENV     a Python venv for CMake (pip's `cmake` wheel when the system
#            has none) and for `pip download` of the sdist
# JOBS (default 2) sets make's -j.
set -euo pipefail
OUT=${1:?OUT_DIR}
VENV=${2:?VENV}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PKG=${LLAMA_SDIST:-llama-cpp-python==0.3.36}
JOBS=${JOBS:-2}
mkdir -p "$OUT/src"
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
pip=("$VENV/bin/pip" install -q --disable-pip-version-check)
# scikit-build-core is llama-cpp-python's build backend: `pip download`
# asks it for the sdist's metadata (it runs no compiler for that).
"${pip[@]}" cmake scikit-build-core
CMAKE=$VENV/bin/cmake

# The sdist, not a wheel: we compile llama.cpp ourselves.
sdist=$(ls "$OUT"/src/*.tar.gz 2>/dev/null | head -1 || true)
if [ -z "$sdist" ]; then
  "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
    --no-build-isolation "$PKG" -d "$OUT/src"
  sdist=$(ls "$OUT"/src/*.tar.gz | head -1)
fi
tree=$OUT/src/$(basename "$sdist" .tar.gz)
test -d "$tree" || tar -xzf "$sdist" -C "$OUT/src"
llama=$tree/vendor/llama.cpp
test -f "$llama/CMakeLists.txt" || { echo "no vendor/llama.cpp in $sdist" >&2; exit 1; }

# Only the server and what it links; every option that would fetch
# something at build time is off (LLAMA_USE_PREBUILT_UI downloads the Web
# UI from Hugging Face; without it the server serves no UI, which the bench
# does not use). Static, so the binary runs from anywhere.
read -r -a simd <<<"$("$HERE/llama_cmake_args.sh")"
"$CMAKE" -S "$llama" -B "$OUT/build" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF "${simd[@]}" \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_COMMON=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_NUMBER=0 >"$OUT/configure.log"
(cd "$OUT/build" && nice -n 19 make -j"$JOBS" llama-server)
mkdir -p "$OUT/bin"
cp "$OUT/build/bin/llama-server" "$OUT/bin/llama-server"
"$OUT/bin/llama-server" --version >"$OUT/VERSION" 2>&1 || true
echo "$PKG" >>"$OUT/VERSION"
touch "$OUT/.built"
