#!/usr/bin/env bash
# `make stop`: stops the rekey-apiserver `make run` started (SIGTERM, then
# waits for it to exit).
set -o errexit -o nounset -o pipefail
DATA_DIR=${DATA_DIR:-.rekey}
pidfile=$DATA_DIR/rekey-apiserver.pid
# shellcheck source=hack/lib/pidfile.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/pidfile.sh"
# Only a process that is this data dir's rekey-apiserver is signalled: a
# stale pid file can name a pid since given to another process.
if ! pid=$(rekey_running_pid "$DATA_DIR"); then
	rm -f "$pidfile"
	echo "no rekey-apiserver started by make run in $DATA_DIR"
	exit 0
fi
kill -TERM "$pid"
for _ in $(seq 1 120); do
	if ! kill -0 "$pid" 2>/dev/null; then
		rm -f "$pidfile"
		echo "rekey-apiserver (pid $pid) stopped"
		exit 0
	fi
	sleep 0.5
done
echo "rekey-apiserver (pid $pid) still running 60s after SIGTERM" >&2
exit 1
