#!/usr/bin/env bash
# Prints artifacts/deploy/40-apiservice.yaml with caBundle set to the given
# CA certificate file (PEM).
set -o errexit -o nounset -o pipefail
if [[ $# -ne 1 || ! -r $1 ]]; then
	echo "usage: $0 SERVING_CA_PEM_FILE" >&2
	exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
grep -q -- '-----BEGIN CERTIFICATE-----' "$1" || { echo "$1 is not a PEM certificate" >&2; exit 2; }
sed "s|caBundle: CA_BUNDLE|caBundle: $(base64 -w0 "$1")|" "$ROOT/artifacts/deploy/40-apiservice.yaml"
