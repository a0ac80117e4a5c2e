#!/usr/bin/env bash
# helm.sh builds the Helm CLI that `make test-chart-helm` compares kaddons' chart renderer
# (internal/channels/helm) with, from the Go module proxy (no binary is downloaded), at
# the version pinned by the tool module hack/tools/helm, and prints the binary's path.
# That version must be the helm.sh/helm/v4 of kaddons' go.mod, so that the CLI and the
# renderer run the same SDK; the build fails otherwise.
#
# The binary is kept in $KADDONS_HELM_CACHE/<version>/helm (default
# ~/.cache/kaddons/helm), outside the work tree, so that only the first run on a machine
# compiles it; a version bump in hack/tools/helm builds anew. It is built without Helm's
# version ldflags, so that .Capabilities.HelmVersion is what the SDK reports inside
# kaddons (`helm version` says v4.3, not v4.3.2).
#
# Usage:
#   hack/helm.sh [build]   build the pinned Helm CLI when missing; print its path
#   hack/helm.sh path      print where the pinned Helm CLI is (built or not)
#   hack/helm.sh version   print the pinned version
set -euo pipefail
# The Go toolchain is pinned, as in the Makefile and go.mod.
export GOTOOLCHAIN=go1.27.3

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODULE_DIR=${ROOT}/hack/tools/helm
PKG=helm.sh/helm/v4/cmd/helm

log() { printf '[helm] %s\n' "$*" >&2; }
die() { printf '[helm] error: %s\n' "$*" >&2; exit 1; }

VERSION=$(cd "${MODULE_DIR}" && go list -m -f '{{.Version}}' helm.sh/helm/v4)
CACHE=${KADDONS_HELM_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/kaddons/helm}
BIN=${CACHE}/${VERSION}/helm

build() {
  local sdk
  sdk=$(cd "${ROOT}" && go list -m -f '{{.Version}}' helm.sh/helm/v4)
  [[ ${sdk} == "${VERSION}" ]] ||
    die "hack/tools/helm pins helm.sh/helm/v4 ${VERSION}, kaddons' go.mod ${sdk}: bump them together"
  if [[ -x ${BIN} ]]; then
    echo "${BIN}"
    return
  fi
  mkdir -p "${BIN%/*}"
  log "compiling helm ${VERSION} from ${PKG} (the first time on this machine takes minutes)"
  local start tmp rc=0
  start=$(date +%s)
  tmp=$(mktemp "${BIN}.XXXXXX")
  (cd "${MODULE_DIR}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${tmp}" "${PKG}") || rc=$?
  if ((rc != 0)); then
    rm -f "${tmp}"
    die "compiling helm failed (exit ${rc})"
  fi
  chmod 0755 "${tmp}"
  mv "${tmp}" "${BIN}"
  log "built helm ${VERSION} in $(($(date +%s) - start))s: ${BIN}"
  echo "${BIN}"
}

case "${1:-build}" in
  build) build ;;
  path) echo "${BIN}" ;;
  version) echo "${VERSION}" ;;
  *) die "unknown command $1 (build, path, version)" ;;
esac
