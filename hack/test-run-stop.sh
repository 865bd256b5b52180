#!/usr/bin/env bash
# Tests hack/stop.sh and hack/run.sh's already-running check against a
# stale pid file: a pid the kernel has given to an unrelated process must
# not be signalled (stop) nor taken for the server (run); one whose
# command line is rekey-apiserver with this data dir is. Run:
# hack/test-run-stop.sh (no server, no build needed).
set -o errexit -o nounset -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
data=$tmp/data
mkdir -p "$data" "$tmp/bin"

# An unrelated process holding the pid the file names.
sleep 300 &
other=$!
pids+=("$other")
echo "$other" >"$data/rekey-apiserver.pid"
DATA_DIR=$data "$here/stop.sh" >/dev/null
kill -0 "$other" 2>/dev/null || fail "stop.sh signalled an unrelated process (pid $other) named in a stale pid file"
[[ ! -f "$data/rekey-apiserver.pid" ]] || fail "stop.sh left the stale pid file"

# run.sh must not refuse to start because of it: with a binary that
# exits at once, it gets past the check and reports the exit.
echo "$other" >"$data/rekey-apiserver.pid"
printf '#!/bin/sh\nexit 3\n' >"$tmp/bin/rekey-apiserver"
chmod +x "$tmp/bin/rekey-apiserver"
out=$(DATA_DIR=$data BIN=$tmp/bin PORT=1 "$here/run.sh" 2>&1) && fail "run.sh with a binary that exits: succeeded: $out"
[[ "$out" != *"already running"* ]] || fail "run.sh took an unrelated process for the server: $out"

# A process that is rekey-apiserver for this data dir is stopped.
printf '#!/usr/bin/env bash\nwhile :; do sleep 0.1; done\n' >"$tmp/bin/rekey-apiserver"
"$tmp/bin/rekey-apiserver" --standalone --data-dir "$data" --secure-port 1 &
server=$!
pids+=("$server")
echo "$server" >"$data/rekey-apiserver.pid"
out=$(DATA_DIR=$data BIN=$tmp/bin PORT=1 "$here/run.sh" 2>&1) && fail "run.sh started a second server: $out"
[[ "$out" == *"already running"* ]] || fail "run.sh did not see the running server: $out"
DATA_DIR=$data "$here/stop.sh" >/dev/null
wait "$server" 2>/dev/null || true
kill -0 "$server" 2>/dev/null && fail "stop.sh did not stop the server (pid $server)"
echo "ok"
