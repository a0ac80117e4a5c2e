#!/usr/bin/env bash
# demo.sh shows kaddons at work on a real local cluster (hack/local-cluster.sh): it
# installs the CRDs and the operator's RBAC, runs the operator on this machine as its own
# ServiceAccount (no image can be built here, so the manager Deployment is left out),
# applies the samples and waits until every add-on is Ready.
#
# Usage:
#   hack/demo.sh up      build, start the cluster and the operator, apply the samples
#                        (run it again at any time: it reuses what runs, restarts what died)
#   hack/demo.sh down    stop the operator and the cluster, and delete their state
#
# State lives in .local/demo (the operator's kubeconfig, pid file and log) and in the
# cluster's folder (.local/cluster, or LOCAL_CLUSTER_DIR).
#
# Environment:
#   DEMO_TIMEOUT   seconds to wait for the operator and for each add-on (default 300)
#   The LOCAL_CLUSTER_* variables of hack/local-cluster.sh apply as well.
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
  lock
  trap on_exit EXIT
  trap 'exit 130' INT TERM

  step "Building the Kubernetes toolchain (cached after the first build)"
  FAILED_STEP="building the toolchain"
  "${ROOT}/hack/toolchain.sh" build 8>&-
  KUBECTL=$("${ROOT}/hack/toolchain.sh" dir)/kubectl

  # The build runs while the cluster starts: both take seconds to tens of seconds.
  step "Building the manager (bin/manager) in the background"
  go build -tags without_exec_applier,without_direct_applier -o "${MANAGER}" . >"${DEMO_DIR}/build.log" 2>&1 8>&- &
  local build_pid=$!

  step "Starting the local cluster"
  FAILED_STEP="starting the local cluster"
  cluster up

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

  step "Applying the samples (config/samples)"
  FAILED_STEP="applying the samples"
  kc apply -k "${ROOT}/config/samples" | sed 's/^/    /'

  step "Waiting for CoreDNS, NodeLocal DNSCache, the Dashboard, kube-proxy and kube-router to be Ready (timeout ${TIMEOUT}s)"
  FAILED_STEP="waiting for the add-ons to be Ready"
  kc wait --for=condition=Ready --timeout="${TIMEOUT}s" -n kube-system \
    coredns/coredns nodelocaldns/nodelocaldns dashboard/dashboard kubeproxy/kube-proxy kuberouter/kube-router | sed 's/^/    /'
  # This cluster has no pod network and publishes no endpoints, so the API server cannot
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

  end_step
  printf '==> %s\n' "Demo ready in $((SECONDS - start))s"
  cat <<EOF
    Look around as the cluster admin:
      $(cluster env)
      kubectl get addons -A
      kubectl describe coredns -n kube-system coredns
      kubectl get metricsserver -n kube-system metrics-server -o jsonpath='{.status.conditions}'
      kubectl get deploy,svc,cm -n kube-system -l app.kubernetes.io/managed-by=kaddons
    Pin another version and watch the rollout:
      kubectl patch coredns -n kube-system coredns --type=merge -p '{"spec":{"version":"1.11.3"}}'
      kubectl get coredns -n kube-system -w
    The operator's log: ${LOG_FILE}
    Stop everything: make demo-down
EOF
}

cmd_down() {
  lock
  step "Stopping the operator"
  stop_manager
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
