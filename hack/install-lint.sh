#!/usr/bin/env bash
# Installs the pinned linters (golangci-lint, and Kubernetes' structured
# logging check, logcheck) from the Go module proxy into a cache outside the
# repository, and prints that directory. A second run returns at once.
set -o errexit -o nounset -o pipefail

GOLANGCI_LINT_VERSION=v2.15.0
LOGCHECK_VERSION=v0.10.1
OUT="${XDG_CACHE_HOME:-$HOME/.cache}/rekey/lint-golangci-${GOLANGCI_LINT_VERSION}-logcheck-${LOGCHECK_VERSION}"
mkdir -p "$OUT"
install() { # install NAME PACKAGE@VERSION
	if [[ -x "$OUT/$1" ]]; then return; fi
	echo "installing $2 into $OUT" >&2
	(cd "$OUT" && GOFLAGS= GOBIN="$OUT" go install "$2")
}
install golangci-lint "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION"
install logcheck "sigs.k8s.io/logtools/logcheck@$LOGCHECK_VERSION"
echo "$OUT"
