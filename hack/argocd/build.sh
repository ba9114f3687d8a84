#!/usr/bin/env bash
# Builds Argo CD (one binary: it acts as argocd-application-controller,
# argocd-repo-server, argocd-applicationset-controller and the others by the
# name it is invoked as) from the module proxy once per version into a
# per-user cache, beside its CRDs and install.yaml, and the Helm CLI its
# repo-server runs; then copies them to the bin directory. make bench-peers
# calls it (local/peers runs Argo CD beside Petri).
#
#   hack/argocd/build.sh VERSION GO_TOOLCHAIN HELM_VERSION CACHE_ROOT BIN
#
# Argo CD's go.mod needs a newer Go than Petri's: GOTOOLCHAIN selects it for
# this build only. Its module replaces the gitops-engine module by its nested
# directory, which a module download leaves out: the gitops-engine module of
# the same version takes its place.
set -euo pipefail

version=$1 toolchain=$2 helm_version=$3 cache_root=$4 bin=$5
cache="$cache_root/argocd/$version"
helm_cache="$cache_root/helm/$helm_version"
mkdir -p "$cache" "$helm_cache" "$bin"

moddir() {
  GOTOOLCHAIN=$toolchain GOFLAGS=-mod=mod go mod download -json "$1" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p'
}

if [ ! -x "$cache/argocd" ] || [ ! -f "$cache/manifests/install.yaml" ]; then
  echo "building argocd $version (once per version; about 12 minutes on 2 cores)"
  src=$(moddir "github.com/argoproj/argo-cd/v3@$version")
  engine=$(moddir "github.com/argoproj/argo-cd/gitops-engine/v3@$version")
  [ -n "$src" ] && [ -n "$engine" ] || { echo "go mod download of argo-cd $version failed" >&2; exit 1; }
  rm -rf "$cache/src"
  cp -r "$src" "$cache/src"
  chmod -R u+w "$cache/src"
  rm -rf "$cache/src/gitops-engine"
  cp -r "$engine" "$cache/src/gitops-engine"
  chmod -R u+w "$cache/src/gitops-engine"
  (cd "$cache/src" && GOTOOLCHAIN=$toolchain GOFLAGS=-mod=mod go build \
    -ldflags "-X github.com/argoproj/argo-cd/v3/common.version=${version#v} -X github.com/argoproj/argo-cd/v3/common.gitTreeState=clean" \
    -o "$cache/argocd.tmp" ./cmd)
  rm -rf "$cache/manifests"
  mkdir -p "$cache/manifests"
  cp -r "$cache/src/manifests/crds" "$cache/manifests/crds"
  cp "$cache/src/manifests/install.yaml" "$cache/manifests/install.yaml"
  mv "$cache/argocd.tmp" "$cache/argocd"
  rm -rf "$cache/src"
fi

if [ ! -x "$helm_cache/helm" ]; then
  echo "building helm $helm_version (once per version)"
  GOBIN="$helm_cache/.gobin" go install "helm.sh/helm/v3/cmd/helm@$helm_version"
  mv "$helm_cache/.gobin/helm" "$helm_cache/helm"
  rm -rf "$helm_cache/.gobin"
fi

cp -f "$cache/argocd" "$bin/argocd"
rm -rf "$bin/argocd-manifests"
cp -r "$cache/manifests" "$bin/argocd-manifests"
cp -f "$helm_cache/helm" "$bin/helm"
# The names Argo CD's components are run by.
for name in argocd-application-controller argocd-repo-server argocd-applicationset-controller; do
  ln -sf argocd "$bin/$name"
done
