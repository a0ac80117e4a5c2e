#!/usr/bin/env bash
# Shows what merging a pull request would change on a cluster, and writes nothing: run it
# in CI on every pull request, with a kubeconfig for that cluster and the kaddons kubectl
# plugin (kubectl-kaddons) on the PATH.
#   ci/diff.sh clusters/production
# It prints two diffs, each by server-side dry run:
#   1. the add-on resources, as the GitOps tool will apply them (kubectl diff).
#      FIELD_MANAGER is that tool's field manager: kustomize-controller for Flux (the
#      default), argocd-controller for Argo CD with server-side apply. Flux takes fields
#      over from other managers when it applies, so the dry run forces conflicts too.
#   2. what kaddons will then apply for them: the Deployments, ConfigMaps, RBAC... it
#      renders from the new specs, and what it will prune (kubectl kaddons diff).
set -euo pipefail
overlay=${1:?usage: ci/diff.sh OVERLAY}
rendered=$(mktemp)
trap 'rm -f "${rendered}"' EXIT

kubectl kustomize "${overlay}" > "${rendered}"
# Both diffs exit 1 when they found differences, and above 1 on errors.
rc=0
kubectl diff --server-side --force-conflicts --field-manager="${FIELD_MANAGER:-kustomize-controller}" \
  -f "${rendered}" || rc=$?
if [ "${rc}" -gt 1 ]; then
  exit "${rc}"
fi
rc=0
kubectl kaddons diff -f "${rendered}" || rc=$?
if [ "${rc}" -gt 1 ]; then
  exit "${rc}"
fi
