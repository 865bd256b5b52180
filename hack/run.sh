#!/usr/bin/env bash
# `make run`: starts _output/bin/rekey-apiserver --standalone in the
# background and returns once it is ready, so the next command can use it.
# Its log is DATA_DIR/rekey-apiserver.log, its pid DATA_DIR/rekey-apiserver.pid;
# `make stop` stops it. Extra flags come from ARGS (make run ARGS='-v=2').
# FOREGROUND=1 runs it in the foreground instead (Ctrl-C stops it).
set -o errexit -o nounset -o pipefail
DATA_DIR=${DATA_DIR:-.rekey}
PORT=${PORT:-8443}
BIN=${BIN:-_output/bin}
read -r -a extra <<<"${ARGS:-}"
cmd=("$BIN/rekey-apiserver" --standalone --data-dir "$DATA_DIR" --secure-port "$PORT" "${extra[@]}")
if [[ -n "${FOREGROUND:-}" ]]; then exec "${cmd[@]}"; fi

mkdir -p "$DATA_DIR"
chmod 0700 "$DATA_DIR"
pidfile=$DATA_DIR/rekey-apiserver.pid
log=$DATA_DIR/rekey-apiserver.log
# shellcheck source=hack/lib/pidfile.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/pidfile.sh"
# A stale pid file whose pid now belongs to another process is not a
# running server (rekey_running_pid checks the command line).
if running=$(rekey_running_pid "$DATA_DIR"); then
	echo "rekey-apiserver is already running (pid $running, $log); make stop first" >&2
	exit 1
fi
# The server rewrites the admin kubeconfig once it serves: a stale one
# from the last run must not pass for readiness.
rm -f "$DATA_DIR/admin.kubeconfig"
nohup "${cmd[@]}" >"$log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$pidfile"
# Ready once /readyz passes (anonymous requests may read it) and the
# admin kubeconfig, written after the server starts serving, is there.
for _ in $(seq 1 240); do
	if ! kill -0 "$pid" 2>/dev/null; then
		rm -f "$pidfile"
		echo "rekey-apiserver exited; the end of $log:" >&2
		tail -n 30 "$log" >&2
		exit 1
	fi
	# Without curl, the admin kubeconfig alone: the server writes it once
	# it serves.
	if [[ -f "$DATA_DIR/admin.kubeconfig" ]] && { ! command -v curl >/dev/null || curl -fsk --max-time 2 "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; }; then
		echo "rekey-apiserver is ready on https://127.0.0.1:$PORT (pid $pid, log $log; make stop stops it)"
		echo "  export KUBECONFIG=$(cd "$DATA_DIR" && pwd)/admin.kubeconfig"
		exit 0
	fi
	sleep 0.5
done
echo "rekey-apiserver (pid $pid) not ready after 120s; see $log" >&2
exit 1
