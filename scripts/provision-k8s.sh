#!/usr/bin/env bash
# Provision a local Kubernetes control plane for escher's integration tests:
#   etcd (Debian trixie's etcd-server 3.5, unpacked without installing it; bookworm's 3.4
#   when that fails), kube-apiserver and kube-scheduler (v1.20.2, built from Debian
#   bookworm's `kubernetes` source package).  No kubelet.
#
# Results are cached under ${ESCHER_K8S_CACHE:-$HOME/.cache/escher-k8s}:
#   bin/etcd bin/kube-apiserver bin/kube-scheduler   the binaries tests use
#   apt/                                             private apt state for the newer etcd
#   gopath/src/k8s.io/kubernetes                     the unpacked source tree
#   go-build/                                        the Go build cache (fast rebuilds)
#
# Idempotent: when the cached binaries exist it exits immediately.
# Usage: scripts/provision-k8s.sh [--force]   (--force rebuilds the binaries)
# Nothing is downloaded except through apt.  Works non-interactively (CI=true, no stdin).
set -euo pipefail

CACHE="${ESCHER_K8S_CACHE:-$HOME/.cache/escher-k8s}"
BIN="$CACHE/bin"
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

START=$(date +%s)
log() { printf '[provision-k8s %4ss] %s\n' "$(( $(date +%s) - START ))" "$*"; }

have_all() {
  [[ -x "$BIN/etcd" && -x "$BIN/kube-apiserver" && -x "$BIN/kube-scheduler" ]]
}

# etcd is settled when it is 3.5+, or when fetching it failed once (marker file).
etcd_settled() {
  "$BIN/etcd" --version 2>/dev/null | grep -q 'Version: 3\.[5-9]' || [[ -f "$CACHE/apt/etcd-fallback" ]]
}

if [[ $FORCE == 0 ]] && have_all && etcd_settled; then
  log "cached binaries present in $BIN; nothing to do"
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [[ $(id -u) != 0 ]]; then
  if command -v sudo >/dev/null; then SUDO="sudo -n"; else
    echo "provision-k8s: need root or passwordless sudo for apt-get" >&2; exit 1; fi
fi
APT_OPTS=(-y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

mkdir -p "$BIN" "$CACHE/src"

# ---------------------------------------------------------------- apt packages
PKGS=(golang-go etcd-server openssl dpkg-dev ca-certificates)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# A deb-src entry is required for `apt-get source`.  Mirror the machine's own
# Debian `deb` entries (deb822 *.sources files or one-line sources.list).
ensure_deb_src() {
  if grep -rqsE '^[[:space:]]*(deb-src[[:space:]]|Types:.*deb-src)' \
       /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null; then
    return 1   # already configured; nothing added
  fi
  local out=/etc/apt/sources.list.d/escher-deb-src.sources added=0 tmp
  tmp=$(mktemp)
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    grep -qiE '^URIs:.*debian' "$f" || continue
    # Keep only the deb822 stanzas that contain "Types: deb", retyped deb-src.
    awk 'BEGIN{RS=""; ORS="\n\n"} /(^|\n)Types:[^\n]*(^|[ \t])deb([ \t]|\n|$)/ {
           sub(/Types:[^\n]*/, "Types: deb-src"); print }' "$f" >> "$tmp"
    added=1
  done
  if [[ $added == 0 && -f /etc/apt/sources.list ]]; then
    out=/etc/apt/sources.list.d/escher-deb-src.list
    sed -nE 's/^[[:space:]]*deb([[:space:]]+)/deb-src\1/p' /etc/apt/sources.list > "$tmp"
    [[ -s "$tmp" ]] && added=1
  fi
  if [[ $added == 0 ]]; then
    rm -f "$tmp"
    echo "provision-k8s: could not derive a deb-src entry from /etc/apt/sources*" >&2
    exit 1
  fi
  log "adding deb-src entries in $out"
  $SUDO install -m 0644 "$tmp" "$out"
  rm -f "$tmp"
  return 0
}

SRC_TREE="$CACHE/gopath/src/k8s.io/kubernetes"
need_source=0
[[ -f "$SRC_TREE/cmd/kube-apiserver/apiserver.go" ]] || need_source=1

did_update=0
apt_update() { [[ $did_update == 1 ]] && return 0; log "apt-get update"; $SUDO apt-get update -q </dev/null >/dev/null; did_update=1; }

if [[ $need_source == 1 ]]; then
  if ensure_deb_src; then apt_update; fi
fi
if (( ${#missing[@]} )); then
  apt_update
  log "apt-get install ${missing[*]}"
  $SUDO apt-get install "${APT_OPTS[@]}" --no-install-recommends "${missing[@]}" </dev/null >/dev/null
fi

# ---------------------------------------------------------------------- etcd
# A newer etcd (3.5) from the next Debian release, through a private apt configuration
# (its own sources list, lists and archives under $CACHE/apt): the machine's apt sources
# and installed packages are left as they are. Falls back to the installed 3.4.
ETCD_SUITE="${ESCHER_ETCD_SUITE:-trixie}"
newer_etcd() {
  local apt="$CACHE/apt" uri
  uri=$(grep -hsE '^URIs:.*debian/?$' /etc/apt/sources.list.d/*.sources | head -1 | awk '{print $2}')
  [[ -n "$uri" ]] || uri=$(sed -nE 's|^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+/debian/?)[[:space:]].*|\2|p' \
                            /etc/apt/sources.list 2>/dev/null | head -1)
  [[ -n "$uri" ]] || return 1
  mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/unpacked"
  printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' \
    "$uri" "$ETCD_SUITE" > "$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache::Archives=$apt/archives"
              -o "Dir::Cache=$apt" -o Debug::NoLocking=1 -q)
  apt-get "${opts[@]}" update </dev/null >"$apt/update.log" 2>&1 || return 1
  rm -f "$apt"/etcd-server_*.deb
  (cd "$apt" && apt-get "${opts[@]}" download etcd-server </dev/null >"$apt/download.log" 2>&1) || return 1
  rm -rf "$apt/unpacked" && mkdir -p "$apt/unpacked"
  dpkg -x "$apt"/etcd-server_*.deb "$apt/unpacked" || return 1
  local bin="$apt/unpacked/usr/bin/etcd"
  "$bin" --version >/dev/null 2>&1 || return 1
  rm -rf "$apt/lists"   # the suite's package lists are only needed for the download
  install -m 0755 "$bin" "$BIN/etcd"
}
if [[ $FORCE == 1 || ! -x "$BIN/etcd" ]] || ! etcd_settled; then
  if newer_etcd; then
    rm -f "$CACHE/apt/etcd-fallback"
    log "etcd from Debian $ETCD_SUITE (unpacked into $CACHE/apt, not installed)"
  else
    mkdir -p "$CACHE/apt" && touch "$CACHE/apt/etcd-fallback"
    log "no etcd from Debian $ETCD_SUITE (see $CACHE/apt/*.log); using the installed one"
    ETCD=$(command -v etcd || true)
    [[ -n "$ETCD" ]] || ETCD=/usr/bin/etcd
    install -m 0755 "$ETCD" "$BIN/etcd"
  fi
fi
log "etcd: $("$BIN/etcd" --version | head -1)"

if [[ $FORCE == 0 && -x "$BIN/kube-apiserver" && -x "$BIN/kube-scheduler" ]]; then
  log "done (kube binaries already cached)"; exit 0
fi

# -------------------------------------------------------------------- source
if [[ $need_source == 1 ]]; then
  apt_update
  work="$CACHE/src/apt-source"
  rm -rf "$work"; mkdir -p "$work"
  log "apt-get source kubernetes (into $work)"
  (cd "$work" && apt-get source -q kubernetes </dev/null >/dev/null 2>"$work/apt-source.log") || {
    cat "$work/apt-source.log" >&2; exit 1; }
  tree=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -1)
  [[ -n "$tree" && -d "$tree/vendor" ]] || { echo "provision-k8s: unexpected source layout in $work" >&2; exit 1; }
  mkdir -p "$(dirname "$SRC_TREE")"
  rm -rf "$SRC_TREE"
  mv "$tree" "$SRC_TREE"
  rm -rf "$work"
  log "source tree ready: $SRC_TREE"
fi

# --------------------------------------------------------------------- build
export GOPATH="$CACHE/gopath"
export GOCACHE="$CACHE/go-build"
export GO111MODULE=off GOPROXY=off GOFLAGS="" CGO_ENABLED=0
export PATH="/usr/lib/go/bin:$PATH"
log "$(go version)"
cd "$SRC_TREE"

OPENAPI_OUT=pkg/generated/openapi/zz_generated.openapi.go
if [[ ! -s "$OPENAPI_OUT" ]]; then
  log "building openapi-gen (vendored k8s.io/kube-openapi)"
  go build -o "$CACHE/gopath/bin/openapi-gen" k8s.io/kubernetes/vendor/k8s.io/kube-openapi/cmd/openapi-gen
  # Same input set as Makefile.generated_files (KUBE_OPENAPI_TAG_FILES):
  # every Go dir (staging/src -> vendor) having a "+k8s:openapi-gen=" tag.
  dirs=$(find -H . \( -path './_*' -o -path './.*' -o -path ./vendor -o -path ./debian \) -prune \
           -o -type f -name '*.go' -print \
         | xargs grep -l '^// *+k8s:' \
         | xargs grep -l '+k8s:openapi-gen=' \
         | sed -e 's|/[^/]*$||' -e 's|^\./||' -e 's|^staging/src|vendor|' \
         | grep -vE '^vendor/k8s.io/(code-generator|sample-apiserver)/' \
         | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
  log "generating $OPENAPI_OUT from $(tr ',' '\n' <<<"$dirs" | wc -l) packages"
  "$CACHE/gopath/bin/openapi-gen" --logtostderr \
      -i "$dirs" \
      -p k8s.io/kubernetes/pkg/generated/openapi \
      -O zz_generated.openapi \
      -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
      -r "$CACHE/openapi_violations.report" >"$CACHE/openapi-gen.log" 2>&1 || {
    tail -30 "$CACHE/openapi-gen.log" >&2; exit 1; }
  [[ -s "$OPENAPI_OUT" ]] || { echo "provision-k8s: openapi-gen produced no $OPENAPI_OUT" >&2; exit 1; }
fi

V=k8s.io/kubernetes/vendor/k8s.io
LDFLAGS="-s -w"
for pkg in component-base/version client-go/pkg/version; do
  LDFLAGS+=" -X $V/$pkg.gitVersion=v1.20.2 -X $V/$pkg.gitMajor=1 -X $V/$pkg.gitMinor=20"
  LDFLAGS+=" -X $V/$pkg.gitTreeState=clean -X $V/$pkg.buildDate=1970-01-01T00:00:00Z"
done

for cmd in kube-apiserver kube-scheduler; do
  log "go build cmd/$cmd (cold: several minutes on 2 cores)"
  go build -ldflags "$LDFLAGS" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
  mv -f "$BIN/$cmd.tmp" "$BIN/$cmd"
  log "built $BIN/$cmd ($(du -h "$BIN/$cmd" | cut -f1))"
done

"$BIN/kube-apiserver" --version
have_all && log "done; binaries in $BIN"
