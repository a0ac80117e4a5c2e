#!/usr/bin/env bash
# toolchain.sh builds the pinned Kubernetes components that envtest, the e2e suite and
# `make demo` run: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd
# and kwok. Everything is compiled from the Go module proxy; no binary is ever downloaded.
#
# The versions are pinned by the tool modules under hack/tools/{kube,etcd,kwok}. Binaries
# land in bin/k8s/<toolchain id>/ and are also kept in a cache outside the work tree
# ($KADDONS_TOOLCHAIN_CACHE, default ~/.cache/kaddons/toolchain), so a fresh clone on the
# same machine (CI) copies them instead of compiling Kubernetes again.
#
# Usage:
#   hack/toolchain.sh [build] [component...]   build what is missing (default: everything
#                                              but the optional kubeadm)
#   hack/toolchain.sh dir                      print the versioned binary folder
#   hack/toolchain.sh id                       print the toolchain id
set -euo pipefail
# The Go toolchain is pinned, as in the Makefile and go.mod; the go command fetches it from
# the module proxy when it is not installed. It is not part of the toolchain id: binaries
# that an older Go compiled stay valid.
export GOTOOLCHAIN=go1.27.3

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=${ROOT}/hack/tools
ALL_COMPONENTS=(etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kwok)
# Built only when named: kubeadm renders the test data under test/testdata/kubeadm.
OPTIONAL_COMPONENTS=(kubeadm)

log() { printf '[toolchain] %s\n' "$*" >&2; }
die() { printf '[toolchain] error: %s\n' "$*" >&2; exit 1; }

# module_version prints the version the tool module in $1 requires of module $2.
module_version() {
  (cd "${TOOLS}/$1" && go list -m -f '{{.Version}}' "$2")
}

K8S_VERSION=$(module_version kube k8s.io/kubernetes)
ETCD_VERSION=$(module_version etcd go.etcd.io/etcd/server/v3)
KWOK_VERSION=$(module_version kwok sigs.k8s.io/kwok)
TOOLCHAIN_ID="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
DEST=${ROOT}/bin/k8s/${TOOLCHAIN_ID}
CACHE=${KADDONS_TOOLCHAIN_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/kaddons/toolchain}/${TOOLCHAIN_ID}
# How long each component took to compile the last time, on this machine (any toolchain
# id): the estimates of the progress lines.
DURATIONS=${CACHE%/*}/durations
# Seconds between two progress lines while a component compiles.
PROGRESS_INTERVAL=${KADDONS_TOOLCHAIN_PROGRESS_INTERVAL:-30}

# fmt_duration prints $1 seconds as 4m05s, or 42s.
fmt_duration() {
  if (($1 >= 60)); then printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); else printf '%ds' "$1"; fi
}

# last_duration prints the seconds the last compilation of component $1 took (nothing if
# there was none).
last_duration() {
  [[ -f ${DURATIONS} ]] || return 0
  awk -v n="$1" '$1 == n && $2 ~ /^[0-9]+$/ { d = $2 } END { if (d != "") print d }' "${DURATIONS}"
}

# record_duration remembers that component $1 compiled in $2 seconds.
record_duration() {
  local tmp
  mkdir -p "${DURATIONS%/*}"
  tmp=$(mktemp "${DURATIONS}.XXXXXX")
  { if [[ -f ${DURATIONS} ]]; then awk -v n="$1" '$1 != n' "${DURATIONS}"; fi; echo "$1 $2"; } >"${tmp}"
  mv "${tmp}" "${DURATIONS}"
}

# progress prints, every PROGRESS_INTERVAL seconds until it is killed, how long component
# $1 has been compiling since $2 (epoch seconds), against the last build's $3 seconds.
progress() {
  local name=$1 start=$2 last=$3 elapsed estimate
  while sleep "${PROGRESS_INTERVAL}"; do
    elapsed=$(($(date +%s) - start))
    if [[ -z ${last} ]]; then
      estimate="no earlier build on this machine to compare with"
    elif ((elapsed < last)); then
      estimate="the last build took $(fmt_duration "${last}"): about $(fmt_duration $((last - elapsed))) left"
    else
      estimate="longer than the last build ($(fmt_duration "${last}"))"
    fi
    log "still compiling ${name}: $(fmt_duration "${elapsed}") so far; ${estimate}"
  done
}

# build_component compiles one component into the cache folder.
build_component() {
  local name=$1 module pkg ldflags=""
  case "${name}" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl|kubeadm)
      module=kube; pkg=k8s.io/kubernetes/cmd/${name}
      local minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
      local major=${K8S_VERSION#v}; major=${major%%.*}
      local vars=(
        "gitVersion=${K8S_VERSION}" "gitMajor=${major}" "gitMinor=${minor}"
        "gitTreeState=clean" "buildDate=1970-01-01T00:00:00Z"
      )
      for v in "${vars[@]}"; do
        ldflags+=" -X k8s.io/component-base/version.${v} -X k8s.io/client-go/pkg/version.${v}"
      done
      ;;
    etcd) module=etcd; pkg=go.etcd.io/etcd/server/v3 ;;
    kwok) module=kwok; pkg=sigs.k8s.io/kwok/cmd/kwok ;;
    *) die "unknown component ${name} (known: ${ALL_COMPONENTS[*]} ${OPTIONAL_COMPONENTS[*]})" ;;
  esac
  local last start ticker rc=0
  last=$(last_duration "${name}")
  if [[ -n ${last} ]]; then
    log "compiling ${name} from ${pkg}; the last build on this machine took $(fmt_duration "${last}")"
  else
    log "compiling ${name} from ${pkg} (this compiles from source and can take minutes)"
  fi
  start=$(date +%s)
  progress "${name}" "${start}" "${last}" &
  ticker=$!
  (cd "${TOOLS}/${module}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w ${ldflags}" \
    -o "${CACHE}/${name}.tmp" "${pkg}") || rc=$?
  kill "${ticker}" 2>/dev/null || true
  wait "${ticker}" 2>/dev/null || true
  ((rc == 0)) || die "compiling ${name} failed (exit ${rc})"
  mv "${CACHE}/${name}.tmp" "${CACHE}/${name}"
  record_duration "${name}" $(($(date +%s) - start))
  log "built ${name} in $(fmt_duration $(($(date +%s) - start)))"
}

# plan prints which of the components $@ need compiling, and how long they took last time.
plan() {
  local name last todo=() total=0 unknown=()
  for name in "$@"; do
    [[ -x "${DEST}/${name}" || -x "${CACHE}/${name}" ]] && continue
    todo+=("${name}")
    last=$(last_duration "${name}")
    if [[ -n ${last} ]]; then total=$((total + last)); else unknown+=("${name}"); fi
  done
  [[ ${#todo[@]} -gt 0 ]] || return 0
  local estimate="the last builds on this machine took $(fmt_duration "${total}") in all"
  if [[ ${#unknown[@]} -eq ${#todo[@]} ]]; then
    estimate="no earlier build on this machine: expect minutes each"
  elif [[ ${#unknown[@]} -gt 0 ]]; then
    estimate+=", plus ${unknown[*]} never built here"
  fi
  log "${#todo[@]} component(s) to compile: ${todo[*]} (${estimate})"
}

# install_stages copies the stage configs that kwok's module ships (node/fast,
# node/heartbeat-with-lease, pod/fast, ...) so the local cluster can pick from them.
install_stages() {
  [[ -d "${CACHE}/kwok-stages" ]] && return 0
  local dir
  dir=$(cd "${TOOLS}/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  [[ -d "${dir}/kustomize/stage" ]] || die "kwok module at ${dir} has no kustomize/stage"
  rm -rf "${CACHE}/kwok-stages.tmp"
  cp -r "${dir}/kustomize/stage" "${CACHE}/kwok-stages.tmp"
  chmod -R u+w "${CACHE}/kwok-stages.tmp"
  # Only the YAML: a stray _test.go under bin/ would join the main module's packages.
  find "${CACHE}/kwok-stages.tmp" -type f ! -name '*.yaml' -delete
  mv "${CACHE}/kwok-stages.tmp" "${CACHE}/kwok-stages"
}

cmd_build() {
  local components=("$@")
  [[ ${#components[@]} -gt 0 ]] || components=("${ALL_COMPONENTS[@]}")
  mkdir -p "${CACHE}" "${DEST}"
  plan "${components[@]}"
  for name in "${components[@]}"; do
    if [[ -x "${DEST}/${name}" ]]; then
      continue
    fi
    if [[ ! -x "${CACHE}/${name}" ]]; then
      build_component "${name}"
    else
      log "${name}: using cached build in ${CACHE}"
    fi
    cp "${CACHE}/${name}" "${DEST}/${name}.tmp" && mv "${DEST}/${name}.tmp" "${DEST}/${name}"
    if [[ ${name} == kwok ]]; then
      install_stages
      rm -rf "${DEST}/kwok-stages" && cp -r "${CACHE}/kwok-stages" "${DEST}/kwok-stages"
    fi
  done
  log "ready: ${DEST}"
}

case "${1:-build}" in
  build) shift || true; cmd_build "$@" ;;
  dir) echo "${DEST}" ;;
  id) echo "${TOOLCHAIN_ID}" ;;
  -h|--help|help) sed -n '2,/^set -euo/{/^#/p;}' "$0" | sed 's/^# \{0,1\}//' ;;
  *) cmd_build "$@" ;;
esac
