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

kube::codegen::gen_openapi \
	--output-dir "$OUT_ROOT/pkg/generated/openapi" \
	--output-pkg "$PKG/pkg/generated/openapi" \
	--report-filename "$OUT_ROOT/api/api-rules/violation_exceptions.list" \
	--update-report \
	--output-model-name-file zz_generated.model_name.go \
	--boilerplate "$BOILERPLATE" \
	"$OUT_ROOT/pkg/apis"

SCHEMA=$(mktemp)
trap 'rm -f "$SCHEMA"' EXIT
(cd "$OUT_ROOT" && go run ./pkg/generated/openapi/cmd/models-schema >"$SCHEMA")

kube::codegen::gen_client \
	--with-watch \
	--with-applyconfig \
	--applyconfig-openapi-schema "$SCHEMA" \
	--output-dir "$OUT_ROOT/pkg/generated" \
	--output-pkg "$PKG/pkg/generated" \
	--boilerplate "$BOILERPLATE" \
	"$OUT_ROOT/pkg/apis"
