# Pid files that name a process, not just a number: "PID START_TICKS BOOT_ID PID_NAMESPACE".
# A pid is recycled after its process ends (and a restarted container starts a new pid namespace
# with the same numbers), so a bare pid in a file can name anything by the time it is read;
# signalling it could kill an unrelated process. The start time (clock ticks since boot, field 22
# of /proc/PID/stat), the boot id and the pid namespace together tell the recorded process from
# whatever has its pid now (tidemark.liveness does the same for the streaming job).
# Sourced by scripts/s3.sh and scripts/kafka.sh.

# proc_start PID: the process's start time in clock ticks since boot; fails when there is none.
proc_start() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }  # fields after the command name, which may hold spaces and parentheses
  # shellcheck disable=SC2086
  set -- $stat
  echo "${20}"
}

_boot_id() { cat /proc/sys/kernel/random/boot_id; }
_pid_ns() { readlink "/proc/$$/ns/pid"; }

# pidfile_write FILE PID: record PID with its identity.
pidfile_write() {
  echo "$2 $(proc_start "$2") $(_boot_id) $(_pid_ns)" > "$1"
}

# pidfile_pid FILE: print the recorded pid if it is still the recorded process; else fail.
pidfile_pid() {
  local pid start boot ns
  [ -f "$1" ] || return 1
  read -r pid start boot ns < "$1" || true
  [ -n "$pid" ] && [ -n "$start" ] && [ -n "$boot" ] && [ -n "$ns" ] || return 1
  [ "$boot" = "$(_boot_id)" ] && [ "$ns" = "$(_pid_ns)" ] || return 1
  [ "$(proc_start "$pid")" = "$start" ] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

# pidfile_stop FILE NAME TRIES DELAY: TERM the recorded process, then KILL it if it is still the
# same process after TRIES x DELAY seconds; every signal goes only to a verified process.
pidfile_stop() {
  local pid
  pid=$(pidfile_pid "$1") || { rm -f "$1"; return 1; }
  kill "$pid"
  for _ in $(seq 1 "$3"); do pidfile_pid "$1" >/dev/null || break; sleep "$4"; done
  if pid=$(pidfile_pid "$1"); then kill -9 "$pid"; fi
  rm -f "$1"
}
