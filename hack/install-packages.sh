#!/usr/bin/env bash
# Installs the Debian packages the tests and code generation need and a fresh
# machine lacks (as root, through apt-get): SoftHSM2, swtpm, tpm2-tools and
# openssl for the tests (opensc for pkcs11-tool, which lists a token's keys),
# containerd, runc and the CNI plugins for the real kubelet of the e2e tests,
# protoc for hack/update-codegen.sh. With arguments,
# only those packages (make verify needs protoc alone).
set -o errexit -o nounset -o pipefail

PACKAGES=(softhsm2 opensc swtpm swtpm-tools tpm2-tools openssl containerd runc containernetworking-plugins iptables protobuf-compiler)
if [[ $# -gt 0 ]]; then PACKAGES=("$@"); fi
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
