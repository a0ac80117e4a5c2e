#!/usr/bin/env bash
# cosign.sh builds the cosign CLI that `make test-cosign` signs bundles with, from the Go
# module proxy (no binary is downloaded), at the version pinned by the tool module
# hack/tools/cosign, and prints the binary's path.
#
# The binary is kept in $KADDONS_COSIGN_CACHE/<version>/cosign (default
# ~/.cache/kaddons/cosign), outside the work tree, so that only the first run on a machine
# compiles it (a few minutes); a version bump in hack/tools/cosign builds anew.
#
# Usage:
#   hack/cosign.sh [build]   build the pinned cosign when missing; print its path
#   hack/cosign.sh path      print where the pinned cosign is (built or not)
#   hack/cosign.sh version   print the pinned version
set -euo pipefail
# The Go toolchain is pinned, as in the Makefile and go.mod.
export GOTOOLCHAIN=go1.27.3

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODULE_DIR=${ROOT}/hack/tools/cosign
PKG=github.com/sigstore/cosign/v3/cmd/cosign

log() { printf '[cosign] %s\n' "$*" >&2; }
die() { printf '[cosign] error: %s\n' "$*" >&2; exit 1; }

VERSION=$(cd "${MODULE_DIR}" && go list -m -f '{{.Version}}' github.com/sigstore/cosign/v3)
CACHE=${KADDONS_COSIGN_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/kaddons/cosign}
BIN=${CACHE}/${VERSION}/cosign

build() {
  if [[ -x ${BIN} ]]; then
    echo "${BIN}"
    return
  fi
  mkdir -p "${BIN%/*}"
  log "compiling cosign ${VERSION} from ${PKG} (the first time on this machine takes minutes)"
  local start tmp rc=0
  start=$(date +%s)
  tmp=$(mktemp "${BIN}.XXXXXX")
  # The version variables are those of cosign's own Makefile (LDFLAGS).
  (cd "${MODULE_DIR}" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=${VERSION} -X sigs.k8s.io/release-utils/version.gitTreeState=clean" \
    -o "${tmp}" "${PKG}") || rc=$?
  if ((rc != 0)); then
    rm -f "${tmp}"
    die "compiling cosign failed (exit ${rc})"
  fi
  chmod 0755 "${tmp}"
  mv "${tmp}" "${BIN}"
  log "built cosign ${VERSION} in $(($(date +%s) - start))s: ${BIN}"
  echo "${BIN}"
}

case "${1:-build}" in
  build) build ;;
  path) echo "${BIN}" ;;
  version) echo "${VERSION}" ;;
  *) die "unknown command $1 (build, path, version)" ;;
esac
