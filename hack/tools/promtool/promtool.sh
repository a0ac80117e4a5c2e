#!/usr/bin/env bash
# promtool.sh builds Prometheus's promtool, which `make test-alerts` runs the unit tests of
# the alerting rules with (config/prometheus/alerts_test.yaml), from the Go module proxy
# (no binary is downloaded), at the version this tool module pins, and prints the
# binary's path.
#
# The binary is kept in $KADDONS_PROMTOOL_CACHE/promtool-<version> (default
# ~/.cache/kaddons/bin), outside the work tree, so that only the first run on a machine
# compiles it (about 5 minutes cold on 2 shared cores, docs/monitoring.md); a version bump in
# hack/tools/promtool/go.mod builds anew.
#
# Usage:
#   hack/tools/promtool/promtool.sh [build]   build the pinned promtool when missing; print its path
#   hack/tools/promtool/promtool.sh path      print where the pinned promtool is (built or not)
#   hack/tools/promtool/promtool.sh version   print the pinned version
#   hack/tools/promtool/promtool.sh test-rules RULE TESTS
#       check the rules of the PrometheusRule object in file RULE and run the rule tests
#       in file TESTS against them (building promtool when missing)
set -euo pipefail
# The Go toolchain is pinned, as in the Makefile and go.mod.
export GOTOOLCHAIN=go1.27.3

MODULE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MODULE=github.com/prometheus/prometheus
PKG=${MODULE}/cmd/promtool

log() { printf '[promtool] %s\n' "$*" >&2; }
die() { printf '[promtool] error: %s\n' "$*" >&2; exit 1; }

VERSION=$(cd "${MODULE_DIR}" && go list -m -f '{{.Version}}' "${MODULE}")
CACHE=${KADDONS_PROMTOOL_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/kaddons/bin}
BIN=${CACHE}/promtool-${VERSION}

# release prints the Prometheus release of a module version: v0.316.0 is 3.16.0.
release() {
  local v=${1#v0.}
  printf '%s.%s.%s' "${v:0:1}" "$((10#${v:1:2}))" "${v#*.}"
}

build() {
  if [[ -x ${BIN} ]]; then
    echo "${BIN}"
    return
  fi
  mkdir -p "${CACHE}"
  log "compiling promtool ${VERSION} from ${PKG} (the first time on this machine takes minutes)"
  local start tmp rc=0 common=github.com/prometheus/common/version
  start=$(date +%s)
  tmp=$(mktemp "${BIN}.XXXXXX")
  # The version variables are those of Prometheus's own build (.promu.yml). remove_all_sd
  # leaves out the service-discovery plugins (the clouds' SDKs), which rule tests never
  # use: Prometheus's own build tag for custom builds, it roughly halves the compilation.
  (cd "${MODULE_DIR}" && CGO_ENABLED=0 go build -trimpath -tags remove_all_sd \
    -ldflags "-s -w -X ${common}.Version=$(release "${VERSION}") -X ${common}.Branch=HEAD -X ${common}.BuildUser=kaddons" \
    -o "${tmp}" "${PKG}") || rc=$?
  if ((rc != 0)); then
    rm -f "${tmp}"
    die "compiling promtool failed (exit ${rc})"
  fi
  chmod 0755 "${tmp}"
  mv "${tmp}" "${BIN}"
  log "built promtool ${VERSION} in $(($(date +%s) - start))s: ${BIN}"
  echo "${BIN}"
}

# test_rules checks the rules of the PrometheusRule in file $1 and runs promtool's rule
# tests in file $2 against them. promtool reads plain rule files: the object's spec (its
# groups) is written to alerts.rules.yaml, beside a copy of the tests, in a temporary
# folder. spec must be the object's last top-level field.
test_rules() {
  local rule=$1 tests=$2 bin tmp
  [[ -f ${rule} && -f ${tests} ]] || die "usage: $0 test-rules RULE TESTS (files)"
  bin=$(build)
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064 # tmp is local: expand it now.
  trap "rm -rf '${tmp}'" EXIT
  awk 'spec && /^[^ #]/ { spec = 0 } spec { sub(/^  /, ""); print } /^spec:[[:space:]]*$/ { spec = 1 }' \
    "${rule}" >"${tmp}/alerts.rules.yaml"
  [[ -s ${tmp}/alerts.rules.yaml ]] || die "${rule} has no spec"
  cp "${tests}" "${tmp}/"
  "${bin}" check rules "${tmp}/alerts.rules.yaml"
  "${bin}" test rules "${tmp}/${tests##*/}"
}

case "${1:-build}" in
  build) build ;;
  path) echo "${BIN}" ;;
  version) echo "${VERSION}" ;;
  test-rules) test_rules "${2:-}" "${3:-}" ;;
  *) die "unknown command $1 (build, path, version, test-rules)" ;;
esac
