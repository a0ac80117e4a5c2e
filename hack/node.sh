#!/usr/bin/env bash
# node.sh runs one REAL Kubernetes node on this machine, joined to the cluster of
# hack/local-cluster.sh: Debian's containerd and runc, and a kubelet built from source by
# hack/toolchain.sh. It lives beside kwok's fake nodes; Pods scheduled to it really run.
#
# Usage:
#   hack/node.sh up             install the Debian packages when missing, create the bridge
#                               with the node IP, start the local cluster on that address
#                               (LOCAL_CLUSTER_NODE_IP), containerd and the kubelet, and wait
#                               until the node is registered. Without a CNI config the node
#                               stays NotReady (the CNI add-on provides one).
#   hack/node.sh down [--purge] stop the node and undo every change it made to the host
#                               (see "What up changes on the host" below); stop the local
#                               cluster too when it listens on the node IP; then compare the
#                               host with the snapshot taken before the first `up` and fail
#                               on any difference; --purge also removes the Debian packages
#                               that `up` installed
#   hack/node.sh status         processes, the node's conditions
#   hack/node.sh check          compare the host with the snapshot taken before `up`
#   hack/node.sh images [NAME[:TAG]...]
#                               build the add-on images that are not cached (CoreDNS,
#                               metrics-server, kube-proxy, kube-router: hack/addonimages,
#                               from the Go module proxy and Debian packages; nothing is
#                               pulled) and import each into the node's containerd under the
#                               exact reference its package names; `up` imports those
#                               already built. Names select images (coredns:v1.12.1);
#                               without a running node they are only built
#   hack/node.sh smoke          a temporary bridge+host-local CNI config, a pause Pod that
#                               must become Running on the node, then everything torn
#                               down (cluster included); prints the timings
#
# What up changes on the host, and down undoes: the bridge (KADDONS_NODE_BRIDGE) with the
# node IP; the cgroup KADDONS_NODE_CGROUP_ROOT in every cgroup v1 hierarchy, the cgroups
# runc creates under /sys/fs/cgroup/unified and k8s.io, which `ctr run` (in containerd's
# k8s.io namespace) creates in every hierarchy; the sysctls the kubelet sets
# (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops, ...) and that the bridge CNI
# plugin sets (net.ipv4.ip_forward); /var/lib/kubelet/device-plugins, /var/log/containers,
# /var/log/pods, /var/lib/cni and /run/containerd, which appear whatever the state folders
# are; /run/netns, which containerd makes a shared mount, and the network namespaces and
# veths of Pods; the iptables (nftables) tables the kubelet creates. Everything else lives
# in the state folder.
#
# Environment:
#   KADDONS_NODE_DIR          state folder (default: <repo>/.local/node)
#   KADDONS_NODE_NAME         node name (default: kaddons-node-0)
#   KADDONS_NODE_IP           node IP, on the bridge; also what kube-apiserver binds
#                             (default: 10.254.254.1, private and never routed off the host)
#   KADDONS_NODE_BRIDGE       bridge name (default: kaddons0)
#   KADDONS_NODE_CGROUP_ROOT  the kubelet's cgroupRoot (default: /kaddons-node)
#   KADDONS_NODE_KUBELET_PORT the kubelet's port, on the node IP (default: 10250)
#   KADDONS_NODE_TIMEOUT      seconds to wait for each step (default: 180)
#   LOCAL_CLUSTER_*           passed to hack/local-cluster.sh (LOCAL_CLUSTER_DIR: which cluster)
set -euo pipefail
export GOTOOLCHAIN=go1.27.3

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NODE_DIR=${KADDONS_NODE_DIR:-${ROOT}/.local/node}
NODE_NAME=${KADDONS_NODE_NAME:-kaddons-node-0}
NODE_IP=${KADDONS_NODE_IP:-10.254.254.1}
BRIDGE=${KADDONS_NODE_BRIDGE:-kaddons0}
CGROUP_ROOT=${KADDONS_NODE_CGROUP_ROOT:-/kaddons-node}
KUBELET_PORT=${KADDONS_NODE_KUBELET_PORT:-10250}
TIMEOUT=${KADDONS_NODE_TIMEOUT:-180}
CLUSTER_DIR=${LOCAL_CLUSTER_DIR:-${ROOT}/.local/cluster}
CACHE=${XDG_CACHE_HOME:-${HOME}/.cache}/kaddons/node
# The Debian packages of a node: containerd, runc, the CNI plugins (/usr/lib/cni), and the
# tools the kubelet (iptables, conntrack) and `down` (nft, to delete tables) call.
# ipset: `down` destroys the sets a CNI's network policies created.
PACKAGES=(containerd runc containernetworking-plugins iptables conntrack nftables ipset)
# Debian's CNI plugins, which only `smoke` uses: the node's own plugin folder starts empty,
# and the CNI add-on installs its plugins there.
DEBIAN_CNI_BIN_DIR=/usr/lib/cni
# The sysctls the kubelet, the bridge CNI plugin, kube-proxy and kube-router set; `down`
# puts them back.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward
  net.ipv4.conf.all.forwarding net.ipv6.conf.all.forwarding net.ipv4.conf.all.route_localnet
  net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
  net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
  net.netfilter.nf_conntrack_tcp_timeout_close_wait net.netfilter.nf_conntrack_tcp_be_liberal)
# Folders whose entries the host check lists: what appears there whatever the state folder.
WATCHED_DIRS=(/run /var/lib /var/log /etc /opt /var/lib/kubelet /var/lib/cni /usr/lib)
# What down may delete when `up` created it (never anything that existed before).
REMOVABLE=(/var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni /run/containerd
  /run/netns /var/lib/containerd /run/runc /etc/cni /opt/cni /opt/containerd
  /run/mount # util-linux umount keeps its utab there
  /run/xtables.lock # the iptables lock that kube-proxy and kube-router mount (FileOrCreate)
  /usr/lib/modules) # see ensure_lib_modules

CONTAINERD_DIR=${NODE_DIR}/containerd
SOCK=${CONTAINERD_DIR}/containerd.sock
KUBELET_DIR=${NODE_DIR}/kubelet
CNI_CONF_DIR=${NODE_DIR}/cni/net.d
CNI_BIN_DIR=${NODE_DIR}/cni/bin
# The cluster DNS address the kubelet gives Pods: the kube-dns Service's clusterIP in the
# CoreDNS package (the tenth address of the default service range).
CLUSTER_DNS=${KADDONS_NODE_CLUSTER_DNS:-10.96.0.10}
# Pods with dnsPolicy Default (CoreDNS itself) get this resolv.conf: a nameserver on the
# node IP where nothing answers, so that CoreDNS forwards names outside the cluster to the
# node and never to the machine's own resolver.
RESOLV_CONF=${NODE_DIR}/resolv.conf
# What the add-ons of this node need to know (API server endpoint, CNI folders), for the
# demo and the tests: shell assignments.
NODE_ENV=${NODE_DIR}/node.env
PKI=${NODE_DIR}/pki
LOGS=${NODE_DIR}/logs
PIDS=${NODE_DIR}/pids
BEFORE=${NODE_DIR}/host-before.txt
BEFORE_PACKAGES=${NODE_DIR}/host-before-packages.txt
INSTALLED=${NODE_DIR}/installed-packages

log() { printf '[node] %s\n' "$*" >&2; }
die() { printf '[node] error: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------
# Host snapshot

# host_state prints what node.sh may change on the host, one sorted line per fact.
host_state() {
  local s d
  for s in "${SYSCTLS[@]}"; do
    [[ -e /proc/sys/${s//.//} ]] && echo "sysctl ${s}=$(cat "/proc/sys/${s//.//}")"
  done
  awk '{ print "mount " $5 }' /proc/self/mountinfo | sort -u
  for d in "${WATCHED_DIRS[@]}"; do
    [[ -d ${d} ]] || continue
    find "${d}" -mindepth 1 -maxdepth 1 -printf "entry ${d}/%f\n"
  done
  [[ -d /run/netns ]] && find /run/netns -mindepth 1 -maxdepth 1 -printf 'netns %f\n'
  ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print "link " $2 }'
  ip -4 -o addr show | awk '{ print "addr " $2 " " $4 }'
  ip -4 route show table all 2>/dev/null | grep -v '^local\|^broadcast' | sed 's/^/route /'
  if command -v ipset >/dev/null 2>&1; then ipset list -n 2>/dev/null | sed 's/^/ipset /'; fi
  if command -v nft >/dev/null 2>&1; then nft list tables 2>/dev/null | sed 's/^/nft /'; fi
  # The top cgroups of each hierarchy: what the node adds (its cgroup root, runc's under
  # unified, ctr's k8s.io) is there; deeper ones come and go with the machine's other
  # processes.
  find /sys/fs/cgroup -mindepth 2 -maxdepth 2 -type d -printf 'cgroup %p\n' 2>/dev/null
} 2>/dev/null

# take_snapshot records the host in file $1 unless it exists (a snapshot is kept until
# `down` succeeds).
take_snapshot() {
  [[ -f $1 ]] && return 0
  mkdir -p "${NODE_DIR}"
  host_state | LC_ALL=C sort -u >"$1.tmp"
  mv "$1.tmp" "$1"
  log "recorded the host in ${1##*/}"
}

# host_diff prints the differences between snapshot $1 and now (- before, + now).
host_diff() {
  diff <(cat "$1") <(host_state | LC_ALL=C sort -u) | grep '^[<>]' |
    sed 's/^</- /; s/^>/+ /' || true
}

# cmd_check compares the host with the snapshot taken before the node (or with $1).
cmd_check() {
  local snap=${1:-${BEFORE}} d
  [[ -f ${snap} ]] || { log "no snapshot in ${snap}: nothing to compare"; return 0; }
  d=$(host_diff "${snap}")
  if [[ -n ${d} ]]; then
    log "the host differs from ${snap##*/} (- before, + now):"
    printf '%s\n' "${d}" >&2
    return 1
  fi
  log "host check against ${snap##*/}: sysctls, mounts, folders, links, addresses, routes, netns, nftables tables and cgroups as before ($(wc -l <"${snap}") facts compared)"
}

# ---------------------------------------------------------------------------------------
# Prerequisites

ensure_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "${p}" 2>/dev/null | grep 'ok installed' >/dev/null || missing+=("${p}")
  done
  [[ ${#missing[@]} -gt 0 ]] || return 0
  # The host before the packages too, for `down --purge`.
  take_snapshot "${BEFORE_PACKAGES}"
  log "installing Debian packages: ${missing[*]} (apt-get -qq)"
  local before
  before=$(dpkg-query -W -f='${Package}\n' | sort)
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Every package this installed, dependencies included: what --purge removes.
  comm -13 <(echo "${before}") <(dpkg-query -W -f='${Package}\n' | sort) >>"${INSTALLED}"
  log "installed $(wc -l <"${INSTALLED}") package(s): $(tr '\n' ' ' <"${INSTALLED}")"
}

# ensure_binaries builds the kubelet (cached) and sets KUBELET and KUBECTL.
ensure_binaries() {
  local dir
  dir=$("${ROOT}/hack/toolchain.sh" dir)
  if [[ ! -x ${dir}/kubelet || ! -x ${dir}/kubectl ]]; then
    log "building the kubelet with hack/toolchain.sh (about 7 minutes the first time; cached in ~/.cache/kaddons/toolchain)"
    "${ROOT}/hack/toolchain.sh" build kubelet kubectl
  fi
  KUBELET=${dir}/kubelet
  KUBECTL=${dir}/kubectl
}

# addonimages runs hack/addonimages (the add-on images: see its documentation).
addonimages() { (cd "${ROOT}" && go run ./hack/addonimages "$@"); }

# ensure_pause_image builds the pause image (Kubernetes' pause.c, static, by
# hack/addonimages; cached) and sets PAUSE_IMAGE and PAUSE_TAR.
ensure_pause_image() {
  addonimages build pause
  read -r PAUSE_IMAGE PAUSE_TAR < <(addonimages list pause)
  [[ -n ${PAUSE_IMAGE} && -f ${PAUSE_TAR} ]] || die "hack/addonimages built no pause image"
}

# ---------------------------------------------------------------------------------------
# Processes (as hack/local-cluster.sh: pid files, checked against the command line)

pid_of() { [[ -f ${PIDS}/$1.pid ]] && tr -dc '0-9' <"${PIDS}/$1.pid" || true; }
cmdline_of() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true; }

# is_ours tells whether pid $1 is component $2 started for this state folder.
is_ours() {
  local pid=$1 cmd
  [[ -n ${pid} && -d /proc/${pid} ]] || return 1
  cmd=$(cmdline_of "${pid}")
  [[ ${cmd%% *} == *"$2" && ${cmd} == *"${NODE_DIR}/"* ]]
}
running() { is_ours "$(pid_of "$1")" "$1"; }

# start_process runs binary $2 as component $1 with arguments $3.. in its own session.
start_process() {
  local name=$1 bin=$2 i
  shift 2
  mkdir -p "${LOGS}" "${PIDS}"
  [[ -f ${LOGS}/${name}.log ]] && mv -f "${LOGS}/${name}.log" "${LOGS}/${name}.log.1"
  log "starting ${name} (log: ${LOGS}/${name}.log)"
  # shellcheck disable=SC2016 # for the inner shell
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "${PIDS}/${name}.pid" "${bin}" "$@" \
    </dev/null >>"${LOGS}/${name}.log" 2>&1 &
  for ((i = 0; i < 100; i++)); do
    running "${name}" && return 0
    sleep 0.05
  done
  tail -n 20 "${LOGS}/${name}.log" >&2 || true
  die "${name} exited right after starting"
}

# stop_process stops component $1: TERM, then KILL after 15s.
stop_process() {
  local name=$1 pid i
  pid=$(pid_of "${name}")
  if is_ours "${pid}" "${name}"; then
    log "stopping ${name} (pid ${pid})"
    kill -TERM "${pid}" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do is_ours "${pid}" "${name}" || break; sleep 0.1; done
    if is_ours "${pid}" "${name}"; then
      log "${name} ignored TERM; sending KILL"
      kill -KILL "${pid}" 2>/dev/null || true
      sleep 0.5
    fi
  fi
  rm -f "${PIDS}/${name}.pid"
}

# our_processes prints the pids of every process whose command line names the state
# folder (containerd's shims included), except this shell's.
our_processes() {
  local f pid
  for f in $(grep -laF "${NODE_DIR}/" /proc/[0-9]*/cmdline 2>/dev/null || true); do
    pid=${f#/proc/}; pid=${pid%/cmdline}
    [[ ${pid} == "$$" || ${pid} == "${BASHPID}" ]] && continue
    [[ $(cmdline_of "${pid}") == *"${NODE_DIR}/"* ]] || continue
    case $(cmdline_of "${pid}") in
      *containerd*|*kubelet*|*runc*|*pause*) echo "${pid}" ;;
    esac
  done
}

ctr_() { ctr --address "${SOCK}" --namespace k8s.io "$@"; }

# ---------------------------------------------------------------------------------------
# Setup

cluster_setting() { sed -n "s/^$1=//p" "${CLUSTER_DIR}/settings.env" 2>/dev/null | tail -n 1; }

# ensure_lib_modules creates an empty /lib/modules on a kernel without loadable modules
# (everything built in): kube-proxy and kube-router mount it from the host, as on every
# real node, and a missing hostPath fails their containers.
ensure_lib_modules() {
  [[ -d /lib/modules ]] && return 0
  log "creating the empty /lib/modules that kube-proxy and kube-router mount (this kernel has no modules)"
  mkdir -p /lib/modules
}

# route_cluster_ranges routes the cluster's service and pod ranges to the bridge, so that
# a packet to a Service or Pod address that no kube-proxy rule or Pod route claims stays on
# this machine instead of leaving by the default route. kube-proxy's DNAT and the CNI's
# per-node routes (more specific) still apply. The routes go with the bridge.
route_cluster_ranges() {
  local cidr
  for cidr in "$(cluster_setting service_cidr)" "$(cluster_setting cluster_cidr)"; do
    [[ -n ${cidr} ]] || continue
    ip route replace "${cidr}" dev "${BRIDGE}" src "${NODE_IP}"
  done
}

# refuse_other_node fails when a kubelet of another state folder runs on the node IP: two
# real nodes would share the bridge, the kubelet's port and /var/lib/kubelet, and the
# `down` of one would take the other's network away.
refuse_other_node() {
  local f pid cmd
  for f in $(grep -laF -- "--node-ip=${NODE_IP}" /proc/[0-9]*/cmdline 2>/dev/null || true); do
    pid=${f#/proc/}; pid=${pid%/cmdline}
    cmd=$(cmdline_of "${pid}")
    [[ ${cmd%% *} == *kubelet && ${cmd} != *"${NODE_DIR}/"* ]] || continue
    die "another real node runs on ${NODE_IP} (kubelet pid ${pid}: $(cut -c1-160 <<<"${cmd}")); stop it first (make demo-down, or hack/node.sh down with its KADDONS_NODE_DIR)"
  done
}

setup_bridge() {
  if ! ip link show "${BRIDGE}" >/dev/null 2>&1; then
    log "creating bridge ${BRIDGE} with ${NODE_IP}/24 (private; nothing routes it off this machine)"
    ip link add "${BRIDGE}" type bridge
  fi
  ip -4 -o addr show dev "${BRIDGE}" | grep -F " ${NODE_IP}/" >/dev/null || ip addr add "${NODE_IP}/24" dev "${BRIDGE}"
  # IPv4 only: no IPv6 link-local address, no neighbour discovery on the bridge.
  echo 1 >"/proc/sys/net/ipv6/conf/${BRIDGE}/disable_ipv6" 2>/dev/null || true
  ip link set "${BRIDGE}" up
}

# setup_cgroups creates the kubelet's cgroupRoot in every cgroup hierarchy; cpuset needs
# its cpus and mems before anything can join it.
setup_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/; do
    h=${h%/}
    [[ -f ${h}/cgroup.procs ]] || continue
    mkdir -p "${h}${CGROUP_ROOT}"
    if [[ -f ${h}/cpuset.cpus ]]; then
      cat "${h}/cpuset.cpus" >"${h}${CGROUP_ROOT}/cpuset.cpus"
      cat "${h}/cpuset.mems" >"${h}${CGROUP_ROOT}/cpuset.mems"
    fi
  done
}

# issue_kubelet_cert signs the kubelet's client certificate with the cluster CA.
issue_kubelet_cert() {
  local ca=${CLUSTER_DIR}/pki/ca.crt cakey=${CLUSTER_DIR}/pki/ca.key
  [[ -f ${ca} && -f ${cakey} ]] || die "no cluster CA in ${CLUSTER_DIR}/pki"
  mkdir -p "${PKI}"
  chmod 700 "${PKI}"
  if [[ -f ${PKI}/kubelet-client.crt ]] && cmp -s "${ca}" "${PKI}/ca.crt" &&
    openssl verify -CAfile "${ca}" "${PKI}/kubelet-client.crt" >/dev/null 2>&1; then
    return 0
  fi
  log "issuing the kubelet's client certificate (CN=system:node:${NODE_NAME}, O=system:nodes)"
  cp "${ca}" "${PKI}/ca.crt"
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"${PKI}/kubelet-client.ext"
  openssl genrsa -out "${PKI}/kubelet-client.key" 2048 2>/dev/null
  openssl req -new -key "${PKI}/kubelet-client.key" -subj "/O=system:nodes/CN=system:node:${NODE_NAME}" \
    -out "${PKI}/kubelet-client.csr" 2>/dev/null
  openssl x509 -req -in "${PKI}/kubelet-client.csr" -CA "${ca}" -CAkey "${cakey}" \
    -set_serial "0x$(openssl rand -hex 16)" -days 3650 -extfile "${PKI}/kubelet-client.ext" \
    -out "${PKI}/kubelet-client.crt" 2>/dev/null
  rm -f "${PKI}/kubelet-client.csr" "${PKI}/kubelet-client.ext"
}

write_kubelet_kubeconfig() {
  local port
  port=$(cluster_setting apiserver_port)
  (
    umask 077
    cat >"${NODE_DIR}/kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local-cluster
  cluster:
    server: https://${NODE_IP}:${port:-26443}
    certificate-authority: ${PKI}/ca.crt
users:
- name: system:node:${NODE_NAME}
  user:
    client-certificate: ${PKI}/kubelet-client.crt
    client-key: ${PKI}/kubelet-client.key
contexts:
- name: local-cluster
  context: {cluster: local-cluster, user: "system:node:${NODE_NAME}"}
current-context: local-cluster
EOF
  )
}

write_containerd_config() {
  mkdir -p "${CONTAINERD_DIR}" "${CNI_CONF_DIR}" "${CNI_BIN_DIR}"
  cat >"${CONTAINERD_DIR}/config.toml" <<EOF
# Written by hack/node.sh: containerd for the node ${NODE_NAME}; state under ${CONTAINERD_DIR}.
version = 2
root = "${CONTAINERD_DIR}/root"
state = "${CONTAINERD_DIR}/state"
oom_score = 0
plugin_dir = ""

[grpc]
  address = "${SOCK}"

[ttrpc]
  address = ""

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "${CONTAINERD_DIR}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${PAUSE_IMAGE}"
  # runc cannot raise oom_score_adj without CAP_SYS_RESOURCE ("can't get final child's
  # PID from pipe"); this keeps containers at containerd's own score or above.
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "${CNI_BIN_DIR}"
    conf_dir = "${CNI_CONF_DIR}"
    max_conf_num = 1
EOF
}

start_containerd() {
  local deadline=$((SECONDS + TIMEOUT))
  if ! running containerd; then
    start_process containerd "$(command -v containerd)" --config "${CONTAINERD_DIR}/config.toml"
  fi
  until ctr --address "${SOCK}" version >/dev/null 2>&1; do
    running containerd || { tail -n 20 "${LOGS}/containerd.log" >&2; die "containerd exited"; }
    ((SECONDS < deadline)) || die "containerd did not answer on ${SOCK} within ${TIMEOUT}s"
    sleep 0.2
  done
}

# import_image imports docker archive $2 as image $1 into containerd's k8s.io namespace,
# unless it is there already from the same archive (its key, hack/addonimages's record of
# what the image is made of, is remembered beside containerd's state).
import_image() {
  local ref=$1 tar=$2 key stamp t
  key=$(cat "${tar%/*}/key" 2>/dev/null || sha256sum "${tar}" | cut -d' ' -f1)
  stamp=${CONTAINERD_DIR}/imported/$(printf '%s' "${ref}" | tr '/:' '__')
  if [[ $(cat "${stamp}" 2>/dev/null) == "${key}" ]] && ctr_ images ls -q | grep -xF "${ref}" >/dev/null; then
    log "${ref}: already imported"
    return 0
  fi
  t=${SECONDS}
  log "${ref}: importing ${tar} ($(du -m "${tar}" | cut -f1) MiB)"
  ctr_ images import "${tar}" >/dev/null
  ctr_ images ls -q | grep -xF "${ref}" >/dev/null || die "containerd does not list ${ref} after the import"
  mkdir -p "${stamp%/*}"
  echo "${key}" >"${stamp}"
  log "${ref}: imported in $((SECONDS - t))s"
}

# import_addon_images imports the images of hack/addonimages (the pause image among them);
# with "build", it builds the missing ones first, otherwise it imports those that are built.
import_addon_images() {
  local ref tar n=0 skipped=0
  if [[ ${1:-} == build ]]; then shift; addonimages build "$@"; fi
  while read -r ref tar; do
    if [[ ! -f ${tar} ]]; then
      skipped=$((skipped + 1))
      continue
    fi
    import_image "${ref}" "${tar}"
    n=$((n + 1))
  done < <(addonimages list)
  if ((skipped > 0)); then
    log "${n} image(s) in containerd; ${skipped} not built yet (hack/node.sh images builds them)"
  else
    log "${n} image(s) in containerd"
  fi
}

write_kubelet_config() {
  mkdir -p "${KUBELET_DIR}" "${NODE_DIR}/pod-logs"
  printf 'nameserver %s\n' "${NODE_IP}" >"${RESOLV_CONF}"
  cat >"${NODE_DIR}/kubelet.yaml" <<EOF
# Written by hack/node.sh for the node ${NODE_NAME}.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine has cgroup v1 only; cgroupfs, under a root of our own.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: ${CGROUP_ROOT}
# The machine lacks CAP_SYS_RESOURCE: the kubelet must not lower its own score.
oomScoreAdj: 0
failSwapOn: false
containerRuntimeEndpoint: unix://${SOCK}
address: ${NODE_IP}
port: ${KUBELET_PORT}
readOnlyPort: 0
healthzPort: 0
podLogsDir: ${NODE_DIR}/pod-logs
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ${PKI}/ca.crt}
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS: [${CLUSTER_DNS}]
resolvConf: ${RESOLV_CONF}
# Images are imported, never pulled (no registry is reachable): nothing may evict or
# garbage-collect them. Zero thresholds are disabled ones.
evictionHard:
  memory.available: 100Mi
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
  imagefs.inodesFree: "0%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
EOF
}

start_kubelet() {
  if running kubelet; then
    log "kubelet already running (pid $(pid_of kubelet))"
    return 0
  fi
  start_process kubelet "${KUBELET}" \
    --config="${NODE_DIR}/kubelet.yaml" \
    --kubeconfig="${NODE_DIR}/kubelet.kubeconfig" \
    --root-dir="${KUBELET_DIR}" \
    --hostname-override="${NODE_NAME}" \
    --node-ip="${NODE_IP}" \
    --node-labels=kaddons.io/real-node=true \
    --v=1
}

kc() { "${KUBECTL}" --kubeconfig="${CLUSTER_DIR}/kubeconfig" "$@"; }

# node_ready prints the node's Ready status (nothing while it is not registered).
node_ready() {
  kc get node "${NODE_NAME}" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || true
}

# ready_message prints the message of the node's Ready condition.
ready_message() {
  kc get node "${NODE_NAME}" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].message}' 2>/dev/null || true
}

# rss_mib prints the resident memory of component $1 in MiB.
rss_mib() {
  awk '/^VmRSS:/ { printf "%d", $2 / 1024 }' "/proc/$(pid_of "$1")/status" 2>/dev/null || echo "?"
}

wait_registered() {
  local deadline=$((SECONDS + TIMEOUT))
  until [[ -n $(node_ready) ]]; do
    running kubelet || { tail -n 30 "${LOGS}/kubelet.log" >&2; die "the kubelet exited"; }
    ((SECONDS < deadline)) || { tail -n 30 "${LOGS}/kubelet.log" >&2; die "node ${NODE_NAME} did not register within ${TIMEOUT}s"; }
    sleep 0.5
  done
}

# wait_ready waits until the node is Ready (it needs a CNI config).
wait_ready() {
  local deadline=$((SECONDS + TIMEOUT))
  until [[ $(node_ready) == True ]]; do
    running kubelet || { tail -n 30 "${LOGS}/kubelet.log" >&2; die "the kubelet exited"; }
    ((SECONDS < deadline)) || { kc describe node "${NODE_NAME}" | tail -n 30 >&2; die "node ${NODE_NAME} not Ready within ${TIMEOUT}s"; }
    sleep 0.5
  done
}

cmd_up() {
  local start=${SECONDS} t
  [[ $(id -u) == 0 ]] || die "a real node needs root (containerd, runc, the kubelet)"
  refuse_other_node
  mkdir -p "${NODE_DIR}" "${LOGS}" "${PIDS}"
  ensure_packages
  take_snapshot "${BEFORE}"
  ensure_binaries
  ensure_pause_image
  ensure_lib_modules
  setup_bridge
  log "starting the local cluster on ${NODE_IP} (hack/local-cluster.sh up)"
  LOCAL_CLUSTER_NODE_IP=${NODE_IP} LOCAL_CLUSTER_DIR=${CLUSTER_DIR} "${ROOT}/hack/local-cluster.sh" up
  route_cluster_ranges
  issue_kubelet_cert
  write_kubelet_kubeconfig
  setup_cgroups
  write_containerd_config
  start_containerd
  import_addon_images
  write_kubelet_config
  t=${SECONDS}
  start_kubelet
  log "waiting for node ${NODE_NAME} to register"
  wait_registered
  log "node ${NODE_NAME} registered $((SECONDS - t))s after the kubelet started; Ready=$(node_ready) ($(ls "${CNI_CONF_DIR}" 2>/dev/null | wc -l) CNI config(s) in ${CNI_CONF_DIR})"
  write_node_env
  log "node up in $((SECONDS - start))s; export KUBECONFIG=${CLUSTER_DIR}/kubeconfig"
  log "the CNI add-on needs: apiServerEndpoint ${NODE_IP}:$(cluster_setting apiserver_port), cniConfDir ${CNI_CONF_DIR}, cniBinDir ${CNI_BIN_DIR} (also in ${NODE_ENV})"
}

# write_node_env records what the node's add-ons must be told, as shell assignments.
write_node_env() {
  cat >"${NODE_ENV}.tmp" <<EOF
KADDONS_NODE_NAME=${NODE_NAME}
KADDONS_NODE_IP=${NODE_IP}
KADDONS_NODE_API_SERVER_ENDPOINT=${NODE_IP}:$(cluster_setting apiserver_port)
KADDONS_NODE_CLUSTER_CIDR=$(cluster_setting cluster_cidr)
KADDONS_NODE_CNI_CONF_DIR=${CNI_CONF_DIR}
KADDONS_NODE_CNI_BIN_DIR=${CNI_BIN_DIR}
KADDONS_NODE_CLUSTER_DNS=${CLUSTER_DNS}
KUBECONFIG=${CLUSTER_DIR}/kubeconfig
EOF
  mv "${NODE_ENV}.tmp" "${NODE_ENV}"
}

# ---------------------------------------------------------------------------------------
# Teardown

# unmount_new unmounts, deepest first, every mount point that was not there before and
# lies under the state folder or a folder the node uses.
unmount_new() {
  local m
  while read -r m; do
    [[ -n ${m} ]] || continue
    grep -qxF "mount ${m}" "${BEFORE}" 2>/dev/null && continue
    case ${m} in
      "${NODE_DIR}"/*) ;;
      /run/netns|/run/netns/*|/run/containerd/*|/var/lib/kubelet/*|/var/lib/containerd/*) [[ -f ${BEFORE} ]] || continue ;;
      *) continue ;;
    esac
    umount "${m}" 2>/dev/null || umount -l "${m}" 2>/dev/null || log "warning: could not unmount ${m}"
  done < <(awk '{ print $5 }' /proc/self/mountinfo | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-)
}

# remove_cgroups removes the cgroupRoot in every hierarchy and the cgroups that runc made
# under /sys/fs/cgroup/unified, deepest first (rmdir only: a cgroup with processes stays).
remove_cgroups() {
  local h d
  for h in /sys/fs/cgroup/*/; do
    h=${h%/}
    # ${h}/k8s.io is where `ctr run` puts the tasks of containerd's k8s.io namespace.
    for d in "${h}${CGROUP_ROOT}" $( [[ -f ${BEFORE} ]] && echo "${h}/k8s.io") $( [[ -f ${BEFORE} && ${h##*/} == unified ]] && find "${h}" -mindepth 1 -maxdepth 1 -type d 2>/dev/null); do
      [[ -d ${d} ]] || continue
      grep -qxF "cgroup ${d}" "${BEFORE}" 2>/dev/null && [[ ${d} != "${h}${CGROUP_ROOT}" ]] && continue
      find "${d}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
      [[ -d ${d} ]] && log "warning: cgroup ${d} remains (processes left in it?)"
    done
  done
}

restore_sysctls() {
  local line key val now
  [[ -f ${BEFORE} ]] || return 0
  while read -r line; do
    line=${line#sysctl }
    key=${line%%=*}; val=${line#*=}
    now=$(cat "/proc/sys/${key//.//}" 2>/dev/null) || continue
    if [[ ${now} != "${val}" ]]; then
      log "restoring ${key}=${val} (was ${now})"
      echo "${val}" >"/proc/sys/${key//.//}"
    fi
  done < <(grep '^sysctl ' "${BEFORE}")
}

# remove_nft_tables deletes the nftables tables (iptables-nft's included) that were not
# there before the node.
remove_nft_tables() {
  command -v nft >/dev/null 2>&1 || return 0
  local fam name
  while read -r _ fam name; do
    grep -qxF "nft table ${fam} ${name}" "${BEFORE}" 2>/dev/null && continue
    log "deleting nftables table ${fam} ${name}"
    nft delete table "${fam}" "${name}" || true
  done < <(nft list tables 2>/dev/null)
}

remove_links() {
  local l
  for l in $(ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'); do
    grep -qxF "link ${l}" "${BEFORE}" 2>/dev/null && continue
    case ${l} in
      # The smoke's bridge, Pods' veths, kube-router's bridge, dummy and tunnels, and
      # kube-proxy's IPVS dummy.
      "${BRIDGE}"|kaddons-cni*|veth*|kube-bridge|kube-dummy-if|kube-ipvs0|tun-*)
        log "deleting link ${l}"; ip link delete "${l}" 2>/dev/null || true ;;
    esac
  done
}

# remove_ipsets destroys the ipsets (kube-router's network policy sets) that were not there
# before the node; after the iptables rules that used them are gone.
remove_ipsets() {
  command -v ipset >/dev/null 2>&1 || return 0
  local set
  for set in $(ipset list -n 2>/dev/null); do
    grep -qxF "ipset ${set}" "${BEFORE}" 2>/dev/null && continue
    log "destroying ipset ${set}"
    ipset destroy "${set}" 2>/dev/null || true
  done
}

remove_netns() {
  local n
  [[ -d /run/netns ]] || return 0
  for n in $(find /run/netns -mindepth 1 -maxdepth 1 -printf '%f\n'); do
    grep -qxF "netns ${n}" "${BEFORE}" 2>/dev/null && continue
    log "deleting network namespace ${n}"
    ip netns delete "${n}" 2>/dev/null || { umount "/run/netns/${n}" 2>/dev/null; rm -f "/run/netns/${n}"; }
  done
}

remove_dirs() {
  local d
  for d in "${REMOVABLE[@]}"; do
    [[ -e ${d} ]] || continue
    grep -qxF "entry ${d}" "${BEFORE}" 2>/dev/null && continue
    # /var/lib/kubelet existed? Then only device-plugins, which the kubelet always makes.
    log "removing ${d}"
    rm -rf --one-file-system "${d}"
  done
  if grep -qxF "entry /var/lib/kubelet" "${BEFORE}" 2>/dev/null &&
    ! grep -qxF "entry /var/lib/kubelet/device-plugins" "${BEFORE}"; then
    rm -rf --one-file-system /var/lib/kubelet/device-plugins
  fi
}

# stop_containers stops every task of containerd's k8s.io namespace, so that the shims
# exit, and removes the containers.
stop_containers() {
  local id
  ctr --address "${SOCK}" version >/dev/null 2>&1 || return 0
  for id in $(ctr_ tasks ls -q 2>/dev/null); do
    ctr_ tasks kill -s SIGKILL "${id}" >/dev/null 2>&1 || true
  done
  sleep 1
  for id in $(ctr_ tasks ls -q 2>/dev/null); do
    ctr_ tasks delete -f "${id}" >/dev/null 2>&1 || true
  done
  for id in $(ctr_ containers ls -q 2>/dev/null); do
    ctr_ containers delete "${id}" >/dev/null 2>&1 || true
  done
}

cmd_down() {
  local purge=0 pid pkgs
  case ${1:-} in
    "") ;;
    --purge) purge=1 ;;
    *) die "usage: $0 down [--purge]" ;;
  esac
  [[ $(id -u) == 0 ]] || die "needs root"
  if [[ -x $("${ROOT}/hack/toolchain.sh" dir 2>/dev/null)/kubectl && -f ${CLUSTER_DIR}/kubeconfig ]]; then
    KUBECTL=$("${ROOT}/hack/toolchain.sh" dir)/kubectl
    if kc get node "${NODE_NAME}" >/dev/null 2>&1; then
      log "deleting the Node ${NODE_NAME} and its Pods"
      kc delete pods --all-namespaces --field-selector="spec.nodeName=${NODE_NAME}" --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
      kc delete node "${NODE_NAME}" --wait=false >/dev/null 2>&1 || true
    fi
  fi
  stop_process kubelet
  stop_containers
  stop_process containerd
  # A local cluster bound to the node IP loses its address with the bridge (kube-apiserver
  # then hangs on its own loopback client): it stops first; `hack/local-cluster.sh up`
  # brings it back on 127.0.0.1 with LOCAL_CLUSTER_NODE_IP= (empty).
  if [[ $(cluster_setting node_ip) == "${NODE_IP}" ]]; then
    log "stopping the local cluster in ${CLUSTER_DIR}: it listens on ${NODE_IP}, which goes with the bridge"
    LOCAL_CLUSTER_DIR=${CLUSTER_DIR} "${ROOT}/hack/local-cluster.sh" down
  fi
  # Whatever still runs in the node's cgroups (containers), then strays of the state folder.
  for pid in $(find /sys/fs/cgroup/*"${CGROUP_ROOT}" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u) $(our_processes); do
    log "killing leftover process ${pid}: $(cmdline_of "${pid}" | cut -c1-100)"
    kill -KILL "${pid}" 2>/dev/null || true
  done
  sleep 0.5
  if [[ -f ${BEFORE} ]]; then
    remove_netns
    unmount_new
    remove_links
    remove_nft_tables
    remove_ipsets
    remove_cgroups
    restore_sysctls
    remove_dirs
  else
    # Without the snapshot nothing outside the state folder can be told ours, except the
    # bridge and the cgroup root, by their names.
    log "warning: no snapshot in ${BEFORE}: only the state folder's mounts, the bridge and the cgroup root are removed"
    unmount_new
    ip link delete "${BRIDGE}" 2>/dev/null || true
    remove_cgroups
  fi
  # The state, except logs, the snapshot and the record of installed packages.
  rm -rf --one-file-system "${CONTAINERD_DIR}" "${KUBELET_DIR}" "${NODE_DIR}/cni" "${NODE_DIR}/pod-logs" "${PIDS}" \
    "${NODE_ENV}" "${RESOLV_CONF}"
  if [[ ! -f ${BEFORE} ]]; then
    log "node down; no snapshot of the host before the node in ${BEFORE} (no \`up\` since the last \`down\`): sysctls not restored, nothing compared"
  elif ! cmd_check "${BEFORE}"; then
    die "node down, but the host differs from before the node (above)"
  else
    rm -f "${BEFORE}"
    log "node down; the host is as before the node"
  fi
  if [[ ${purge} == 1 && -f ${INSTALLED} ]]; then
    pkgs=$(sort -u "${INSTALLED}" | tr '\n' ' ')
    log "removing the Debian packages that up installed: ${pkgs}"
    # shellcheck disable=SC2086 # one word per package
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq ${pkgs} >/dev/null
    rm -f "${INSTALLED}"
    cmd_check "${BEFORE_PACKAGES}" || die "packages removed, but the host differs from before them (above)"
    rm -f "${BEFORE_PACKAGES}"
  fi
}

# cmd_images builds every add-on image that is not cached and imports each into the
# running node's containerd.
cmd_images() {
  [[ $(id -u) == 0 ]] || die "needs root"
  local t=${SECONDS}
  if ! ctr --address "${SOCK}" version >/dev/null 2>&1; then
    # Without a running node the images are only built (and cached): `up` imports them.
    addonimages build "$@"
    log "add-on images built in $((SECONDS - t))s; \`up\` imports them"
    return 0
  fi
  import_addon_images build "$@"
  log "add-on images built and imported in $((SECONDS - t))s:"
  # ctr's columns: REF TYPE DIGEST SIZE (two words) PLATFORMS LABELS.
  ctr_ images ls 2>/dev/null | awk 'NR == 1 { printf "  %-54s %10s  %s\n", "REFERENCE", "SIZE", "MANIFEST" }
    NR > 1 && $1 !~ /^sha256:/ { printf "  %-54s %10s  %s\n", $1, $4 " " $5, $3 }' >&2
}

cmd_status() {
  local name
  echo "node: ${NODE_NAME} ${NODE_IP} (state: ${NODE_DIR})"
  for name in containerd kubelet; do
    if running "${name}"; then
      printf '  %-12s pid %-8s running\n' "${name}" "$(pid_of "${name}")"
    else
      printf '  %-12s stopped\n' "${name}"
    fi
  done
  KUBECTL=$("${ROOT}/hack/toolchain.sh" dir)/kubectl
  if [[ -x ${KUBECTL} && -f ${CLUSTER_DIR}/kubeconfig ]]; then
    kc get node "${NODE_NAME}" -o wide 2>/dev/null || echo "  (node not registered)"
  fi
}

# ---------------------------------------------------------------------------------------
# Smoke check

SMOKE_CNI=10-kaddons-smoke.conf

# write_smoke_cni writes a bridge+host-local CNI config: under a temporary name inside the
# folder, then renamed (containerd 1.6 misses a file moved in from elsewhere).
write_smoke_cni() {
  local tmp=${CNI_CONF_DIR}/.${SMOKE_CNI}.tmp
  mkdir -p "${CNI_CONF_DIR}" "${CNI_BIN_DIR}" "${NODE_DIR}/cni/ipam"
  local p
  for p in bridge host-local loopback; do cp "${DEBIAN_CNI_BIN_DIR}/${p}" "${CNI_BIN_DIR}/${p}"; done
  cat >"${tmp}" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "kaddons-smoke",
  "type": "bridge",
  "bridge": "kaddons-cni0",
  "isGateway": true,
  "ipMasq": false,
  "ipam": {
    "type": "host-local",
    "ranges": [[{"subnet": "10.254.0.0/24"}]],
    "routes": [{"dst": "0.0.0.0/0"}],
    "dataDir": "${NODE_DIR}/cni/ipam"
  }
}
EOF
  mv "${tmp}" "${CNI_CONF_DIR}/${SMOKE_CNI}"
}

smoke_teardown() {
  local rc=$?
  trap - EXIT INT TERM
  log "smoke: tearing down (node, then the cluster in ${CLUSTER_DIR})"
  [[ ${rc} == 0 ]] || { kc get pods -A -o wide >&2 2>/dev/null || true; tail -n 40 "${LOGS}/kubelet.log" >&2 || true; }
  cmd_down || rc=1
  LOCAL_CLUSTER_DIR=${CLUSTER_DIR} "${ROOT}/hack/local-cluster.sh" down --wipe || rc=1
  exit "${rc}"
}

cmd_smoke() {
  local t0 t deadline phase
  # A cluster of its own, on ports of its own, wiped at the end.
  CLUSTER_DIR=${LOCAL_CLUSTER_DIR:-${ROOT}/.local/node-smoke-cluster}
  export LOCAL_CLUSTER_ETCD_PORT=${LOCAL_CLUSTER_ETCD_PORT:-23890}
  export LOCAL_CLUSTER_ETCD_PEER_PORT=${LOCAL_CLUSTER_ETCD_PEER_PORT:-23900}
  export LOCAL_CLUSTER_APISERVER_PORT=${LOCAL_CLUSTER_APISERVER_PORT:-26543}
  trap smoke_teardown EXIT
  trap 'exit 130' INT TERM
  t0=${SECONDS}
  cmd_up
  # Without a CNI config the node must stay NotReady, for the network's sake (what the
  # CNI add-on's bootstrap test relies on).
  deadline=$((SECONDS + 30))
  until [[ $(node_ready) == False && $(ready_message) == *NetworkPluginNotReady* ]]; do
    [[ $(node_ready) != True ]] || die "smoke: node Ready before any CNI config"
    ((SECONDS < deadline)) || die "smoke: node not NotReady for the network: $(ready_message)"
    sleep 0.5
  done
  log "smoke: node NotReady without a CNI config, as expected: $(ready_message)"
  log "smoke: writing the temporary bridge+host-local CNI config"
  t=${SECONDS}
  write_smoke_cni
  wait_ready
  log "smoke: node Ready $((SECONDS - t))s after the CNI config"
  t=${SECONDS}
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: kaddons-node-smoke
  namespace: default
spec:
  nodeSelector:
    kubernetes.io/hostname: ${NODE_NAME}
  containers:
  - name: pause
    image: ${PAUSE_IMAGE}
    imagePullPolicy: Never
  terminationGracePeriodSeconds: 1
EOF
  deadline=$((SECONDS + TIMEOUT))
  until [[ $(kc get pod kaddons-node-smoke -o 'jsonpath={.status.phase}') == Running ]]; do
    ((SECONDS < deadline)) || { kc describe pod kaddons-node-smoke >&2; die "smoke: the Pod is not Running within ${TIMEOUT}s"; }
    sleep 0.5
  done
  phase=$(kc get pod kaddons-node-smoke -o 'jsonpath={.spec.nodeName} {.status.podIP} {.status.phase}')
  log "smoke: Pod Running $((SECONDS - t))s after it was created: ${phase}"
  kc get pod kaddons-node-smoke -o wide
  log "smoke: memory: kubelet $(rss_mib kubelet) MiB, containerd $(rss_mib containerd) MiB (RSS)"
  # The Pod's network reaches the API server on the node IP (the pause image has no
  # client: curl runs in the Pod's network namespace).
  local task_pid answer
  task_pid=$(ctr_ tasks ls 2>/dev/null | awk 'NR > 1 && $3 == "RUNNING" { print $2; exit }')
  [[ -n ${task_pid} ]] || die "smoke: no running task in containerd"
  answer=$(nsenter --net="/proc/${task_pid}/ns/net" curl -sS --max-time 5 --cacert "${PKI}/ca.crt" \
    "https://${NODE_IP}:$(cluster_setting apiserver_port)/readyz" 2>&1) || true
  [[ ${answer} == ok ]] || die "smoke: from the Pod's network, the API server's /readyz answered: ${answer}"
  log "smoke: from the Pod's network namespace, https://${NODE_IP}:$(cluster_setting apiserver_port)/readyz answers ok"
  t=${SECONDS}
  kc delete pod kaddons-node-smoke --wait=true --timeout="${TIMEOUT}s" >/dev/null
  log "smoke: Pod deleted (sandbox stopped, CNI DEL done) in $((SECONDS - t))s"
  rm -f "${CNI_CONF_DIR}/${SMOKE_CNI}" "${CNI_BIN_DIR}"/*
  log "smoke: passed in $((SECONDS - t0))s"
}

case ${1:-} in
  up) cmd_up ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  check) cmd_check ;;
  images) shift; cmd_images "$@" ;;
  smoke) cmd_smoke ;;
  -h|--help|help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
  *) die "usage: $0 up|down [--purge]|status|check|images|smoke (see --help)" ;;
esac
