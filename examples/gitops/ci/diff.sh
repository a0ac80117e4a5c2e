#!/usr/bin/env bash
# Shows what applying a cluster overlay would change on its cluster, and writes nothing:
# run it in CI on every pull request, with a kubeconfig for that cluster.
#   ci/diff.sh clusters/production
# FIELD_MANAGER is the field manager of the tool that applies the repository:
# kustomize-controller for Flux (the default), argocd-controller for Argo CD with
# server-side apply. Flux takes fields over from other managers when it applies, so the dry
# run forces conflicts too: a field changed by hand shows as changed back.
set -euo pipefail
overlay=${1:?usage: ci/diff.sh OVERLAY}
rendered=$(mktemp)
trap 'rm -f "${rendered}"' EXIT

kubectl kustomize "${overlay}" > "${rendered}"
rc=0
kubectl diff --server-side --force-conflicts --field-manager="${FIELD_MANAGER:-kustomize-controller}" \
  -f "${rendered}" || rc=$?
# kubectl diff exits 1 when it found differences, and above 1 on errors.
if [ "${rc}" -gt 1 ]; then
  exit "${rc}"
fi
