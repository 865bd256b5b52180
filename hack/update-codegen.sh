#!/usr/bin/env bash
# Regenerates deepcopy, conversion, defaulting, OpenAPI, clientset, listers,
# informers and apply configurations for every API group under pkg/apis.
# This is the only way generated code in the repository is produced.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT_ROOT=${CODEGEN_OUTPUT_ROOT:-$ROOT}
cd "$ROOT"
CODEGEN_PKG=$(go list -m -f '{{.Dir}}' k8s.io/code-generator)
# shellcheck disable=SC1091
source "$CODEGEN_PKG/kube_codegen.sh"

BOILERPLATE="$ROOT/hack/boilerplate.go.txt"
PKG=rekey.io/rekey

kube::codegen::gen_helpers --boilerplate "$BOILERPLATE" "$OUT_ROOT/pkg/apis"

# Protobuf (generated.proto, generated.pb.go and the protobuf struct tags in
# the versioned types): the server stores and serves rekey's objects as
# protobuf, like kube-apiserver does for its own, which decodes several times
# faster than JSON. go-to-protobuf needs protoc, and expects a GOPATH-like
# tree, so it runs over symlinks in a scratch directory.
if ! command -v protoc >/dev/null; then
	echo "hack/update-codegen.sh: protoc not found; install it (Debian: apt-get install protobuf-compiler)" >&2
	exit 1
fi
PROTO_BIN=${XDG_CACHE_HOME:-$HOME/.cache}/rekey/codegen-$(go list -m -f '{{.Version}}' k8s.io/code-generator)
if [[ ! -x "$PROTO_BIN/go-to-protobuf" || ! -x "$PROTO_BIN/protoc-gen-gogo" || ! -x "$PROTO_BIN/goimports" ]]; then
	mkdir -p "$PROTO_BIN"
	(cd "$CODEGEN_PKG" && go build -o "$PROTO_BIN/" ./cmd/go-to-protobuf ./cmd/go-to-protobuf/protoc-gen-gogo)
	XTOOLS_VERSION=$(cd "$CODEGEN_PKG" && go list -m -f '{{.Version}}' golang.org/x/tools)
	GOBIN="$PROTO_BIN" go install "golang.org/x/tools/cmd/goimports@$XTOOLS_VERSION"
fi
GOGO_DIR=$(cd "$CODEGEN_PKG" && go mod download -json github.com/gogo/protobuf | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
PROTO_TREE=$(mktemp -d)
SCHEMA=$(mktemp)
trap 'rm -rf "$PROTO_TREE" "$SCHEMA"' EXIT
mkdir -p "$PROTO_TREE/src/rekey.io" "$PROTO_TREE/include/k8s.io" "$PROTO_TREE/include/github.com/gogo"
ln -s "$OUT_ROOT" "$PROTO_TREE/src/rekey.io/rekey"
ln -s "$(go list -m -f '{{.Dir}}' k8s.io/apimachinery)" "$PROTO_TREE/include/k8s.io/apimachinery"
ln -s "$GOGO_DIR" "$PROTO_TREE/include/github.com/gogo/protobuf"
(cd "$OUT_ROOT" && PATH="$PROTO_BIN:$PATH" go-to-protobuf \
	--go-header-file "$BOILERPLATE" \
	--output-dir "$PROTO_TREE/src" \
	--proto-import "$PROTO_TREE/include" \
	--proto-import "$GOGO_DIR/protobuf" \
	--apimachinery-packages=-k8s.io/apimachinery/pkg/util/intstr,-k8s.io/apimachinery/pkg/api/resource,-k8s.io/apimachinery/pkg/runtime/schema,-k8s.io/apimachinery/pkg/runtime,-k8s.io/apimachinery/pkg/apis/meta/v1 \
	--packages="$PKG/pkg/apis/certificates/v1alpha1,$PKG/pkg/apis/rotation/v1alpha1,$PKG/pkg/apis/attestation/v1alpha1")

kube::codegen::gen_openapi \
	--output-dir "$OUT_ROOT/pkg/generated/openapi" \
	--output-pkg "$PKG/pkg/generated/openapi" \
	--report-filename "$OUT_ROOT/api/api-rules/violation_exceptions.list" \
	--update-report \
	--output-model-name-file zz_generated.model_name.go \
	--boilerplate "$BOILERPLATE" \
	"$OUT_ROOT/pkg/apis"

(cd "$OUT_ROOT" && go run ./pkg/generated/openapi/cmd/models-schema >"$SCHEMA")

kube::codegen::gen_client \
	--with-watch \
	--with-applyconfig \
	--prefers-protobuf \
	--applyconfig-openapi-schema "$SCHEMA" \
	--output-dir "$OUT_ROOT/pkg/generated" \
	--output-pkg "$PKG/pkg/generated" \
	--boilerplate "$BOILERPLATE" \
	"$OUT_ROOT/pkg/apis"
