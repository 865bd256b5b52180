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
