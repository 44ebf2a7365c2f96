#!/usr/bin/env bash
# Builds the seven service binaries with their failpoints compiled in, for
# the robustness suite (e2e/robustness, docs/reliability.md): a copy of the
# source tree is made in a temporary folder, `gofail enable` turns each
# `// gofail: var <name> struct{}` comment of the copy into a failpoint, and
# the binaries are built from the copy into OUT. The working tree is never
# rewritten, and the normal build (make build) has no failpoint.
#
#   scripts/build-failpoints.sh OUT [PATCH...]
#
# Each PATCH (a `git apply` diff against the tree) is applied to the copy
# first: the suite's deliberately broken builds, which the checker must
# catch. GOFAIL names the gofail binary (default: gofail on PATH).
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 OUT [PATCH...]" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$1
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
gofail=${GOFAIL:-gofail}
gofail_version=v0.2.0

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ingestq-failpoints-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The Go sources and module files only: no binaries, runs or artifacts.
tar -C "$repo" --exclude=./bin --exclude=./run --exclude=./.git --exclude='*.test' -cf - \
  go.work.sum proto shared services | tar -C "$tmp" -xf -
# A workspace of the copied modules alone.
(cd "$tmp" && go work init ./proto ./shared ./services/*/)

for p in "$@"; do
  if ! git -C "$tmp" apply --unsafe-paths --directory=. "$(cd "$(dirname "$p")" && pwd)/$(basename "$p")" 2>"$tmp/apply.err"; then
    # git apply works outside a repository too; say which patch failed.
    echo "build-failpoints: $p does not apply to the tree:" >&2
    cat "$tmp/apply.err" >&2
    exit 1
  fi
done

# Every package with a failpoint comment, and the modules they belong to.
mapfile -t dirs < <(grep -rl --include='*.go' -e '// gofail: var ' "$tmp/shared" "$tmp/services" | xargs -n1 dirname | sort -u)
if [ ${#dirs[@]} -eq 0 ]; then
  echo "build-failpoints: no failpoint found in the tree" >&2
  exit 1
fi
# What is compiled in, one name a line, for the suite's coverage report.
grep -rho --include='*.go' -e '// gofail: var [A-Za-z0-9_]*' "${dirs[@]}" | awk '{print $4}' | sort -u >"$out/failpoints.txt"
"$gofail" enable "${dirs[@]}"
# gofail names the package of the bindings it writes after the folder:
# give them the package of the folder's own files (a command's is main).
for d in "${dirs[@]}"; do
  pkg=$(grep -h -m1 '^package ' $(ls "$d"/*.go | grep -v -e '_test.go$' -e '.fail.go$') | head -n1 | awk '{print $2}')
  for f in "$d"/*.fail.go; do
    sed -i "s/^package .*/package $pkg/" "$f"
  done
done
declare -A modules=()
for d in "${dirs[@]}"; do
  m=$d
  while [ ! -f "$m/go.mod" ]; do m=$(dirname "$m"); done
  modules[$m]=1
done
for m in "${!modules[@]}"; do
  (cd "$m" && go get "go.etcd.io/gofail@$gofail_version" >/dev/null)
done
for s in batcher estimator provisioner downloader processor recorder notifier; do
  (cd "$tmp/services/$s" && go build -o "$out/$s" .)
done
echo "build-failpoints: $(wc -l <"$out/failpoints.txt") failpoints in the binaries of $out"
