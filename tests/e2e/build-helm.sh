#!/usr/bin/env bash
# Builds the helm CLI (v3.22.0) from the Go module proxy, for checks that render or install kpe with the
# real helm rather than a stand-in: helm's own template engine, value merging and API-version checks.
# It builds the same sources and sets the same version variables as helm's own release build (its Makefile).
#
#   usage: tests/e2e/build-helm.sh
#
# The binary goes to $KPE_HELM_BIN/helm, or ~/.cache/kpe-helm/bin/helm when it is unset; nothing is written
# into the repository. The first build downloads a few hundred MB of modules into the Go module cache and
# compiles for several minutes; later runs reuse both caches.
set -euo pipefail

helm=v3.22.0
(( $# == 0 )) || { echo "usage: $0" >&2; exit 2; }
bin=${KPE_HELM_BIN:-$HOME/.cache/kpe-helm/bin}
command -v go >/dev/null || { echo "$0: needs the go command (Go >= 1.26 for helm $helm)" >&2; exit 1; }
mkdir -p "$bin"
bin=$(cd "$bin" && pwd)  # the build runs in a temporary folder, where a relative KPE_HELM_BIN would mean another place

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# helm.sh/helm/v3 builds as a dependency as published: its go.mod has no replace or exclude directives (which
# a dependency's go.mod could not apply), so a throwaway module that requires it selects exactly the module
# versions helm's own go.mod lists and builds the same sources. Stop if a release ever adds such directives.
gomod=$(go mod download -json "helm.sh/helm/v3@$helm" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
[[ -f $gomod ]] || { echo "$0: could not download helm.sh/helm/v3@$helm" >&2; exit 1; }
if grep -qE '^[[:space:]]*(replace|exclude)\b' "$gomod"; then
  echo "$0: $gomod has replace or exclude directives, which a build as a dependency would ignore" >&2; exit 1
fi

{
  echo "module kpe.invalid/helm-build"
  echo
  # The main module's go and godebug lines set the binary's default GODEBUG: keep upstream's (go 1.26.0 for
  # v3.22.0), so helm behaves as a release build does. A Go older than this go line stops here and names the
  # version it needs (GOTOOLCHAIN=goX.Y.Z then fetches that toolchain); Go 1.26.8 builds it without that.
  grep -E '^go [0-9.]+$' "$gomod"
  awk '/^godebug \($/ {block=1} block || /^godebug / {print} block && /^\)$/ {block=0}' "$gomod"
  echo
  echo "require helm.sh/helm/v3 $helm"
} >go.mod

# The -X values helm's Makefile sets for a tagged release: without them `helm version` prints v3.22 and the
# Kubernetes version helm templates against (.Capabilities.KubeVersion) and lints deprecations for stays at
# its v1.20 fallback. The Makefile takes that version from k8s.io/client-go's module version, major+1 (v0.37.0
# gives 1.37); `go list -m` reads it from this build's module graph. metadata is empty for a tag build.
# gitCommit is left at its empty default: the module proxy does not say which commit a release was tagged on.
clientgo=$(go list -mod=mod -m -f '{{.Version}}' k8s.io/client-go)
[[ $clientgo =~ ^v([0-9]+)\.([0-9]+)\. ]] || { echo "$0: unexpected k8s.io/client-go version '$clientgo'" >&2; exit 1; }
k8s_major=$(( BASH_REMATCH[1] + 1 )) k8s_minor=${BASH_REMATCH[2]}
ldflags="-w -s"
ldflags+=" -X helm.sh/helm/v3/internal/version.version=$helm"
ldflags+=" -X helm.sh/helm/v3/internal/version.metadata="
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=$k8s_major -X $pkg.k8sVersionMinor=$k8s_minor"
done

echo "building helm $helm ..." >&2
# -mod=mod lets the build fill go.sum (checked against the checksum database) for exactly the modules it uses.
# Built beside the target and renamed over it: a helm running from $bin keeps its old file.
CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$bin/.helm.new" helm.sh/helm/v3/cmd/helm
mv -f "$bin/.helm.new" "$bin/helm"

"$bin/helm" version
echo "helm $helm in $bin; to use it:"
echo "export KPE_HELM_BIN=$bin"
