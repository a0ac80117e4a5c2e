#!/usr/bin/env bash
# kubeadm-manifests.sh writes the CoreDNS objects that kubeadm creates, as test data under
# test/testdata/kubeadm/, from the kubeadm that hack/toolchain.sh builds out of the same
# k8s.io/kubernetes module as the other pinned components (it builds it when missing).
# kubeadm only prints them: no cluster, kubeconfig or network is involved.
#
#   coredns.yaml                 kubeadm's output, unchanged
#   coredns-custom.yaml          the same objects; the Corefile as an admin edits it: a hosts
#                                block in the .:53 server and a stub-domain server block
#   coredns-removed-plugin.yaml  coredns-custom.yaml, but the stub-domain server uses proxy,
#                                a plugin no CoreDNS version kaddons ships has any more
#
# Usage:
#   hack/kubeadm-manifests.sh          regenerate the files
#   hack/kubeadm-manifests.sh --check  fail if the checked-in files differ from a fresh render
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${ROOT}/test/testdata/kubeadm

die() { printf '[kubeadm-manifests] error: %s\n' "$*" >&2; exit 1; }

check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) die "unknown argument $1 (usage: $0 [--check])" ;;
esac

"${ROOT}/hack/toolchain.sh" build kubeadm
KUBEADM=$("${ROOT}/hack/toolchain.sh" dir)/kubeadm
kubeadm_version=$("${KUBEADM}" version -o short)
# Flags of a default kubeadm cluster of the pinned version, spelled out so that a change of
# kubeadm's defaults does not change the test data silently. The DNS IP is 10.96.0.10.
FLAGS=(--kubernetes-version "${kubeadm_version}" --service-cidr 10.96.0.0/12 --service-dns-domain cluster.local)

tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT

# The environment is emptied so that no kubeconfig or proxy setting can reach kubeadm.
env -i PATH=/usr/bin:/bin HOME="${tmp}" \
  "${KUBEADM}" init phase addon coredns --print-manifest "${FLAGS[@]}" > "${tmp}/kubeadm.yaml"

# edit_corefile applies the admin's edits to the Corefile in kubeadm's ConfigMap: the hosts
# block goes at the end of the first server block (.:53), the stub-domain server (forward
# or proxy, $1) after it. Plugins sit at 8 columns in the ConfigMap and the server block
# closes at 4, as kubeadm writes them; anything else fails rather than guessing.
edit_corefile() {
  awk -v stub="$1" '
    /^  Corefile: \|$/ { in_corefile = 1 }
    in_corefile && /^    \.:53 \{$/ { in_server = 1 }
    in_server && /^    }$/ {
      print "        hosts {"
      print "           10.0.0.1 example.internal"
      print "           fallthrough"
      print "        }"
      print "    }"
      print "    example.internal:53 {"
      print "        " stub " . 10.0.0.53"
      print "    }"
      in_server = 0; in_corefile = 0; edits++
      next
    }
    { print }
    END { if (edits != 1) { print "no .:53 server block in the Corefile" > "/dev/stderr"; exit 1 } }
  '
}

header() {
  printf '# %s\n' "$@"
  printf '# Regenerate with hack/kubeadm-manifests.sh (make kubeadm-manifests); do not edit.\n'
}

command="kubeadm init phase addon coredns --print-manifest ${FLAGS[*]}"
{
  header "The CoreDNS objects kubeadm ${kubeadm_version} creates, printed by" \
    "  ${command}" \
    "(kubeadm built by hack/toolchain.sh from k8s.io/kubernetes ${kubeadm_version}; no cluster)."
  cat "${tmp}/kubeadm.yaml"
} > "${tmp}/coredns.yaml"

{
  header "coredns.yaml (kubeadm ${kubeadm_version}: ${command})" \
    "with the Corefile edited as a cluster admin would: a hosts block" \
    "(10.0.0.1 example.internal; fallthrough) in the .:53 server and an extra server block" \
    "example.internal:53 { forward . 10.0.0.53 }. Everything else is kubeadm's output."
  edit_corefile forward < "${tmp}/kubeadm.yaml"
} > "${tmp}/coredns-custom.yaml"

{
  header "coredns-custom.yaml (kubeadm ${kubeadm_version}: ${command})," \
    "but the example.internal:53 server uses the proxy plugin (proxy . 10.0.0.53), as" \
    "stub-domain servers did before CoreDNS 1.5.0 removed it. In the data of" \
    "github.com/coredns/corefile-migration v1.0.36 (migration/versions.go) no plugin is" \
    "removed or deprecated between 1.11.3 and 1.15.0, which covers every version under" \
    "channels/packages/coredns/ and kubeadm's; proxy is the one plugin it marks removed" \
    "(at 1.5.0, replaced by forward), so no CoreDNS version kaddons ships has it."
  edit_corefile proxy < "${tmp}/kubeadm.yaml"
} > "${tmp}/coredns-removed-plugin.yaml"

files=(coredns.yaml coredns-custom.yaml coredns-removed-plugin.yaml)
if ${check}; then
  status=0
  for f in "${files[@]}"; do
    diff -u "${OUT}/${f}" "${tmp}/${f}" || status=1
  done
  [[ ${status} -eq 0 ]] || die "test/testdata/kubeadm is stale: run make kubeadm-manifests"
  echo "test/testdata/kubeadm matches kubeadm ${kubeadm_version}"
  exit 0
fi
mkdir -p "${OUT}"
for f in "${files[@]}"; do
  cp "${tmp}/${f}" "${OUT}/${f}"
done
echo "wrote ${files[*]} to test/testdata/kubeadm (kubeadm ${kubeadm_version})"
