#!/usr/bin/env bash
# `make stop`: stops the rekey-apiserver `make run` started (SIGTERM, then
# waits for it to exit).
set -o errexit -o nounset -o pipefail
DATA_DIR=${DATA_DIR:-.rekey}
pidfile=$DATA_DIR/rekey-apiserver.pid
if [[ ! -f "$pidfile" ]] || ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
	rm -f "$pidfile"
	echo "no rekey-apiserver started by make run in $DATA_DIR"
	exit 0
fi
pid=$(cat "$pidfile")
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
