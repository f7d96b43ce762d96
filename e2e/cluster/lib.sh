# Shared by e2e/cluster/up and e2e/cluster/down (sourced, not executed).
# shellcheck shell=bash

stagehand_log() { printf '%s: %s\n' "${STAGEHAND_PROG:-cluster}" "$*" >&2; }

# The state directory of the cluster: certificates, kubeconfig, logs, pids.
stagehand_state_dir() {
  local d="${STAGEHAND_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/stagehand/cluster}"
  case "$d" in /*) ;; *) d="$PWD/$d" ;; esac
  printf '%s\n' "${d%/}"
}

# The lock file that serializes up/down on one state dir. It lives in the
# cache, not next to the state dir, so that nothing is left beside a
# STAGEHAND_CLUSTER_DIR=$(mktemp -d).
stagehand_lock_file() {
  local locks="${XDG_CACHE_HOME:-$HOME/.cache}/stagehand/locks"
  mkdir -p "$locks"
  printf '%s/%s.lock\n' "$locks" "$(printf '%s' "$1" | sha256sum | cut -c1-16)"
}

# Field 22 of /proc/PID/stat (start time in clock ticks since boot), which
# together with the PID identifies one process: a recycled PID gets a new one.
# Fails for a process that is gone or a zombie.
stagehand_proc_start() {
  local stat rest
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  rest="${stat##*) }"            # drop "pid (comm) ", comm may hold spaces
  # shellcheck disable=SC2086
  set -- $rest                   # $1 = state (field 3), $20 = starttime (field 22)
  [ "$1" != Z ] && [ "$1" != X ] || return 1
  printf '%s\n' "${20}"
}

# stagehand_alive PID STARTTIME: is that very process still running?
stagehand_alive() {
  local now
  now="$(stagehand_proc_start "$1")" || return 1
  [ "$now" = "$2" ]
}

# stagehand_stop_recorded DIR: stops the processes listed in DIR/pids
# ("name pid starttime" per line, in start order) in reverse order: SIGTERM,
# then SIGKILL after STAGEHAND_STOP_TIMEOUT seconds (default 15). A PID whose
# start time no longer matches is left alone (it is somebody else's now).
stagehand_stop_recorded() {
  local dir="$1" timeout="${STAGEHAND_STOP_TIMEOUT:-15}" lines name pid start i deadline
  [ -f "$dir/pids" ] || return 0
  mapfile -t lines < "$dir/pids"
  for ((i = ${#lines[@]} - 1; i >= 0; i--)); do
    read -r name pid start <<<"${lines[i]}"
    if [ -z "${pid:-}" ] || [ -z "${start:-}" ]; then continue; fi
    stagehand_alive "$pid" "$start" || continue
    stagehand_log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || continue
    deadline=$((SECONDS + timeout))
    while stagehand_alive "$pid" "$start" && [ "$SECONDS" -lt "$deadline" ]; do
      sleep 0.1
    done
    if stagehand_alive "$pid" "$start"; then
      stagehand_log "$name (pid $pid) still running after ${timeout}s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      deadline=$((SECONDS + 5))
      while stagehand_alive "$pid" "$start" && [ "$SECONDS" -lt "$deadline" ]; do
        sleep 0.1
      done
    fi
  done
}

# stagehand_remove_state DIR: removes etcd's data dir (may live on /dev/shm)
# and DIR itself, but only an empty directory or one that `up` set up (marker
# file), never anything else that STAGEHAND_CLUSTER_DIR happens to point at.
stagehand_remove_state() {
  local dir="$1" etcd_data
  [ -e "$dir" ] || return 0
  if [ -d "$dir" ] && [ -z "$(ls -A "$dir")" ]; then
    rmdir -- "$dir"              # e.g. a fresh STAGEHAND_CLUSTER_DIR=$(mktemp -d)
    return 0
  fi
  if [ ! -f "$dir/.stagehand-cluster" ]; then
    stagehand_log "refusing to remove $dir: no .stagehand-cluster marker (not made by e2e/cluster/up)"
    return 1
  fi
  if [ -f "$dir/etcd-data-dir" ]; then
    etcd_data="$(cat "$dir/etcd-data-dir")"
    case "$etcd_data" in
      */stagehand-etcd.*|"$dir"/*) rm -rf -- "$etcd_data" ;;
    esac
  fi
  rm -rf -- "$dir"
}
