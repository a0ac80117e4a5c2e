#!/usr/bin/env bash
# demo.sh shows kaddons at work on a local cluster (hack/local-cluster.sh) with one REAL
# node on this machine (hack/node.sh: containerd, runc and a kubelet; images built from
# source, nothing pulled). It installs the CRDs and the operator's RBAC and runs the
# operator on this machine as its own ServiceAccount, on the host network as the manager
# Deployment's bootstrap mode runs it. Then it bootstraps the node the way a cluster
# bootstrapper would: the node starts NotReady, kaddons installs the pod network
# (KubeRouter) and kube-proxy, the node turns Ready, and kaddons installs CoreDNS and
# metrics-server. It ends by showing a Pod resolving a cluster name through that CoreDNS,
# `kubectl top nodes` served by that metrics-server, and the add-ons.
#
# Usage:
#   hack/demo.sh up      build, start the cluster, the node and the operator, apply the
#                        add-ons (run it again at any time: it reuses what runs, restarts
#                        what died)
#   hack/demo.sh down    stop the operator, the node and the cluster, undo the node's
#                        changes to the host, and delete their state
#
# State lives in .local/demo (the operator's kubeconfig, pid file and log), .local/node
# and the cluster's folder (.local/cluster, or LOCAL_CLUSTER_DIR).
#
# Environment:
#   DEMO_TIMEOUT   seconds to wait for the operator and for each add-on (default 300)
#   DEMO_NODE      real (default): the real node, which needs root on Linux; kwok: kwok's
#                  fake nodes instead, where every Pod is Ready by fiat and no add-on
#                  serves (for machines without root)
#   The LOCAL_CLUSTER_* variables of hack/local-cluster.sh and KADDONS_NODE_* of
#   hack/node.sh apply as well.
#
# The operator runs with leader election, as it does in a cluster; outside a cluster the
# Lease's namespace must be given (--leader-election-namespace).
set -euo pipefail
# The Go toolchain is pinned, as in the Makefile and go.mod; the go command fetches it from
# the module proxy when it is not installed.
export GOTOOLCHAIN=go1.27.3

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${ROOT}"

CLUSTER=${ROOT}/hack/local-cluster.sh
NODE=${ROOT}/hack/node.sh
NODE_MODE=${DEMO_NODE:-real}
# The images the real node needs for the demo's add-ons (their stable versions): built from
# source by hack/addonimages and cached in ~/.cache/kaddons/images.
NODE_IMAGES=(pause kube-proxy kube-router coredns:v1.12.1 metrics-server:v0.7.2)
DEMO_DIR=${ROOT}/.local/demo
MANAGER=${ROOT}/bin/manager
PID_FILE=${DEMO_DIR}/manager.pid
LOG_FILE=${DEMO_DIR}/manager.log
PORT_FILE=${DEMO_DIR}/manager.port
SUM_FILE=${DEMO_DIR}/manager.sha256
SA_KUBECONFIG=${DEMO_DIR}/manager.kubeconfig
# The ServiceAccount config/default gives the operator (namespace and name prefix applied).
SA_NAMESPACE=kaddons-system
SA_NAME=kaddons-controller-manager
# The kinds of config/default the demo installs: everything but the manager's Deployment
# and its metrics Service.
INSTALL_KINDS="Namespace CustomResourceDefinition ServiceAccount Role ClusterRole RoleBinding ClusterRoleBinding ValidatingAdmissionPolicy ValidatingAdmissionPolicyBinding"
TIMEOUT=${DEMO_TIMEOUT:-300}

# step ends the step in progress, printing how long it took, and starts the next.
STEP_START=""
step() {
  end_step
  STEP_START=${SECONDS}
  printf '==> %s\n' "$*"
}
# end_step prints how long the step in progress took.
end_step() {
  [[ -n ${STEP_START} ]] && printf '    (took %ds)\n' $((SECONDS - STEP_START))
  STEP_START=""
}
info() { printf '    %s\n' "$*"; }
die() { printf 'demo: error: %s\n' "$*" >&2; exit 1; }

# kc runs the toolchain kubectl as the cluster admin.
kc() {
  "${KUBECTL}" --kubeconfig="${ADMIN_KUBECONFIG}" "$@"
}

# lock serialises demo runs: a second `up` or a `down` waits for the one in progress. The
# lock is fd 8, which no process started here inherits.
lock() {
  mkdir -p "${DEMO_DIR}"
  exec 8>"${DEMO_DIR}/.lock"
  if ! flock -n 8; then
    info "another hack/demo.sh is running; waiting for it"
    flock -w 1800 8 || die "timed out waiting for ${DEMO_DIR}/.lock"
  fi
}

# cluster runs hack/local-cluster.sh without handing it the lock.
cluster() {
  "${CLUSTER}" "$@" 8>&-
}

# node runs hack/node.sh without handing it the lock, its output indented.
node() {
  "${NODE}" "$@" 8>&- 2>&1 | sed 's/^/    /'
  return "${PIPESTATUS[0]}"
}

# ---------------------------------------------------------------------------------------
# The manager process

# manager_pid prints the recorded pid of the manager (empty if none).
manager_pid() {
  if [[ -f ${PID_FILE} ]]; then tr -dc '0-9' <"${PID_FILE}"; fi
}

# is_manager tells whether pid $1 is a manager this demo started: bin/manager running with
# the demo's kubeconfig (a recycled pid belongs to something else).
is_manager() {
  local pid=$1 cmd
  [[ -n ${pid} && -r /proc/${pid}/cmdline ]] || return 1
  cmd=$(tr '\0' '\n' <"/proc/${pid}/cmdline" 2>/dev/null | head -n 1) || return 1
  [[ ${cmd} == "${MANAGER}" ]] || return 1
  tr '\0' '\n' <"/proc/${pid}/environ" 2>/dev/null | grep -qxF "KUBECONFIG=${SA_KUBECONFIG}"
}

# demo_managers prints the pids of every manager this demo started, recorded or not.
demo_managers() {
  local f pid
  for f in /proc/[0-9]*/cmdline; do
    pid=${f#/proc/}
    pid=${pid%/cmdline}
    is_manager "${pid}" && echo "${pid}"
  done
  return 0
}

# stop_manager stops every manager of the demo: TERM, then KILL after 15s.
stop_manager() {
  local pid i
  for pid in $(demo_managers); do
    info "stopping the manager (pid ${pid})"
    kill -TERM "${pid}" 2>/dev/null || continue
    for ((i = 0; i < 150; i++)); do
      is_manager "${pid}" || break
      sleep 0.1
    done
    if is_manager "${pid}"; then
      info "the manager ignored TERM for 15s; sending KILL"
      kill -KILL "${pid}" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do
        is_manager "${pid}" || break
        sleep 0.1
      done
    fi
  done
  rm -f "${PID_FILE}" "${PORT_FILE}" "${SUM_FILE}"
}

# readyz tells whether the manager's probe endpoint on port $1 answers ok.
readyz() {
  [[ -n $1 && $(curl -fsS --max-time 2 "http://127.0.0.1:$1/readyz" 2>/dev/null || true) == ok ]]
}

# free_port prints a port on 127.0.0.1 that nothing listens on.
free_port() {
  local port
  for ((port = 18081; port < 18181; port++)); do
    if ! timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/${port}" 2>/dev/null; then
      echo "${port}"
      return 0
    fi
  done
  die "no free port in 18081-18180 for the manager's health probes"
}

# sa_works tells whether the demo's kubeconfig authenticates as the operator's
# ServiceAccount against the running cluster (a re-created cluster or an expired token
# fails here).
sa_works() {
  [[ -f ${SA_KUBECONFIG} ]] || return 1
  [[ $("${KUBECTL}" --kubeconfig="${SA_KUBECONFIG}" auth whoami -o 'jsonpath={.status.userInfo.username}' 2>/dev/null || true) == \
    "system:serviceaccount:${SA_NAMESPACE}:${SA_NAME}" ]]
}

# start_manager reuses a healthy manager started from the current binary with working
# credentials, and otherwise (re)starts it and waits for /readyz.
start_manager() {
  local pid port sum deadline
  pid=$(manager_pid)
  port=$(cat "${PORT_FILE}" 2>/dev/null || true)
  sum=$(sha256sum "${MANAGER}" | cut -d' ' -f1)
  if is_manager "${pid}"; then
    if [[ ${sum} != "$(cat "${SUM_FILE}" 2>/dev/null || true)" ]]; then
      info "bin/manager changed since the running manager started; restarting it"
    elif ! sa_works; then
      info "the running manager's credentials no longer work; restarting it"
    elif ! readyz "${port}"; then
      info "the running manager (pid ${pid}) is not ready; restarting it"
    else
      info "reusing the running manager (pid ${pid}, log ${LOG_FILE})"
      return 0
    fi
  elif [[ -n ${pid} ]]; then
    info "the manager (pid ${pid}) is gone; starting a new one"
  fi
  stop_manager

  cluster kubeconfig-for-sa "${SA_NAMESPACE}" "${SA_NAME}" "${SA_KUBECONFIG}"
  port=$(free_port)
  [[ -f ${LOG_FILE} ]] && mv -f "${LOG_FILE}" "${LOG_FILE}.1"
  info "starting bin/manager as ${SA_NAMESPACE}/${SA_NAME} (log ${LOG_FILE})"
  # The wrapper records its own pid and execs the manager, in a session of its own so
  # that it outlives this script.
  # shellcheck disable=SC2016 # $$, $0 and $@ are for the inner shell
  setsid env KUBECONFIG="${SA_KUBECONFIG}" bash -c 'echo $$ >"$0"; exec "$@"' "${PID_FILE}" \
    "${MANAGER}" \
    --channels=channels \
    --leader-elect \
    --leader-election-namespace="${SA_NAMESPACE}" \
    --health-probe-bind-address="127.0.0.1:${port}" \
    --metrics-bind-address=0 \
    </dev/null >>"${LOG_FILE}" 2>&1 8>&- &
  echo "${port}" >"${PORT_FILE}"
  echo "${sum}" >"${SUM_FILE}"

  deadline=$((SECONDS + TIMEOUT))
  until readyz "${port}"; do
    pid=$(manager_pid)
    if [[ -n ${pid} ]] && ! is_manager "${pid}"; then
      FAILED_STEP="the manager exited while starting"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      FAILED_STEP="the manager was not ready on 127.0.0.1:${port}/readyz within ${TIMEOUT}s"
      return 1
    fi
    sleep 0.5
  done
  info "manager ready (pid $(manager_pid), health probes on 127.0.0.1:${port})"

  # /readyz does not wait for leadership. After a crash the Lease of the dead manager has
  # to expire first (15s), and until then nothing is reconciled.
  info "waiting for the manager to hold the leader election Lease"
  until grep -qi 'successfully acquired lease' "${LOG_FILE}"; do
    if ! is_manager "$(manager_pid)"; then
      FAILED_STEP="the manager exited while waiting for the leader election Lease"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      FAILED_STEP="the manager did not acquire the leader election Lease within ${TIMEOUT}s"
      return 1
    fi
    sleep 0.5
  done
  info "the manager leads"
}

# ---------------------------------------------------------------------------------------
# Installation

# install_manifests prints config/default without the kinds the demo leaves out.
install_manifests() {
  kc kustomize "${ROOT}/config/default" | awk -v kinds=" ${INSTALL_KINDS} " '
    function flush() { if (doc != "" && index(kinds, " " kind " ") > 0) printf "---\n%s", doc; doc = ""; kind = "" }
    /^---$/ { flush(); next }
    /^kind: / { kind = $2 }
    { doc = doc $0 "\n" }
    END { flush() }'
}

# install applies the CRDs and RBAC and waits for the CRDs to be Established.
install() {
  local manifests crds
  manifests=$(install_manifests)
  grep -q '^kind: CustomResourceDefinition$' <<<"${manifests}" || die "config/default rendered no CRD"
  grep -q "^  name: ${SA_NAME}$" <<<"${manifests}" || die "config/default has no ServiceAccount ${SA_NAME}"
  kc apply --server-side --force-conflicts -f - <<<"${manifests}" | sed 's/^/    /'
  crds=$(kc get -f - -o name <<<"${manifests}" | grep '^customresourcedefinition' || true)
  # shellcheck disable=SC2086 # one argument per CRD
  kc wait --for=condition=Established --timeout="${TIMEOUT}s" ${crds} | sed 's/^/    /'
}

# ---------------------------------------------------------------------------------------
# Diagnostics

# diagnose prints what explains a failed demo: the manager log, the add-ons' conditions
# and the cluster components' logs.
diagnose() {
  printf '\n==> %s\n' "demo failed: ${FAILED_STEP:-see the output above}" >&2
  if [[ -f ${LOG_FILE} ]]; then
    printf '\n----- last 60 lines of %s -----\n' "${LOG_FILE}" >&2
    tail -n 60 "${LOG_FILE}" >&2 || true
  fi
  if [[ -n ${KUBECTL:-} && -f ${ADMIN_KUBECONFIG:-} ]]; then
    printf '\n----- add-on conditions -----\n' >&2
    kc get addons -A -o 'jsonpath={range .items[*]}{.kind} {.metadata.namespace}/{.metadata.name} (generation {.metadata.generation}, applied {.status.appliedVersion}){"\n"}{range .status.conditions[*]}  {.type}={.status} {.reason} (generation {.observedGeneration}): {.message}{"\n"}{end}{end}' >&2 || true
    printf '\n----- kaddons workloads -----\n' >&2
    kc get deploy,ds,svc,pods -A -l app.kubernetes.io/managed-by=kaddons -o wide >&2 || true
  fi
  printf '\n----- cluster logs -----\n' >&2
  cluster logs >&2 || true
  printf '\nThe cluster and the operator are left running for inspection; stop them with: make demo-down\n' >&2
}

on_exit() {
  local rc=$?
  # An interrupt (130) is the user's choice, not a failure to explain.
  [[ ${rc} -eq 0 || ${rc} -eq 130 ]] || diagnose
  exit "${rc}"
}

# ---------------------------------------------------------------------------------------
# Commands

cmd_up() {
  local start=${SECONDS}
  case ${NODE_MODE} in
    real)
      [[ $(uname -s) == Linux && $(id -u) == 0 ]] ||
        die "the real node needs root on Linux (containerd, runc, the kubelet); DEMO_NODE=kwok runs the demo on kwok's fake nodes instead"
      ;;
    kwok) ;;
    *) die "DEMO_NODE is real or kwok, not ${NODE_MODE}" ;;
  esac
  lock
  trap on_exit EXIT
  trap 'exit 130' INT TERM

  step "Building the Kubernetes toolchain (cached after the first build; about 15 minutes cold with the kubelet)"
  FAILED_STEP="building the toolchain"
  "${ROOT}/hack/toolchain.sh" build 8>&-
  if [[ ${NODE_MODE} == real ]]; then "${ROOT}/hack/toolchain.sh" build kubelet 8>&-; fi
  KUBECTL=$("${ROOT}/hack/toolchain.sh" dir)/kubectl

  if [[ ${NODE_MODE} == real ]]; then
    step "Building the add-on images from source: ${NODE_IMAGES[*]} (cached; about 25 minutes cold)"
    FAILED_STEP="building the add-on images (hack/node.sh images)"
    node images "${NODE_IMAGES[@]}"
  fi

  # The build runs while the cluster starts: both take seconds to tens of seconds.
  step "Building the manager (bin/manager) in the background"
  go build -tags without_exec_applier,without_direct_applier -o "${MANAGER}" . >"${DEMO_DIR}/build.log" 2>&1 8>&- &
  local build_pid=$!

  if [[ ${NODE_MODE} == real ]]; then
    step "Starting the local cluster and the real node (hack/node.sh up)"
    FAILED_STEP="starting the local cluster and the node"
    node up
  else
    step "Starting the local cluster"
    FAILED_STEP="starting the local cluster"
    cluster up
  fi

  step "Waiting for the manager build"
  FAILED_STEP="building the manager (go build -o bin/manager .)"
  if ! wait "${build_pid}"; then
    sed 's/^/    /' "${DEMO_DIR}/build.log" >&2
    exit 1
  fi
  ADMIN_KUBECONFIG=$(cluster env | sed -n 's/^export KUBECONFIG=//p')
  ADMIN_KUBECONFIG=$(eval "printf '%s' ${ADMIN_KUBECONFIG}") # undo printf %q
  [[ -f ${ADMIN_KUBECONFIG} ]] || die "no admin kubeconfig at ${ADMIN_KUBECONFIG}"

  step "Installing the CRDs and the operator's RBAC (config/default without the manager Deployment)"
  FAILED_STEP="installing the CRDs and RBAC"
  install

  step "Running the operator on this machine as ServiceAccount ${SA_NAMESPACE}/${SA_NAME}"
  FAILED_STEP="starting the manager"
  start_manager

  if [[ ${NODE_MODE} == real ]]; then
    up_real_node
  else
    up_fake_nodes
  fi

  end_step
  printf '==> %s\n' "Demo ready in $((SECONDS - start))s"
  cat <<EOF
    Look around as the cluster admin:
      $(cluster env)
      kubectl get addons -A
      kubectl describe coredns -n kube-system coredns
      kubectl get deploy,ds,svc,cm -n kube-system -l app.kubernetes.io/managed-by=kaddons
    Break CoreDNS and watch kaddons put it back:
      kubectl delete deployment -n kube-system coredns
      kubectl get coredns -n kube-system -w
    The operator's log: ${LOG_FILE}
    Stop everything: make demo-down
EOF
}

# up_real_node bootstraps the real node with kaddons and shows the add-ons serving.
up_real_node() {
  local env_file=${KADDONS_NODE_DIR:-${ROOT}/.local/node}/node.env
  [[ -f ${env_file} ]] || die "hack/node.sh up wrote no ${env_file}"
  # shellcheck disable=SC1090 # written by hack/node.sh up
  source "${env_file}"
  info "node ${KADDONS_NODE_NAME}: $(kc get node "${KADDONS_NODE_NAME}" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].reason}: {.status.conditions[?(@.type=="Ready")].message}')"

  step "Installing the pod network (KubeRouter) and kube-proxy: the node has no CNI yet"
  FAILED_STEP="installing KubeRouter and KubeProxy"
  kc apply -f - <<EOF | sed 's/^/    /'
apiVersion: addons.kaddons.dev/v1alpha1
kind: KubeRouter
metadata: {name: kube-router, namespace: kube-system}
spec:
  channel: stable
  apiServerEndpoint: ${KADDONS_NODE_API_SERVER_ENDPOINT}
  cniConfDir: ${KADDONS_NODE_CNI_CONF_DIR}
  cniBinDir: ${KADDONS_NODE_CNI_BIN_DIR}
---
apiVersion: addons.kaddons.dev/v1alpha1
kind: KubeProxy
metadata: {name: kube-proxy, namespace: kube-system}
spec:
  channel: stable
  apiServerEndpoint: ${KADDONS_NODE_API_SERVER_ENDPOINT}
  clusterCIDR: ${KADDONS_NODE_CLUSTER_CIDR}
EOF
  step "Waiting for the node to be Ready (timeout ${TIMEOUT}s)"
  FAILED_STEP="waiting for the node to be Ready"
  kc wait --for=condition=Ready --timeout="${TIMEOUT}s" "node/${KADDONS_NODE_NAME}" | sed 's/^/    /'
  kc wait --for=condition=Ready --timeout="${TIMEOUT}s" -n kube-system kuberouter/kube-router kubeproxy/kube-proxy | sed 's/^/    /'

  step "Installing CoreDNS and metrics-server (config/samples)"
  FAILED_STEP="installing CoreDNS and MetricsServer"
  kc apply -f "${ROOT}/config/samples/addons_v1alpha1_coredns.yaml" -f "${ROOT}/config/samples/addons_v1alpha1_metricsserver.yaml" | sed 's/^/    /'
  step "Waiting for CoreDNS and MetricsServer to be Ready: Pods serving, metrics.k8s.io available (timeout ${TIMEOUT}s)"
  FAILED_STEP="waiting for CoreDNS and MetricsServer to be Ready"
  kc wait --for=condition=Ready --timeout="${TIMEOUT}s" -n kube-system coredns/coredns metricsserver/metrics-server | sed 's/^/    /'

  step "A Pod resolves kubernetes.default.svc.cluster.local through the CoreDNS kaddons installed"
  FAILED_STEP="resolving a cluster name from a Pod"
  dns_probe

  step "kubectl top nodes, served by the metrics-server kaddons installed"
  FAILED_STEP="kubectl top nodes"
  top_nodes

  FAILED_STEP=""
  step "Add-ons"
  kc get addons -A
  step "Their workloads"
  kc get deploy,ds,svc -A -l app.kubernetes.io/managed-by=kaddons -o wide
}

# dns_probe runs a Pod (busybox's nslookup in the kube-router image, which the node has)
# that resolves the API server's Service name with the cluster DNS, and prints its answer.
dns_probe() {
  local pod=kaddons-demo-dns deadline phase
  kc delete pod -n default "${pod}" --ignore-not-found --wait=true >/dev/null
  kc run -n default "${pod}" --image=docker.io/cloudnativelabs/kube-router:v2.1.0 --image-pull-policy=Never \
    --restart=Never --command -- nslookup kubernetes.default.svc.cluster.local >/dev/null
  deadline=$((SECONDS + TIMEOUT))
  while phase=$(kc get pod -n default "${pod}" -o 'jsonpath={.status.phase}'); [[ ${phase} != Succeeded ]]; do
    [[ ${phase} != Failed ]] || { kc logs -n default "${pod}" | sed 's/^/    /' >&2; die "the DNS query failed"; }
    ((SECONDS < deadline)) || die "the DNS probe Pod did not finish within ${TIMEOUT}s (phase ${phase})"
    sleep 0.5
  done
  kc logs -n default "${pod}" | sed '/^$/d; s/^/    /'
  kc delete pod -n default "${pod}" --wait=false >/dev/null
}

# top_nodes prints `kubectl top nodes`, retrying until metrics-server has scraped the node
# (its first scrape comes one resolution, 15s, after it starts).
top_nodes() {
  local deadline=$((SECONDS + TIMEOUT)) out
  until out=$(kc top nodes 2>&1); do
    ((SECONDS < deadline)) || die "kubectl top nodes: ${out}"
    sleep 2
  done
  sed 's/^/    /' <<<"${out}"
}

# up_fake_nodes applies every sample on kwok's fake nodes.
up_fake_nodes() {
  step "Applying the samples (config/samples)"
  FAILED_STEP="applying the samples"
  kc apply -k "${ROOT}/config/samples" | sed 's/^/    /'

  step "Waiting for CoreDNS, NodeLocal DNSCache, the Dashboard, kube-proxy, kube-router and the Package to be Ready (timeout ${TIMEOUT}s)"
  FAILED_STEP="waiting for the add-ons to be Ready"
  kc wait --for=condition=Ready --timeout="${TIMEOUT}s" -n kube-system \
    coredns/coredns nodelocaldns/nodelocaldns dashboard/dashboard kubeproxy/kube-proxy kuberouter/kube-router package/dns | sed 's/^/    /'
  # Fake nodes run no Pods and the cluster publishes no endpoints, so the API server cannot
  # reach metrics-server: its Deployment becomes available, its APIService does not, and
  # the MetricsServer says so instead of turning Ready.
  step "Waiting for metrics-server's Deployment to be available (its API cannot be: see below)"
  FAILED_STEP="waiting for metrics-server's Deployment"
  kc wait --for=condition=Available --timeout="${TIMEOUT}s" -n kube-system deployment/metrics-server | sed 's/^/    /'
  kc wait --for=jsonpath='{.status.conditions[?(@.type=="Ready")].reason}'=ChildrenNotReady \
    --timeout="${TIMEOUT}s" -n kube-system metricsserver/metrics-server | sed 's/^/    /'
  FAILED_STEP=""

  step "Add-ons"
  kc get addons -A
  step "Their workloads"
  kc get deploy,ds,svc -A -l app.kubernetes.io/managed-by=kaddons
}

cmd_down() {
  lock
  step "Stopping the operator"
  stop_manager
  if [[ -f ${KADDONS_NODE_DIR:-${ROOT}/.local/node}/host-before.txt ]]; then
    step "Stopping the real node and undoing its changes to the host (hack/node.sh down)"
    node down
  fi
  step "Stopping the local cluster and deleting its state"
  cluster down --wipe
  rm -f "${SA_KUBECONFIG}" "${LOG_FILE}" "${LOG_FILE}.1" "${DEMO_DIR}/build.log"
  end_step
  printf '==> %s\n' "Demo stopped"
}

main() {
  case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    -h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
    *) die "usage: $0 up|down (see --help)" ;;
  esac
}

main "$@"
