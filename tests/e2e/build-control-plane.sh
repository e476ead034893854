#!/usr/bin/env bash
# Builds the real control plane that kpe's end-to-end tests (tests/e2e/) run against: kube-apiserver,
# kube-scheduler and kubectl compiled from the Go module proxy, plus etcd from Debian's etcd-server package.
# kubectl is the real client the tests read `kubectl get` output with (printer columns, status).
# docs/real-cluster.md explains what the tests need and how they find these binaries.
#
#   usage: tests/e2e/build-control-plane.sh VERSION [COMMAND...]   VERSION: 1.32 (v1.32.13) or 1.37 (v1.37.2)
#
# COMMANDs (kube-apiserver, kube-scheduler, kubectl; all three when none is named) pick what to build, so
# adding kubectl to an existing set does not rewrite the binaries running tests may be using.
#
# The binaries go to $KPE_K8S_BIN, or ~/.cache/kpe-k8s/VERSION/bin when it is unset; nothing is written into
# the repository. The first build downloads a few hundred MB of modules into the Go module cache and compiles
# for several minutes; later runs reuse both caches.
set -euo pipefail

version=${1:-}
case $version in
  1.32) k8s=v1.32.13 staging=v0.32.13 ;;
  1.37) k8s=v1.37.2 staging=v0.37.2 ;;
  *) echo "usage: $0 1.32|1.37 [kube-apiserver|kube-scheduler|kubectl ...]" >&2; exit 2 ;;
esac
shift
commands=("$@")
(( ${#commands[@]} > 0 )) || commands=(kube-apiserver kube-scheduler kubectl)
for cmd in "${commands[@]}"; do
  case $cmd in kube-apiserver|kube-scheduler|kubectl) ;; *) echo "$0: cannot build $cmd" >&2; exit 2 ;; esac
done
bin=${KPE_K8S_BIN:-$HOME/.cache/kpe-k8s/$version/bin}
command -v go >/dev/null || { echo "$0: needs the go command (Go >= 1.23 for 1.32, >= 1.26 for 1.37)" >&2; exit 1; }
mkdir -p "$bin"
bin=$(cd "$bin" && pwd)  # the build runs in a temporary folder, where a relative KPE_K8S_BIN would mean another place

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# k8s.io/kubernetes cannot be built as a dependency as published: its go.mod replaces every k8s.io/* staging
# module with ./staging/src/..., which a module zip does not resolve. A throwaway module that requires it and
# pins each of those staging modules to the matching published version (as out-of-tree schedulers do) builds
# the same sources. The list is read from that release's own go.mod, so a module added upstream is not missed.
gomod=$(go mod download -json "k8s.io/kubernetes@$k8s" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
[[ -f $gomod ]] || { echo "$0: could not download k8s.io/kubernetes@$k8s" >&2; exit 1; }
mapfile -t modules < <(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$gomod")
(( ${#modules[@]} > 0 )) || { echo "$0: no staging replace directives in $gomod" >&2; exit 1; }

{
  echo "module kpe.invalid/control-plane-build"
  echo
  # The main module's go and godebug lines set the binaries' default GODEBUG: keep upstream's, so the API
  # server behaves as a release build does. A Go older than this go line stops here and names the version
  # it needs (GOTOOLCHAIN=goX.Y.Z then fetches that toolchain); Go 1.26.8 builds both releases without it.
  grep -E '^go [0-9.]+$' "$gomod"
  awk '/^godebug \($/ {block=1} block || /^godebug / {print} block && /^\)$/ {block=0}' "$gomod"
  echo
  echo "require k8s.io/kubernetes $k8s"
  echo
  echo "replace ("
  for m in "${modules[@]}"; do echo "	$m => $m $staging"; done
  echo ")"
} >go.mod

# Without these -X values --version prints v0.0.0-master; the same variables are set in both packages by
# Kubernetes' own release build (hack/lib/version.sh). gitCommit is left empty rather than at its "$Format:%H$"
# placeholder: the module proxy does not say which commit a release was tagged on.
major=${k8s#v}; major=${major%%.*}
minor=${k8s#v*.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  ldflags+=" -X $pkg.gitCommit="
  ldflags+=" -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done

for cmd in "${commands[@]}"; do
  echo "building $cmd $k8s ..." >&2
  # -mod=mod lets the build fill go.sum (checked against the checksum database) for exactly the modules it uses.
  # Built beside the target and renamed over it: a control plane running from $bin keeps its old file.
  CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "$ldflags" -o "$bin/.$cmd.new" "k8s.io/kubernetes/cmd/$cmd"
  mv -f "$bin/.$cmd.new" "$bin/$cmd"
done

if ! command -v etcd >/dev/null; then
  sudo=""; [[ $(id -u) == 0 ]] || sudo=sudo
  $sudo apt-get update -qq && $sudo apt-get install -y -q etcd-server >/dev/null
fi
cmp -s "$(command -v etcd)" "$bin/etcd" || { cp "$(command -v etcd)" "$bin/.etcd.new" && mv -f "$bin/.etcd.new" "$bin/etcd"; }

for cmd in kube-apiserver kube-scheduler; do [[ -x $bin/$cmd ]] && "$bin/$cmd" --version; done
[[ -x $bin/kubectl ]] && "$bin/kubectl" version --client | head -1
"$bin/etcd" --version | head -1
echo "control plane binaries for Kubernetes $k8s in $bin; to run the end-to-end tests with them:"
echo "export KPE_K8S_BIN=$bin"
