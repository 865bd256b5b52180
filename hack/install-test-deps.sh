#!/usr/bin/env bash
# Installs what the integration and end-to-end tests need and a fresh machine
# lacks: Debian packages (as root, through apt-get) and the control-plane
# binaries built from the Go module proxy (hack/build-tools.sh, cached).
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

"$ROOT/hack/install-packages.sh"

# The tests need etcd, the control plane and the kubelet; kubectl only when the machine has
# none (tests prefer $KUBECTL, then the one on PATH).
tools=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)
if [[ -z "${KUBECTL:-}" ]] && ! command -v kubectl >/dev/null; then
	tools+=(kubectl)
fi
"$ROOT/hack/build-tools.sh" "${tools[@]}" >/dev/null
