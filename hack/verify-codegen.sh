#!/usr/bin/env bash
# Fails when the committed generated code differs from what
# hack/update-codegen.sh produces now.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Copy the module (without .git and local state) and regenerate inside the copy.
tar -C "$ROOT" --exclude=.git --exclude=.rekey --exclude=_output -cf - . | tar -C "$TMP" -xf -
(cd "$TMP" && CODEGEN_OUTPUT_ROOT="$TMP" bash hack/update-codegen.sh >/dev/null)

status=0
for d in pkg/generated pkg/apis api; do
	if ! diff -Naupr "$ROOT/$d" "$TMP/$d" >"$TMP/diff.txt"; then
		echo "generated code in $d is stale; run hack/update-codegen.sh" >&2
		head -50 "$TMP/diff.txt" >&2
		status=1
	fi
done
exit $status
