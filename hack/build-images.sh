#!/usr/bin/env bash
# Builds rekey's container images as tarballs in _output/images, without a
# container daemon or registry access: each is a static binary (no cgo) on
# an empty base, packaged by hack/image. Load one with
#   docker load -i _output/images/rekey-apiserver.tar
#   ctr -n k8s.io images import _output/images/rekey-apiserver.tar
# The tag is v$(cat VERSION); the binaries are stamped with VERSION and the
# commit (hack/version-ldflags.sh); the same source gives the same image digest.
#
# Usage: hack/build-images.sh [rekey-apiserver] [rekey-agent] [pause]
# (default: rekey-apiserver and rekey-agent; pause is the end-to-end tests'
# sandbox image).
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TAG="v$(tr -d '[:space:]' < VERSION)"
OUT=${IMAGE_OUT:-$ROOT/_output/images}
BIN=$ROOT/_output/image-bin
mkdir -p "$OUT" "$BIN"

ldflags="-s -w $(hack/version-ldflags.sh)"
want=("$@")
if [[ ${#want[@]} -eq 0 ]]; then want=(rekey-apiserver rekey-agent); fi
for w in "${want[@]}"; do
	case "$w" in
	rekey-apiserver | rekey-agent)
		CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$BIN/$w" "./cmd/$w"
		;;
	pause)
		(cd hack/image && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$BIN/pause" ./pause)
		;;
	*) echo "unknown image $w" >&2; exit 2 ;;
	esac
	(cd hack/image && go run . -binary "$BIN/$w" -ref "rekey.io/$w:$TAG" -version "$TAG" -out "$OUT/$w.tar")
done
