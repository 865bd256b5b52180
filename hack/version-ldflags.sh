#!/usr/bin/env bash
# Prints the -X flags that stamp rekey's binaries with the release in
# VERSION and the git commit (package rekey.io/rekey/pkg/version), for
# `go build -ldflags`. The date is the commit's, not the build's, so the
# same source still gives the same binary. Outside a git checkout only the
# release is stamped and the commit reads "unknown".
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
pkg=rekey.io/rekey/pkg/version
flags="-X $pkg.version=$(tr -d '[:space:]' < VERSION)"
if commit=$(git rev-parse HEAD 2>/dev/null); then
	state=clean
	if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then state=dirty; fi
	date=$(TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
	flags+=" -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=$state -X $pkg.buildDate=$date"
fi
echo "$flags"
