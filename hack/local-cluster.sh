#!/usr/bin/env bash
# local-cluster.sh runs a small but real Kubernetes control plane on this machine, for the
# e2e suite, `make demo` and manual testing of kaddons: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler, plus kwok, which plays the kubelet for three
# fake nodes (kwok-node-0..2) so that pods are scheduled and become Running and Ready, and
# Deployments and DaemonSets really become available. No container runs anywhere.
#
# Usage:
#   hack/local-cluster.sh up                  start (or resume) the cluster, wait until ready
#   hack/local-cluster.sh down [--wipe]       stop it; --wipe also deletes the state folder
#   hack/local-cluster.sh status              component pids, running/stopped, nodes
#   hack/local-cluster.sh env                 print `export KUBECONFIG=<admin kubeconfig>`
#   hack/local-cluster.sh kubeconfig-for-sa NAMESPACE NAME OUT
#                                             write a kubeconfig at OUT that authenticates as
#                                             that ServiceAccount (24h token), to run the
#                                             operator with only its own RBAC
#   hack/local-cluster.sh logs                print the tail of every component log
#
# The binaries come from hack/toolchain.sh (built from source on first use, which takes a
# while; later runs start in seconds). State (certificates, etcd data, kubeconfigs, pid
# files) and logs live in one folder. Everything listens on 127.0.0.1 only, unless
# LOCAL_CLUSTER_NODE_IP names a private address for a real node (hack/node.sh).
#
# Environment:
#   LOCAL_CLUSTER_DIR             state folder (default: <repo>/.local/cluster)
#   LOCAL_CLUSTER_ETCD_PORT       etcd client port (default 23790)
#   LOCAL_CLUSTER_ETCD_PEER_PORT  etcd peer port (default 23800)
#   LOCAL_CLUSTER_APISERVER_PORT  kube-apiserver secure port (default 26443)
#   LOCAL_CLUSTER_SERVICE_CIDR    service IP range (default 10.96.0.0/16)
#   LOCAL_CLUSTER_POD_CIDR        pod IPs handed out by kwok (default 10.0.0.1/24)
#   LOCAL_CLUSTER_TIMEOUT         seconds to wait for each readiness step (default 180)
#   LOCAL_CLUSTER_LOG_LINES       lines per component printed by `logs` (default 60)
#   LOCAL_CLUSTER_BIN_DIR         use binaries from this folder instead of hack/toolchain.sh
#   LOCAL_CLUSTER_NODE_IP         an address of this machine (hack/node.sh puts 10.254.254.1 on
#                                 a bridge of its own) that kube-apiserver binds and advertises
#                                 instead of 127.0.0.1, so that a real node and its Pods reach
#                                 it; it joins the serving certificate's SANs, every kubeconfig
#                                 names it, and the `kubernetes` Service gets it as endpoint.
#                                 Empty (LOCAL_CLUSTER_NODE_IP=): back to 127.0.0.1.
#                                 A cluster with a node IP is one for a real node: it has no
#                                 fake nodes (their Pods' IPs would be unreachable), publishes
#                                 EndpointSlices, and allocates each node a pod CIDR from
#                                 LOCAL_CLUSTER_CLUSTER_CIDR, as a CNI such as kube-router needs
#   LOCAL_CLUSTER_CLUSTER_CIDR    the pod network that node pod CIDRs (/24 each) come from when
#                                 a node IP is set (default 10.244.0.0/16)
#   LOCAL_CLUSTER_RESTART_DEPENDENTS
#                                 1 (default): `up` also restarts what depends on a component
#                                 it starts; 0: it starts only what is stopped (the fault
#                                 suite restarts etcd alone, under a running kube-apiserver)
# The ports, CIDRs and node IP used by the last `up` are remembered in the state folder, so later
# commands against the same folder need not repeat the overrides.
set -euo pipefail
# The Go toolchain is pinned, as in the Makefile and go.mod, for hack/toolchain.sh, which
# this script runs.
export GOTOOLCHAIN=go1.27.3

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
NODE_NAMES=(kwok-node-0 kwok-node-1 kwok-node-2)
KWOK_STAGE_SETS=(node/fast node/heartbeat-with-lease pod/fast)

log() { printf '[local-cluster] %s\n' "$*" >&2; }
die() { printf '[local-cluster] error: %s\n' "$*" >&2; exit 1; }

# init_state resolves the state folder (absolute) and the paths inside it, and loads the
# settings recorded by the last `up` as defaults for variables the caller did not set.
init_state() {
  local dir=${LOCAL_CLUSTER_DIR:-${ROOT}/.local/cluster}
  [[ ${dir} == /* ]] || dir=${PWD}/${dir}
  STATE_DIR=${dir%/}
  # Canonical path when it exists: it is matched against the processes' command lines.
  [[ -d ${STATE_DIR} ]] && STATE_DIR=$(cd "${STATE_DIR}" && pwd -P)
  set_paths

  local rec_etcd="" rec_peer="" rec_api="" rec_svc="" rec_pod="" rec_node_ip="" rec_cluster=""
  if [[ -f ${SETTINGS} ]]; then
    rec_etcd=$(settings_get etcd_port)
    rec_peer=$(settings_get etcd_peer_port)
    rec_api=$(settings_get apiserver_port)
    rec_svc=$(settings_get service_cidr)
    rec_pod=$(settings_get pod_cidr)
    rec_node_ip=$(settings_get node_ip)
    rec_cluster=$(settings_get cluster_cidr)
  fi
  ETCD_PORT=${LOCAL_CLUSTER_ETCD_PORT:-${rec_etcd:-23790}}
  ETCD_PEER_PORT=${LOCAL_CLUSTER_ETCD_PEER_PORT:-${rec_peer:-23800}}
  APISERVER_PORT=${LOCAL_CLUSTER_APISERVER_PORT:-${rec_api:-26443}}
  SERVICE_CIDR=${LOCAL_CLUSTER_SERVICE_CIDR:-${rec_svc:-10.96.0.0/16}}
  POD_CIDR=${LOCAL_CLUSTER_POD_CIDR:-${rec_pod:-10.0.0.1/24}}
  CLUSTER_CIDR=${LOCAL_CLUSTER_CLUSTER_CIDR:-${rec_cluster:-10.244.0.0/16}}
  TIMEOUT=${LOCAL_CLUSTER_TIMEOUT:-180}
  # Set but empty overrides the recorded node IP.
  NODE_IP=${LOCAL_CLUSTER_NODE_IP-${rec_node_ip}}
  BIND_ADDRESS=${NODE_IP:-127.0.0.1}
  APISERVER_URL=https://${BIND_ADDRESS}:${APISERVER_PORT}
  # A real node's cluster has no fake nodes.
  if [[ -n ${NODE_IP} ]]; then NODE_NAMES=(); fi
}

# settings_get prints the value recorded for key $1 in the settings file.
settings_get() {
  sed -n "s/^$1=//p" "${SETTINGS}" | tail -n 1
}

# save_settings records the ports and ranges in use, for later commands.
save_settings() {
  cat >"${SETTINGS}" <<EOF
etcd_port=${ETCD_PORT}
etcd_peer_port=${ETCD_PEER_PORT}
apiserver_port=${APISERVER_PORT}
service_cidr=${SERVICE_CIDR}
pod_cidr=${POD_CIDR}
node_ip=${NODE_IP}
cluster_cidr=${CLUSTER_CIDR}
EOF
}

# resolve_binaries sets BIN to the folder holding the components, building missing ones
# with hack/toolchain.sh (compiles from source; never downloads a binary).
resolve_binaries() {
  if [[ -n ${LOCAL_CLUSTER_BIN_DIR:-} ]]; then
    BIN=${LOCAL_CLUSTER_BIN_DIR}
  else
    BIN=$("${ROOT}/hack/toolchain.sh" dir)
    local missing=() name
    for name in etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kwok; do
      [[ -x ${BIN}/${name} ]] || missing+=("${name}")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
      log "missing binaries: ${missing[*]}"
      log "compiling them from source with hack/toolchain.sh (first run only; this can take 20+ minutes on 2 cores)"
      "${ROOT}/hack/toolchain.sh" build "${missing[@]}"
    fi
  fi
  local name
  for name in etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kwok; do
    [[ -x ${BIN}/${name} ]] || die "${BIN}/${name} is missing"
  done
  [[ -d ${BIN}/kwok-stages ]] ||
    die "${BIN}/kwok-stages is missing (remove ${BIN}/kwok and run hack/toolchain.sh build kwok)"
}

# kubectl_bin prints the kubectl to use, without building anything.
kubectl_bin() {
  if [[ -n ${LOCAL_CLUSTER_BIN_DIR:-} && -x ${LOCAL_CLUSTER_BIN_DIR}/kubectl ]]; then
    echo "${LOCAL_CLUSTER_BIN_DIR}/kubectl"
    return
  fi
  local dir
  dir=$("${ROOT}/hack/toolchain.sh" dir 2>/dev/null) || true
  if [[ -n ${dir} && -x ${dir}/kubectl ]]; then
    echo "${dir}/kubectl"
  elif command -v kubectl >/dev/null 2>&1; then
    command -v kubectl
  else
    return 1
  fi
}

# kc runs the toolchain kubectl against the cluster as admin.
kc() {
  "${KUBECTL}" --kubeconfig="${KUBECONFIG_PATH}" "$@"
}

# ---------------------------------------------------------------------------------------
# Processes

# pid_of prints the recorded pid of component $1 (empty if none).
pid_of() {
  local f=${PIDS}/$1.pid
  if [[ -f ${f} ]]; then tr -dc '0-9' <"${f}"; fi
}

# cmdline_of prints the command line of pid $1 with NULs turned into spaces.
cmdline_of() {
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true
}

# is_ours tells whether pid $1 is alive and is component $2 started for this state folder
# (guards against a recycled pid belonging to someone else).
is_ours() {
  local pid=$1 name=$2 cmd argv0
  [[ -n ${pid} && -d /proc/${pid} ]] || return 1
  cmd=$(cmdline_of "${pid}")
  [[ -n ${cmd} ]] || return 1 # exited (zombie) or unreadable
  argv0=${cmd%% *}
  [[ ${argv0##*/} == "${name}" && ${cmd} == *"${STATE_DIR}/"* ]]
}

# running tells whether component $1 runs according to its pid file.
running() {
  is_ours "$(pid_of "$1")" "$1"
}

# stop_pid sends TERM to pid $1 (component $2), then KILL if it is still there after 10s.
stop_pid() {
  local pid=$1 name=$2 i
  kill -TERM "${pid}" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    is_ours "${pid}" "${name}" || return 0
    sleep 0.1
  done
  log "${name} (pid ${pid}) ignored TERM for 10s; sending KILL"
  kill -KILL "${pid}" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    is_ours "${pid}" "${name}" || return 0
    sleep 0.1
  done
  log "warning: ${name} (pid ${pid}) is still alive"
}

# stop_component stops component $1 if its recorded pid is ours, and removes the pid file.
stop_component() {
  local name=$1 pid
  pid=$(pid_of "${name}")
  if is_ours "${pid}" "${name}"; then
    log "stopping ${name} (pid ${pid})"
    stop_pid "${pid}" "${name}"
  fi
  rm -f "${PIDS}/${name}.pid"
}

# find_strays prints "<name> <pid>" for each process of ours (a component binary whose
# command line refers to this state folder) that no pid file accounts for, e.g. one left
# behind by an interrupted `up` or a lost pid file.
find_strays() {
  local f pid cmd argv0 name
  for f in $(grep -laF "${STATE_DIR}/" /proc/[0-9]*/cmdline 2>/dev/null || true); do
    pid=${f#/proc/}
    pid=${pid%/cmdline}
    cmd=$(cmdline_of "${pid}")
    [[ -n ${cmd} && ${cmd} == *"${STATE_DIR}/"* ]] || continue
    argv0=${cmd%% *}
    for name in "${COMPONENTS[@]}"; do
      if [[ ${argv0##*/} == "${name}" && $(pid_of "${name}") != "${pid}" ]]; then
        echo "${name} ${pid}"
      fi
    done
  done
}

# is_our_process tells whether pid $1 is any component of this state folder.
is_our_process() {
  local name
  for name in "${COMPONENTS[@]}"; do
    is_ours "$1" "${name}" && return 0
  done
  return 1
}

# start_component launches component $1 with arguments $2.. in the background, in its own
# session, with output in logs/<name>.log (the previous log is kept as <name>.log.1) and
# its pid in pids/<name>.pid. Extra environment can be given in START_ENV (array).
start_component() {
  local name=$1 i pid
  shift
  local logf=${LOGS}/${name}.log pidf=${PIDS}/${name}.pid
  [[ -f ${logf} ]] && mv -f "${logf}" "${logf}.1"
  rm -f "${pidf}"
  log "starting ${name} (log: ${logf})"
  # The wrapper writes its own pid and then execs the binary, so the pid is right even
  # when setsid has to fork.
  # shellcheck disable=SC2016 # $$ and $@ are for the inner shell
  "${SETSID[@]}" env "${START_ENV[@]}" bash -c 'echo $$ >"$0"; exec "$@"' "${pidf}" "${BIN}/${name}" "$@" \
    </dev/null >>"${logf}" 2>&1 9>&- &
  for ((i = 0; i < 100; i++)); do
    pid=$(pid_of "${name}")
    if is_ours "${pid}" "${name}"; then
      STARTED+=("${name}")
      return 0
    fi
    sleep 0.05
  done
  fail_with_log "${name}" "${name} exited right after starting"
}

# fail_with_log reports that component $1 failed with message $2, shows the end of its log
# and exits.
fail_with_log() {
  local name=$1 msg=$2 logf=${LOGS}/$1.log
  if [[ -f ${logf} ]]; then
    printf '[local-cluster] ---- last lines of %s ----\n' "${logf}" >&2
    tail -n 25 "${logf}" >&2 || true
    printf '[local-cluster] ----\n' >&2
  fi
  die "${msg}; see ${logf}"
}

# expect_alive fails if component $1 is no longer running.
expect_alive() {
  running "$1" || fail_with_log "$1" "$1 exited unexpectedly"
}

# cleanup_failed_up stops what this `up` started, when it did not finish.
cleanup_failed_up() {
  local rc=$? i name
  [[ ${UP_DONE:-0} == 1 ]] && return 0
  if [[ ${#STARTED[@]} -gt 0 ]]; then
    log "up failed; stopping what it started: ${STARTED[*]}"
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
      stop_component "${STARTED[i]}"
    done
  fi
  for name in "${COMPONENTS[@]}"; do
    running "${name}" || rm -f "${PIDS}/${name}.pid"
  done
  exit "${rc}"
}

# ---------------------------------------------------------------------------------------
# Ports

# port_in_use tells whether something accepts connections on 127.0.0.1:$1 (or on address
# $2).
port_in_use() {
  timeout 2 bash -c "exec 3<>/dev/tcp/${2:-127.0.0.1}/$1" 2>/dev/null
}

# check_port fails with a clear message if port $1 (overridable with env var $2, used by
# component $3) is taken.
check_port() {
  local port=$1 var=$2 what=$3 owner="" pids pid ours=0
  port_in_use "${port}" "${4:-}" || return 0
  if command -v ss >/dev/null 2>&1; then
    owner=$(ss -Hltnp "( sport = :${port} )" 2>/dev/null | grep -o 'users:(.*)' | head -n 1 || true)
    # A stray of ours holding the port is fine: it is stopped before anything starts.
    pids=$(grep -o 'pid=[0-9]*' <<<"${owner}" | cut -d= -f2 || true)
    for pid in ${pids}; do
      if is_our_process "${pid}"; then ours=1; else ours=0; break; fi
    done
    [[ ${ours} == 0 ]] || return 0
  fi
  die "port ${port} (needed by ${what}) is already in use${owner:+ by ${owner}}; stop that process or choose another port with ${var}=<port>"
}

# ---------------------------------------------------------------------------------------
# Certificates and kubeconfigs

# first_service_ip prints the first IP of the service range (the `kubernetes` Service).
first_service_ip() {
  local net=${SERVICE_CIDR%/*}
  echo "${net%.*}.$((${net##*.} + 1))"
}

# gen_cert writes pki/$1.{key,crt} signed by the cluster CA (or pki/$CA_NAME), unless they
# exist. $2 is the subject, $3 the extended key usage, $4 (optional) the subjectAltName list.
gen_cert() {
  local name=$1 subject=$2 usage=$3 san=${4:-} ca=${CA_NAME:-ca}
  [[ -f ${PKI}/${name}.crt && -f ${PKI}/${name}.key ]] && return 0
  local ext=${PKI}/${name}.ext
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=${usage}"
    [[ -z ${san} ]] || echo "subjectAltName=${san}"
  } >"${ext}"
  openssl genrsa -out "${PKI}/${name}.key" 2048 2>/dev/null
  openssl req -new -key "${PKI}/${name}.key" -subj "${subject}" -out "${PKI}/${name}.csr" 2>/dev/null
  openssl x509 -req -in "${PKI}/${name}.csr" -CA "${PKI}/${ca}.crt" -CAkey "${PKI}/${ca}.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 3650 -extfile "${ext}" \
    -out "${PKI}/${name}.crt" 2>/dev/null
  rm -f "${PKI}/${name}.csr" "${ext}"
}

# gen_pki creates the CA, the serving and client certificates and the service-account
# key pair, keeping whatever already exists.
gen_pki() {
  mkdir -p "${PKI}"
  chmod 700 "${PKI}"
  if [[ ! -f ${PKI}/ca.crt || ! -f ${PKI}/ca.key ]]; then
    log "generating certificates in ${PKI}"
    rm -f "${PKI}"/*.crt "${PKI}"/*.key
    openssl genrsa -out "${PKI}/ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "${PKI}/ca.key" -subj "/CN=kaddons-local-cluster-ca" -days 3650 \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -out "${PKI}/ca.crt" 2>/dev/null
  fi
  # A serving certificate made before the node IP was set lacks it: it is made anew.
  if [[ -n ${NODE_IP} && -f ${PKI}/kube-apiserver.crt ]] &&
    ! openssl x509 -in "${PKI}/kube-apiserver.crt" -noout -ext subjectAltName 2>/dev/null | grep -w "IP Address:${NODE_IP}" >/dev/null; then
    log "the kube-apiserver certificate lacks ${NODE_IP}; making a new one"
    rm -f "${PKI}/kube-apiserver.crt" "${PKI}/kube-apiserver.key"
  fi
  gen_cert kube-apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:$(first_service_ip)${NODE_IP:+,IP:${NODE_IP}}"
  # kube-apiserver's client certificate towards kubelets (logs, exec) of real nodes.
  gen_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
  # The aggregation layer: kube-apiserver proxies to aggregated APIs (metrics-server) with
  # this client certificate, of a CA of its own that aggregated servers trust for the
  # X-Remote-* headers (extension-apiserver-authentication's requestheader-client-ca-file).
  if [[ ! -f ${PKI}/front-proxy-ca.crt || ! -f ${PKI}/front-proxy-ca.key ]]; then
    rm -f "${PKI}/front-proxy-client.crt" "${PKI}/front-proxy-client.key"
    openssl genrsa -out "${PKI}/front-proxy-ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "${PKI}/front-proxy-ca.key" -subj "/CN=kaddons-local-cluster-front-proxy-ca" -days 3650 \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      -out "${PKI}/front-proxy-ca.crt" 2>/dev/null
  fi
  CA_NAME=front-proxy-ca gen_cert front-proxy-client "/CN=front-proxy-client" clientAuth
  gen_cert admin "/O=system:masters/CN=kubernetes-admin" clientAuth
  gen_cert kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
  gen_cert kube-scheduler "/CN=system:kube-scheduler" clientAuth
  # kwok plays the kubelet of every fake node, so it gets full rights like kwokctl gives it.
  gen_cert kwok "/O=system:masters/CN=kwok-controller" clientAuth
  if [[ ! -f ${PKI}/sa.key || ! -f ${PKI}/sa.pub ]]; then
    openssl genrsa -out "${PKI}/sa.key" 2048 2>/dev/null
    openssl rsa -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub" 2>/dev/null
  fi
}

# b64 prints file $1 base64-encoded on one line.
b64() {
  base64 <"$1" | tr -d '\n'
}

# write_kubeconfig writes kubeconfig $1 for user $2 authenticating with client cert pki/$3.
write_kubeconfig() {
  local out=$1 user=$2 cert=$3
  (
    umask 077
    cat >"${out}" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local-cluster
  cluster:
    server: ${APISERVER_URL}
    certificate-authority-data: $(b64 "${PKI}/ca.crt")
users:
- name: ${user}
  user:
    client-certificate-data: $(b64 "${PKI}/${cert}.crt")
    client-key-data: $(b64 "${PKI}/${cert}.key")
contexts:
- name: local-cluster
  context:
    cluster: local-cluster
    user: ${user}
current-context: local-cluster
EOF
  )
}

# write_kwok_config concatenates the Stage objects of KWOK_STAGE_SETS (the files each
# kustomization.yaml lists) into one kwok config file.
write_kwok_config() {
  local out=${STATE_DIR}/kwok/kwok.yaml set dir file
  mkdir -p "${STATE_DIR}/kwok"
  : >"${out}.tmp"
  for set in "${KWOK_STAGE_SETS[@]}"; do
    dir=${BIN}/kwok-stages/${set}
    [[ -f ${dir}/kustomization.yaml ]] || die "kwok stage set ${dir} not found"
    while read -r file; do
      [[ -n ${file} ]] || continue
      printf -- '---\n# from kwok-stages/%s/%s\n' "${set}" "${file}" >>"${out}.tmp"
      cat "${dir}/${file}" >>"${out}.tmp"
    done < <(awk '/^resources:/ {r=1; next} /^[^ -]/ {r=0} r && /^- / {print $2}' "${dir}/kustomization.yaml")
  done
  mv "${out}.tmp" "${out}"
}

# ---------------------------------------------------------------------------------------
# Components

# start_etcd starts etcd on the loopback ports with its data in the state folder.
start_etcd() {
  start_component etcd \
    --name=local-cluster \
    --data-dir="${STATE_DIR}/etcd" \
    --listen-client-urls="http://127.0.0.1:${ETCD_PORT}" \
    --advertise-client-urls="http://127.0.0.1:${ETCD_PORT}" \
    --listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-cluster="local-cluster=http://127.0.0.1:${ETCD_PEER_PORT}" \
    --initial-cluster-state=new \
    --auto-compaction-mode=periodic \
    --auto-compaction-retention=5m \
    --quota-backend-bytes=$((4 * 1024 * 1024 * 1024)) \
    --unsafe-no-fsync=true \
    --log-level=warn
}

# wait_etcd waits until etcd reports itself healthy.
wait_etcd() {
  local deadline=$((SECONDS + TIMEOUT))
  until [[ $(curl -fsS --max-time 2 "http://127.0.0.1:${ETCD_PORT}/health" 2>/dev/null || true) == *'"health":"true"'* ]]; do
    expect_alive etcd
    ((SECONDS < deadline)) || fail_with_log etcd "etcd was not healthy within ${TIMEOUT}s"
    sleep 0.5
  done
}

# start_apiserver starts kube-apiserver on 127.0.0.1 with RBAC and service-account tokens.
start_apiserver() {
  # The API server reaches kubelets (logs, exec, port-forward) at their InternalIP, never
  # by resolving a node's name with the machine's resolver.
  # With a node IP, Pods of the real node reach the API server through the `kubernetes`
  # Service: the endpoint reconciler publishes that address.
  local reconciler=none
  [[ -z ${NODE_IP} ]] || reconciler=lease
  start_component kube-apiserver \
    --advertise-address="${BIND_ADDRESS}" \
    --endpoint-reconciler-type="${reconciler}" \
    --bind-address="${BIND_ADDRESS}" \
    --kubelet-client-certificate="${PKI}/apiserver-kubelet-client.crt" \
    --kubelet-client-key="${PKI}/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --proxy-client-cert-file="${PKI}/front-proxy-client.crt" \
    --proxy-client-key-file="${PKI}/front-proxy-client.key" \
    --requestheader-client-ca-file="${PKI}/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --secure-port="${APISERVER_PORT}" \
    --etcd-servers="http://127.0.0.1:${ETCD_PORT}" \
    --tls-cert-file="${PKI}/kube-apiserver.crt" \
    --tls-private-key-file="${PKI}/kube-apiserver.key" \
    --client-ca-file="${PKI}/ca.crt" \
    --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="${PKI}/sa.pub" \
    --service-account-signing-key-file="${PKI}/sa.key" \
    --service-cluster-ip-range="${SERVICE_CIDR}" \
    --allow-privileged=true \
    --profiling=false
}

# wait_apiserver waits until /readyz of the apiserver answers ok.
wait_apiserver() {
  local deadline=$((SECONDS + TIMEOUT))
  until [[ $(curl -sS --max-time 5 --cacert "${PKI}/ca.crt" --cert "${PKI}/admin.crt" \
    --key "${PKI}/admin.key" "${APISERVER_URL}/readyz" 2>/dev/null || true) == ok ]]; do
    expect_alive kube-apiserver
    ((SECONDS < deadline)) || fail_with_log kube-apiserver "kube-apiserver was not ready within ${TIMEOUT}s"
    sleep 0.5
  done
}

# start_controller_manager starts kube-controller-manager with all default controllers
# (node lifecycle included) and per-controller service-account credentials, except those
# that publish endpoints. The fake pods' IPs are not on this machine, and nothing may be
# sent to them: without EndpointSlices the API server never dials an aggregated API
# (metrics-server's APIService then reports EndpointsNotFound instead of being probed).
# A real node's cluster (a node IP) has no fake pods: it publishes endpoints, and gives
# every node a pod CIDR from CLUSTER_CIDR.
start_controller_manager() {
  local node_flags=(--controllers='*,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller')
  if [[ -n ${NODE_IP} ]]; then
    node_flags=(--controllers='*' --allocate-node-cidrs=true --cluster-cidr="${CLUSTER_CIDR}" --node-cidr-mask-size=24)
  fi
  start_component kube-controller-manager \
    --kubeconfig="${STATE_DIR}/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port=0 \
    --leader-elect=false \
    "${node_flags[@]}" \
    --use-service-account-credentials=true \
    --service-account-private-key-file="${PKI}/sa.key" \
    --root-ca-file="${PKI}/ca.crt" \
    --cluster-signing-cert-file="${PKI}/ca.crt" \
    --cluster-signing-key-file="${PKI}/ca.key" \
    --service-cluster-ip-range="${SERVICE_CIDR}" \
    --cluster-name=local-cluster \
    --profiling=false
}

# start_scheduler starts kube-scheduler without serving any port.
start_scheduler() {
  start_component kube-scheduler \
    --kubeconfig="${STATE_DIR}/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port=0 \
    --leader-elect=false \
    --profiling=false
}

# start_kwok starts kwok for the nodes annotated kwok.x-k8s.io/node=fake, with the stage
# config written by write_kwok_config. kwok serves no port (no --node-port/--server-address).
start_kwok() {
  local START_ENV=("KWOK_WORKDIR=${STATE_DIR}/kwok") # keeps ~/.kwok/kwok.yaml out
  start_component kwok \
    --kubeconfig="${STATE_DIR}/kwok.kubeconfig" \
    --config="${STATE_DIR}/kwok/kwok.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --manage-nodes-with-label-selector= \
    --disregard-status-with-annotation-selector=kwok.x-k8s.io/status=custom \
    --cidr="${POD_CIDR}" \
    --node-ip=10.0.1.1 \
    --node-lease-duration-seconds=40
}

# release_node_leases deletes the node Leases, held by a kwok that no longer runs (kwok
# holds them under a per-process identity). The new kwok would otherwise leave those nodes
# and their pods alone until the old Leases expire (40s).
release_node_leases() {
  ((${#NODE_NAMES[@]})) || return 0
  kc delete lease --namespace=kube-node-lease --ignore-not-found "${NODE_NAMES[@]}" >/dev/null
}

# create_nodes creates the fake Node objects that do not exist yet. Taints are left to
# Kubernetes: admission adds node.kubernetes.io/not-ready and the node lifecycle
# controller removes it once kwok reports the node Ready.
create_nodes() {
  local i name existing
  existing=$(kc get nodes -o 'jsonpath={.items[*].metadata.name}')
  for i in "${!NODE_NAMES[@]}"; do
    name=${NODE_NAMES[i]}
    [[ " ${existing} " == *" ${name} "* ]] && continue
    log "creating node ${name}"
    kc create -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: ${name}
  annotations:
    kwok.x-k8s.io/node: fake
  labels:
    type: kwok
    kubernetes.io/hostname: ${name}
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
status:
  addresses:
  - type: InternalIP
    address: 10.0.1.$((10 + i))
  - type: Hostname
    address: ${name}
  allocatable:
    cpu: "32"
    memory: 256Gi
    pods: "110"
  capacity:
    cpu: "32"
    memory: 256Gi
    pods: "110"
EOF
  done
}

# nodes_ready tells whether every fake node is Ready, has no not-ready/unreachable taint
# and has its Lease (which only the running kwok creates, see release_node_leases).
nodes_ready() {
  local out name ready taints seen=0 leases
  leases=$(kc get lease --namespace=kube-node-lease -o 'jsonpath={.items[*].metadata.name}' 2>/dev/null) || return 1
  for name in "${NODE_NAMES[@]}"; do
    [[ " ${leases} " == *" ${name} "* ]] || return 1
  done
  out=$(kc get nodes -o 'jsonpath={range .items[*]}{.metadata.name}{"|"}{.status.conditions[?(@.type=="Ready")].status}{"|"}{.spec.taints[*].key}{"\n"}{end}' 2>/dev/null) || return 1
  while IFS='|' read -r name ready taints; do
    [[ " ${NODE_NAMES[*]} " == *" ${name} "* ]] || continue
    [[ ${ready} == True ]] || return 1
    [[ ${taints} != *node.kubernetes.io/not-ready* && ${taints} != *node.kubernetes.io/unreachable* ]] || return 1
    seen=$((seen + 1))
  done <<<"${out}"
  [[ ${seen} -eq ${#NODE_NAMES[@]} ]]
}

# wait_nodes waits until nodes_ready, while checking that the components stay up.
wait_nodes() {
  local deadline=$((SECONDS + TIMEOUT)) name
  until nodes_ready; do
    for name in "${COMPONENTS[@]}"; do expect_alive "${name}"; done
    if ((SECONDS >= deadline)); then
      kc get nodes -o wide >&2 || true
      kc get nodes -o 'custom-columns=NAME:.metadata.name,TAINTS:.spec.taints[*].key' >&2 || true
      fail_with_log kwok "nodes were not Ready without not-ready taint within ${TIMEOUT}s (also check ${LOGS}/kube-controller-manager.log)"
    fi
    sleep 0.5
  done
}

# wait_controller_manager waits until the controller manager started at $1 (UTC, RFC 3339)
# has synced its caches and runs its controllers: its node lifecycle controller then
# emits a RegisteredNode event for every node.
wait_controller_manager() {
  local since=$1 deadline=$((SECONDS + TIMEOUT)) out name ts seen all
  while true; do
    out=$(kc get events --namespace=default --field-selector=reason=RegisteredNode \
      -o 'jsonpath={range .items[*]}{.involvedObject.name}{"|"}{.lastTimestamp}{"\n"}{end}' 2>/dev/null) || out=""
    seen=" "
    while IFS='|' read -r name ts; do
      if [[ -n ${name} && ! ${ts} < ${since} ]]; then seen+="${name} "; fi
    done <<<"${out}"
    all=1
    for name in "${NODE_NAMES[@]}"; do
      [[ ${seen} == *" ${name} "* ]] || all=0
    done
    [[ ${all} == 0 ]] || return 0
    expect_alive kube-controller-manager
    ((SECONDS < deadline)) ||
      fail_with_log kube-controller-manager "kube-controller-manager did not register the nodes within ${TIMEOUT}s"
    sleep 0.5
  done
}

# ---------------------------------------------------------------------------------------
# Commands

cmd_up() {
  local start=${SECONDS} name to_start=() restart=() strays sname pid i
  mkdir -p "${STATE_DIR}" "${LOGS}" "${PIDS}"
  touch "${MARKER}"
  STATE_DIR=$(cd "${STATE_DIR}" && pwd -P)
  set_paths
  lock_state

  if [[ -n ${NODE_IP} ]] && ! ip -o addr show 2>/dev/null | grep -F " inet ${NODE_IP}/" >/dev/null; then
    die "LOCAL_CLUSTER_NODE_IP=${NODE_IP} is no address of this machine; hack/node.sh up creates it on its bridge"
  fi
  # A running kube-apiserver bound elsewhere (the node IP changed) is restarted.
  if running kube-apiserver && [[ " $(cmdline_of "$(pid_of kube-apiserver)") " != *" --bind-address=${BIND_ADDRESS} "* ]]; then
    log "kube-apiserver runs on another address than ${BIND_ADDRESS}; restarting it"
    stop_component kube-apiserver
  fi
  for name in "${COMPONENTS[@]}"; do
    if running "${name}"; then
      continue
    fi
    [[ -f ${PIDS}/${name}.pid ]] && log "removing stale pid file of ${name}"
    rm -f "${PIDS}/${name}.pid"
    to_start+=("${name}")
  done
  strays=$(find_strays)
  if [[ ${#to_start[@]} -eq 0 && -z ${strays} ]]; then
    log "already running (state: ${STATE_DIR})"
    KUBECTL=$(kubectl_bin) || die "kubectl not found"
    cmd_status
    return
  fi

  # Check every port before starting anything, so a conflict leaves nothing behind.
  for name in "${to_start[@]}"; do
    case ${name} in
      etcd)
        check_port "${ETCD_PORT}" LOCAL_CLUSTER_ETCD_PORT "etcd (client)"
        check_port "${ETCD_PEER_PORT}" LOCAL_CLUSTER_ETCD_PEER_PORT "etcd (peer)"
        ;;
      kube-apiserver) check_port "${APISERVER_PORT}" LOCAL_CLUSTER_APISERVER_PORT kube-apiserver "${BIND_ADDRESS}" ;;
    esac
  done

  # Whatever depends on a component that (re)starts is restarted too: after the apiserver
  # comes back, the clients' watches can sit in client-go's retry backoff for tens of
  # seconds (they hit it while RBAC was not ready yet), which delays every controller.
  if [[ ${LOCAL_CLUSTER_RESTART_DEPENDENTS:-1} == 0 ]]; then
    restart=()
  elif [[ " ${to_start[*]} " == *" etcd "* ]]; then
    restart=("${COMPONENTS[@]:1}")
  elif [[ " ${to_start[*]} " == *" kube-apiserver "* ]]; then
    restart=(kube-controller-manager kube-scheduler kwok)
  fi

  resolve_binaries
  # Stop what is restarted and the strays, dependents first (the apiserver hangs on TERM
  # when etcd is already gone).
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    name=${COMPONENTS[i]}
    if [[ " ${restart[*]} " == *" ${name} "* ]] && running "${name}"; then
      log "restarting ${name}, as a component it depends on restarts"
      stop_component "${name}"
    fi
    while read -r sname pid; do
      [[ ${sname} == "${name}" ]] || continue
      log "killing stray ${name} (pid ${pid}) left over from an earlier run"
      stop_pid "${pid}" "${name}"
    done <<<"${strays}"
  done
  KUBECTL=${BIN}/kubectl
  gen_pki
  save_settings
  write_kubeconfig "${KUBECONFIG_PATH}" kubernetes-admin admin
  write_kubeconfig "${STATE_DIR}/kube-controller-manager.kubeconfig" system:kube-controller-manager kube-controller-manager
  write_kubeconfig "${STATE_DIR}/kube-scheduler.kubeconfig" system:kube-scheduler kube-scheduler
  write_kubeconfig "${STATE_DIR}/kwok.kubeconfig" kwok-controller kwok
  write_kwok_config

  STARTED=()
  UP_DONE=0
  trap cleanup_failed_up EXIT
  trap 'exit 130' INT TERM

  running etcd || start_etcd
  wait_etcd
  running kube-apiserver || start_apiserver
  log "waiting for kube-apiserver /readyz on ${APISERVER_URL}"
  wait_apiserver
  local kcm_since=""
  if ! running kube-controller-manager; then
    kcm_since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    start_controller_manager
  fi
  running kube-scheduler || start_scheduler
  if ! running kwok; then
    release_node_leases
    start_kwok
  fi
  if ((${#NODE_NAMES[@]})); then
    create_nodes
    log "waiting for nodes ${NODE_NAMES[*]} to be Ready"
    wait_nodes
  fi
  # Nodes that were Ready already prove nothing about a controller manager just started.
  [[ -z ${kcm_since} ]] || wait_controller_manager "${kcm_since}"

  UP_DONE=1
  trap - EXIT INT TERM
  log "cluster ready in $((SECONDS - start))s; state in ${STATE_DIR}"
  log "use it with: export KUBECONFIG=${KUBECONFIG_PATH}"
}

# lock_state serialises `up` and `down` on one state folder (the lock is on fd 9, which
# the started components do not inherit).
lock_state() {
  command -v flock >/dev/null 2>&1 || return 0
  exec 9>"${STATE_DIR}/.lock"
  if ! flock -n 9; then
    log "another up/down is running on ${STATE_DIR}; waiting for it"
    flock -w 900 9 || die "timed out waiting for the lock on ${STATE_DIR}/.lock"
  fi
}

# set_paths sets the paths inside STATE_DIR.
set_paths() {
  PKI=${STATE_DIR}/pki
  LOGS=${STATE_DIR}/logs
  PIDS=${STATE_DIR}/pids
  KUBECONFIG_PATH=${STATE_DIR}/kubeconfig
  SETTINGS=${STATE_DIR}/settings.env
  MARKER=${STATE_DIR}/.local-cluster
}

cmd_down() {
  local wipe=0 i
  case ${1:-} in
    "") ;;
    --wipe) wipe=1 ;;
    *) die "usage: $0 down [--wipe]" ;;
  esac
  if [[ -d ${STATE_DIR} ]]; then
    lock_state
    for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
      stop_component "${COMPONENTS[i]}"
    done
  fi
  if [[ ${wipe} == 1 && -d ${STATE_DIR} ]]; then
    [[ -f ${MARKER} ]] || die "${STATE_DIR} has no ${MARKER##*/} marker; not deleting a folder this script did not create"
    rm -rf "${STATE_DIR}"
    log "deleted ${STATE_DIR}"
  fi
  log "stopped"
}

cmd_status() {
  local name pid all=0
  echo "state: ${STATE_DIR}"
  echo "apiserver: ${APISERVER_URL}  etcd: http://127.0.0.1:${ETCD_PORT}"
  for name in "${COMPONENTS[@]}"; do
    pid=$(pid_of "${name}")
    if is_ours "${pid}" "${name}"; then
      printf '  %-24s pid %-8s running\n' "${name}" "${pid}"
    else
      printf '  %-24s pid %-8s stopped\n' "${name}" "${pid:--}"
      all=1
    fi
  done
  if running kube-apiserver && [[ -f ${KUBECONFIG_PATH} ]]; then
    [[ -n ${KUBECTL:-} ]] || KUBECTL=$(kubectl_bin) || { echo "(kubectl not found)"; return "${all}"; }
    kc get nodes -o wide || all=1
  fi
  return "${all}"
}

cmd_env() {
  printf 'export KUBECONFIG=%q\n' "${KUBECONFIG_PATH}"
}

cmd_kubeconfig_for_sa() {
  [[ $# -eq 3 ]] || die "usage: $0 kubeconfig-for-sa NAMESPACE NAME OUT"
  local ns=$1 sa=$2 out=$3 token
  [[ -f ${KUBECONFIG_PATH} && -f ${PKI}/ca.crt ]] || die "no cluster in ${STATE_DIR}; run: $0 up"
  KUBECTL=$(kubectl_bin) || die "kubectl not found"
  token=$(kc create token "${sa}" --namespace="${ns}" --duration=24h) ||
    die "could not create a token for serviceaccount ${ns}/${sa}"
  mkdir -p "$(dirname "${out}")"
  (
    umask 077
    cat >"${out}" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local-cluster
  cluster:
    server: ${APISERVER_URL}
    certificate-authority-data: $(b64 "${PKI}/ca.crt")
users:
- name: ${ns}-${sa}
  user:
    token: ${token}
contexts:
- name: local-cluster
  context:
    cluster: local-cluster
    namespace: ${ns}
    user: ${ns}-${sa}
current-context: local-cluster
EOF
  )
  log "wrote ${out} for serviceaccount ${ns}/${sa} (token valid 24h)"
}

cmd_logs() {
  local lines=${LOCAL_CLUSTER_LOG_LINES:-60} name f
  [[ -d ${LOGS} ]] || { log "no logs in ${LOGS}"; return 0; }
  for name in "${COMPONENTS[@]}"; do
    f=${LOGS}/${name}.log
    [[ -f ${f} ]] || continue
    # kwok logs a lease heartbeat per node every few seconds; they say nothing on failure.
    printf '===== %s (last %s lines of %s, lease heartbeats left out) =====\n' "${name}" "${lines}" "${f}"
    grep -v '"msg":"Syncing lease"' "${f}" | tail -n "${lines}" || true
  done
}

main() {
  local cmd=${1:-}
  [[ $# -gt 0 ]] && shift
  init_state
  SETSID=()
  command -v setsid >/dev/null 2>&1 && SETSID=(setsid)
  START_ENV=()
  STARTED=()
  case ${cmd} in
    up) [[ $# -eq 0 ]] || die "usage: $0 up"; cmd_up ;;
    down) cmd_down "$@" ;;
    status) cmd_status ;;
    env) cmd_env ;;
    kubeconfig-for-sa) cmd_kubeconfig_for_sa "$@" ;;
    logs) cmd_logs ;;
    -h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
    *) die "usage: $0 up|down [--wipe]|status|env|kubeconfig-for-sa NAMESPACE NAME OUT|logs (see --help)" ;;
  esac
}

main "$@"
