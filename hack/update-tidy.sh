#!/usr/bin/env bash
# Tidies go.mod and go.sum of the main, the tools and the image module.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for mod in "$ROOT" "$ROOT/hack/tools" "$ROOT/hack/image"; do
	(cd "$mod" && go mod tidy)
done
