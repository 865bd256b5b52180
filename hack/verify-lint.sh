#!/usr/bin/env bash
# golangci-lint (.golangci.yaml) over the whole module, then logcheck, the
# structured and contextual logging check Kubernetes runs, over rekey's own
# packages. hack/update-lint.sh applies the fixes golangci-lint can make.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$("$ROOT/hack/install-lint.sh")
cd "$ROOT"
"$BIN/golangci-lint" run --allow-parallel-runners ./...
packages=$(go list ./pkg/... ./cmd/... | grep -v /pkg/generated/)
# shellcheck disable=SC2086
"$BIN/logcheck" -check-contextual -config "$ROOT/hack/logcheck.conf" $packages
# The packages with files only the test build compiles (the rekeytest tag,
# pkg/crashpoint), linted again as that build sees them.
tagged=$(grep -rl --include='*.go' '^//go:build.*rekeytest' pkg cmd test | xargs -n1 dirname | sort -u | sed 's|^|./|')
# shellcheck disable=SC2086
"$BIN/golangci-lint" run --allow-parallel-runners --build-tags rekeytest $tagged
# shellcheck disable=SC2086
GOFLAGS="${GOFLAGS:+$GOFLAGS }-tags=rekeytest" "$BIN/logcheck" -check-contextual -config "$ROOT/hack/logcheck.conf" $tagged
