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
# Optional components, built only when named:
#   kubeadm  renders the test data under test/testdata/kubeadm
#   capi     the Cluster API core manager (hack/tools/capi), with its CRDs and webhook
#            configurations copied out of the module
#   flux     Flux's source-controller and kustomize-controller (hack/tools/flux), with
#            their CRDs
#   kubelet, kube-proxy
#            the node components that hack/node.sh runs on a real node (kubelet compiles
#            for about 7 minutes on 2 cores)
# capi and flux are folders named after their versions under the toolchain folder
# (`dir capi` prints it), so that a version bump in their tool module builds anew.
#
# Usage:
#   hack/toolchain.sh [build] [component...]   build what is missing (default: everything
#                                              but the optional components)
#   hack/toolchain.sh dir [capi|flux]          print the versioned binary folder
#   hack/toolchain.sh id                       print the toolchain id
set -euo pipefail
# The Go toolchain is pinned, as in the Makefile and go.mod; the go command fetches it from
# the module proxy when it is not installed. It is not part of the toolchain id: binaries
# that an older Go compiled stay valid.
export GOTOOLCHAIN=go1.27.3

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=${ROOT}/hack/tools
ALL_COMPONENTS=(etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kwok)
# Built only when named (see above).
OPTIONAL_COMPONENTS=(kubeadm kubelet kube-proxy capi flux)
# BUNDLES are the optional components that are folders: binaries, CRDs and manifests.
BUNDLES=(capi flux)

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

# compile builds package $3 of tool module $2 into the file $4, with the progress lines
# and the duration record of name $1 and extra linker flags $5.
compile() {
  local name=$1 module=$2 pkg=$3 out=$4 ldflags=${5:-} last start ticker rc=0
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
    -o "${out}.tmp" "${pkg}") || rc=$?
  kill "${ticker}" 2>/dev/null || true
  wait "${ticker}" 2>/dev/null || true
  ((rc == 0)) || die "compiling ${name} failed (exit ${rc})"
  mv "${out}.tmp" "${out}"
  record_duration "${name}" $(($(date +%s) - start))
  log "built ${name} in $(fmt_duration $(($(date +%s) - start)))"
}

# build_component compiles one component into the cache folder.
build_component() {
  local name=$1 module pkg ldflags=""
  case "${name}" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl|kubeadm|kubelet|kube-proxy)
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
  compile "${name}" "${module}" "${pkg}" "${CACHE}/${name}" "${ldflags}"
}

# is_bundle tells whether component $1 is a folder (capi, flux).
is_bundle() {
  [[ " ${BUNDLES[*]} " == *" $1 "* ]]
}

# module_dir prints where the module cache holds module $2 of tool module $1.
module_dir() {
  (cd "${TOOLS}/$1" && go mod download "$2" && go list -m -f '{{.Dir}}' "$2")
}

# bundle_name prints the folder name of bundle $1: the component and its pinned versions.
bundle_name() {
  case "$1" in
    capi) echo "capi-$(module_version capi sigs.k8s.io/cluster-api)" ;;
    flux)
      echo "flux_source-controller-$(module_version flux github.com/fluxcd/source-controller)_kustomize-controller-$(module_version flux github.com/fluxcd/kustomize-controller)"
      ;;
    *) die "unknown bundle $1 (known: ${BUNDLES[*]})" ;;
  esac
}

# bundle_binaries prints the binaries of bundle $1 (the names of their duration records).
bundle_binaries() {
  case "$1" in
    capi) echo cluster-api-manager ;;
    flux) echo source-controller kustomize-controller ;;
  esac
}

# copy_yaml copies the YAML files of folder $1 into folder $2.
copy_yaml() {
  [[ -d $1 ]] || die "$1 is missing"
  mkdir -p "$2"
  cp "$1"/*.yaml "$2"/
  chmod u+w "$2"/*.yaml
}

# build_bundle compiles the binaries of bundle $1 into the cache folder $2 and copies the
# CRDs (crds/) and manifests its tests apply out of the modules.
build_bundle() {
  local name=$1 out=$2 tmp=$2.tmp dir version
  rm -rf "${tmp}"
  mkdir -p "${tmp}"
  case "${name}" in
    capi)
      version=$(module_version capi sigs.k8s.io/cluster-api)
      compile cluster-api-manager capi sigs.k8s.io/cluster-api/core "${tmp}/cluster-api-manager" \
        "-X sigs.k8s.io/cluster-api/version.gitVersion=${version} -X sigs.k8s.io/cluster-api/version.gitTreeState=clean"
      dir=$(module_dir capi sigs.k8s.io/cluster-api)
      copy_yaml "${dir}/core/config/crd/bases" "${tmp}/crds"
      # The webhook configurations name a Service; the suite points them at the manager.
      cp "${dir}/core/config/webhook/manifests.yaml" "${tmp}/webhooks.yaml"
      chmod u+w "${tmp}/webhooks.yaml"
      ;;
    flux)
      compile source-controller flux github.com/fluxcd/source-controller "${tmp}/source-controller"
      compile kustomize-controller flux github.com/fluxcd/kustomize-controller "${tmp}/kustomize-controller"
      copy_yaml "$(module_dir flux github.com/fluxcd/source-controller)/config/crd/bases" "${tmp}/crds"
      copy_yaml "$(module_dir flux github.com/fluxcd/kustomize-controller)/config/crd/bases" "${tmp}/crds"
      ;;
  esac
  rm -rf "${out}"
  mv "${tmp}" "${out}"
}

# plan prints which of the components $@ need compiling, and how long they took last time.
plan() {
  local name last todo=() total=0 unknown=()
  local binary bundle
  for name in "$@"; do
    if is_bundle "${name}"; then
      bundle=$(bundle_name "${name}")
      [[ -d "${DEST}/${bundle}" || -d "${CACHE}/${bundle}" ]] && continue
      todo+=("${name}")
      for binary in $(bundle_binaries "${name}"); do
        last=$(last_duration "${binary}")
        if [[ -n ${last} ]]; then total=$((total + last)); else unknown+=("${binary}"); fi
      done
      continue
    fi
    [[ -x "${DEST}/${name}" || -x "${CACHE}/${name}" ]] && continue
    todo+=("${name}")
    last=$(last_duration "${name}")
    if [[ -n ${last} ]]; then total=$((total + last)); else unknown+=("${name}"); fi
  done
  [[ ${#todo[@]} -gt 0 ]] || return 0
  local estimate="the last builds on this machine took $(fmt_duration "${total}") in all"
  if [[ ${total} -eq 0 ]]; then
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
  local bundle
  for name in "${components[@]}"; do
    if is_bundle "${name}"; then
      bundle=$(bundle_name "${name}")
      [[ -d "${DEST}/${bundle}" ]] && continue
      if [[ -d "${CACHE}/${bundle}" ]]; then
        log "${name}: using cached build in ${CACHE}/${bundle}"
      else
        build_bundle "${name}" "${CACHE}/${bundle}"
      fi
      rm -rf "${DEST}/${bundle}.tmp"
      cp -r "${CACHE}/${bundle}" "${DEST}/${bundle}.tmp" && mv "${DEST}/${bundle}.tmp" "${DEST}/${bundle}"
      continue
    fi
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
  dir)
    if [[ $# -gt 1 ]]; then
      is_bundle "$2" || die "dir takes a bundle (${BUNDLES[*]}), not $2"
      echo "${DEST}/$(bundle_name "$2")"
    else
      echo "${DEST}"
    fi
    ;;
  id) echo "${TOOLCHAIN_ID}" ;;
  -h|--help|help) sed -n '2,/^set -euo/{/^#/p;}' "$0" | sed 's/^# \{0,1\}//' ;;
  *) cmd_build "$@" ;;
esac
