#!/usr/bin/env bash
# Tidies go.mod and go.sum of the main and the tools module.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for mod in "$ROOT" "$ROOT/hack/tools"; do
	(cd "$mod" && go mod tidy)
done
