#!/usr/bin/env bash
# vulndb.sh builds the offline Go vulnerability database that `make vuln` hands to
# govulncheck (-db file://DIR). Nothing is fetched from vuln.go.dev: the records come from
# the golang.org/x/vulndb module at a pinned version, as the Go module proxy serves it. Its
# data/osv folder holds one OSV record per vulnerability, and its cmd/indexdb (built by the
# Makefile) writes the index and entries that govulncheck reads.
#
# The OSV records in that module carry no dates (the live database takes them from the
# repository's history), so the database's modified time is set to the commit time of the
# module version. `make vuln` prints it as the database date.
#
# The result is written atomically to DIR, which the Makefile keeps in a cache outside the
# work tree (~/.cache/kaddons/vulndb/<version>), so CI builds it once per version.
#
# Usage:
#   hack/vulndb.sh INDEXDB VERSION DIR   build the database for golang.org/x/vulndb@VERSION into DIR
set -euo pipefail
# The Go toolchain is pinned, as in the Makefile and go.mod.
export GOTOOLCHAIN=go1.27.3

log() { printf '[vulndb] %s\n' "$*" >&2; }
die() { printf '[vulndb] error: %s\n' "$*" >&2; exit 1; }

[[ $# -eq 3 ]] || die "usage: $0 INDEXDB VERSION DIR"
INDEXDB=$1 VERSION=$2 DIR=$3
[[ -x "${INDEXDB}" ]] || die "${INDEXDB} is not executable (make indexdb builds it)"

if [[ -f "${DIR}/index/db.json" ]]; then
  log "golang.org/x/vulndb@${VERSION}: using the database in ${DIR}"
  exit 0
fi

# Outside any module, so that the download neither reads nor touches kaddons' go.mod.
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
# On failure the JSON carries the Error, which is reported below.
info=$(cd "${work}" && go mod download -json "golang.org/x/vulndb@${VERSION}") || true
field() { sed -n "s/^[[:space:]]*\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p" <<<"${info}" | head -1; }
[[ -z "$(field Error)" ]] || die "downloading golang.org/x/vulndb@${VERSION}: $(field Error)"
src=$(field Dir)
# The .info file the proxy serves holds the version's commit time.
modified=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$(field Info)")
[[ -d "${src}/data/osv" ]] || die "golang.org/x/vulndb@${VERSION} has no data/osv folder"
[[ -n "${modified}" ]] || die "the module proxy gave no time for golang.org/x/vulndb@${VERSION}"

log "building the database from ${src}/data/osv ($(find "${src}/data/osv" -name '*.json' | wc -l) records)"
mkdir -p "$(dirname "${DIR}")"
tmp="${DIR}.tmp"
rm -rf "${tmp}"
"${INDEXDB}" -vulns "${src}/data/osv" -out "${tmp}"
printf '{"modified":"%s"}' "${modified}" >"${tmp}/index/db.json"
gzip -n -c "${tmp}/index/db.json" >"${tmp}/index/db.json.gz"
rm -rf "${DIR}"
mv "${tmp}" "${DIR}"
log "golang.org/x/vulndb@${VERSION} (modified ${modified}) is in ${DIR}"
