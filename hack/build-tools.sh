#!/usr/bin/env bash
# Builds the real control-plane binaries (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kubelet, etcd) from the Go module proxy, using the tools module in hack/tools,
# and caches them outside the repository. Prints the directory that holds them.
#
# A cold build takes several minutes on 2 cores; a second run returns at once
# because each binary is keyed by the tools module's go.sum hash.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS="$ROOT/hack/tools"
KUBE_VERSION=v1.37.1
KEY=$(cat "$TOOLS/go.mod" "$TOOLS/go.sum" | sha256sum | cut -c1-12)
OUT="${REKEY_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rekey/tools-$KEY}"
mkdir -p "$OUT"

LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"

build() { # build NAME PACKAGE
	local name=$1 pkg=$2
	if [[ -x "$OUT/$name" ]]; then return; fi
	echo "building $name ($pkg) into $OUT" >&2
	# client-go's own version too: the kubelet's user agent carries it.
	(cd "$TOOLS" && go build -trimpath -ldflags "$LDFLAGS -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION" -o "$OUT/$name.tmp" "$pkg")
	mv "$OUT/$name.tmp" "$OUT/$name"
}

want=("$@")
if [[ ${#want[@]} -eq 0 ]]; then want=(etcd kube-apiserver kubectl kube-controller-manager); fi
for w in "${want[@]}"; do
	case "$w" in
	etcd) build etcd go.etcd.io/etcd/server/v3 ;;
	kube-apiserver) build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver ;;
	kube-controller-manager) build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager ;;
	kubectl) build kubectl k8s.io/kubernetes/cmd/kubectl ;;
	kubelet) build kubelet k8s.io/kubernetes/cmd/kubelet ;;
	kube-scheduler) build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler ;;
	*) echo "unknown tool $w" >&2; exit 2 ;;
	esac
done
echo "$OUT"
