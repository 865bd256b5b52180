#!/usr/bin/env bash
# Fails when go.mod or go.sum (of the main, the tools or the image module) are not tidy.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for mod in "$ROOT" "$ROOT/hack/tools" "$ROOT/hack/image"; do
	(cd "$mod" && go mod tidy -diff) || { echo "go.mod/go.sum in $mod are not tidy; run go mod tidy there" >&2; exit 1; }
done
