# Sourced by hack/run.sh and hack/stop.sh.

# rekey_running_pid DATA_DIR prints the pid in DATA_DIR/rekey-apiserver.pid
# and succeeds only when that process is the rekey-apiserver `make run`
# started for DATA_DIR: its command line names rekey-apiserver and
# `--data-dir DATA_DIR`. kill -0 alone is not enough: after the server
# died (a crash, a reboot) the kernel can give its pid to an unrelated
# process, which make stop would then SIGTERM.
rekey_running_pid() {
	local data_dir=$1 pidfile=$1/rekey-apiserver.pid pid args=()
	[[ -f "$pidfile" ]] || return 1
	pid=$(<"$pidfile")
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	if [[ -r /proc/$pid/cmdline ]]; then
		mapfile -d '' -t args <"/proc/$pid/cmdline" || return 1
	elif [[ ! -d /proc ]] && command -v ps >/dev/null; then
		# No /proc (macOS): ps joins the arguments with spaces.
		read -r -a args <<<"$(ps -p "$pid" -o args= 2>/dev/null)" || return 1
	else
		return 1
	fi
	local i is_server=false has_dir=false
	for ((i = 0; i < ${#args[@]}; i++)); do
		[[ "${args[i]}" == rekey-apiserver || "${args[i]}" == */rekey-apiserver ]] && is_server=true
		[[ "${args[i]}" == --data-dir && "${args[i + 1]:-}" == "$data_dir" ]] && has_dir=true
		[[ "${args[i]}" == "--data-dir=$data_dir" ]] && has_dir=true
	done
	$is_server && $has_dir || return 1
	echo "$pid"
}
