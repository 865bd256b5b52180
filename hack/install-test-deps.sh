#!/usr/bin/env bash
# Installs what the integration and end-to-end tests need and a fresh machine
# lacks: Debian packages (as root, through apt-get) and the control-plane
# binaries built from the Go module proxy (hack/build-tools.sh, cached).
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

PACKAGES=(softhsm2 swtpm swtpm-tools tpm2-tools openssl)
missing=()
for p in "${PACKAGES[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		echo "installing ${missing[*]}" >&2
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	else
		echo "warning: missing packages ${missing[*]} and cannot apt-get install them; tests that need them will fail" >&2
	fi
fi

# The tests need etcd and kube-apiserver; kubectl only when the machine has
# none (tests prefer $KUBECTL, then the one on PATH).
tools=(etcd kube-apiserver)
if [[ -z "${KUBECTL:-}" ]] && ! command -v kubectl >/dev/null; then
	tools+=(kubectl)
fi
"$ROOT/hack/build-tools.sh" "${tools[@]}" >/dev/null
