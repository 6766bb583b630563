# shellcheck shell=bash
# Sourced by scripts/real-cluster.sh, scripts/lib/real-node.sh and scripts/playground.sh: the
# processes of a cluster directory <DIR>, each a named component with its output in
# <DIR>/logs/<name>.log, its pid in <DIR>/pids/<name>.pid and its command line (NUL-separated)
# in <DIR>/cmds/<name>.
#
#   start_component <dir> <name> <command...>   starts it in the background
#   component_pid <dir> <name>                  its pid, if it is still the process started
#   wait_for <dir> <what> <seconds> <name> <command...>
#                                               waits for the command to succeed, at most
#                                               <seconds>; dies naming <what> and showing the
#                                               end of the component's log when it exits or
#                                               the time is up
#   stop_component <dir> <name>                 SIGTERM, SIGKILL after 15 s, then waits at most
#                                               component_kill_grace seconds more and warns if
#                                               it is still there
#   kill_component <dir> <name>                 SIGKILL, waiting as stop_component does
#   kill_and_wait <pid> <name>                  SIGKILL to any process, waiting the same way
#
# Globals it sets: component_kill_grace (10 s). It reads none of its own (common.sh's say, die
# and pid helpers).

[[ -n "${swarm_lib_components:-}" ]] && return 0
swarm_lib_components=1
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# How long a process may take to go after SIGKILL: one stuck in the kernel (state D) or a
# zombie whose parent does not reap it must not hang `down`.
component_kill_grace=10

# Starts `command...` in the background as component `name`; its command line is kept so
# `restart` starts it again exactly as `up` did.
start_component() {
    local dir="$1" name="$2"
    shift 2
    mkdir -p "${dir}/cmds" "${dir}/logs" "${dir}/pids"
    printf '%s\0' "$@" >"${dir}/cmds/${name}"
    "$@" >>"${dir}/logs/${name}.log" 2>&1 </dev/null &
    echo "$!" >"${dir}/pids/${name}.pid"
}

# The pid of component `name` of the cluster in `dir`, if it is the process `up` started (its
# command line names this directory's files).
component_pid() {
    local dir="$1" name="$2" pid
    [[ -f "${dir}/pids/${name}.pid" ]] || return 1
    pid="$(cat "${dir}/pids/${name}.pid")"
    [[ -r "/proc/${pid}/cmdline" ]] && tr '\0' ' ' <"/proc/${pid}/cmdline" | grep -qF "${dir}" || return 1
    echo "${pid}"
}

# Waits up to `seconds` for `command...` to succeed; on timeout, or when the component exits
# first, names `what` and shows the end of the component's log. Each try of a program gets at
# most the time left (a function must bound its own tries).
wait_for() {
    local dir="$1" what="$2" seconds="$3" component="$4"
    shift 4
    local deadline=$((SECONDS + seconds)) log="${dir}/logs/${component}.log"
    until try_within "$((deadline - SECONDS + 1))" "$@" >/dev/null 2>&1; do
        if [[ -f "${dir}/pids/${component}.pid" ]] && ! pid_running "$(cat "${dir}/pids/${component}.pid")"; then
            tail -n 30 "${log}" >&2 || true
            die "${component} exited while waiting for ${what} (log: ${log})"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 30 "${log}" >&2 || true
            die "timed out after ${seconds} s waiting for ${what} (log: ${log})"
        fi
        sleep 0.5
    done
}

# SIGKILL to `pid` (component `name`), then waits at most component_kill_grace seconds for it
# to go; warns, naming its state, when it does not. Fails then.
kill_and_wait() {
    local pid="$1" name="$2" state
    kill -KILL "${pid}" 2>/dev/null || true
    wait_pid_gone "${pid}" "${component_kill_grace}" && return 0
    state="$(pid_state "${pid}")" || return 0
    say >&2 "warning: ${name} (pid ${pid}) is still there ${component_kill_grace} s after SIGKILL: state ${state} in /proc/${pid}/stat (wchan $(cat "/proc/${pid}/wchan" 2>/dev/null || echo unknown)); going on"
    return 1
}

# Stops component `name` of the cluster in `dir` if it is still the process `up` started:
# SIGTERM, then SIGKILL after 15 s. Its pid file goes with it (and stays while it is stuck).
stop_component() {
    local dir="$1" name="$2" pid
    pid="$(component_pid "${dir}" "${name}")" || {
        rm -f "${dir}/pids/${name}.pid"
        return 0
    }
    # A frozen (SIGSTOP) component would never act on SIGTERM.
    kill -CONT "${pid}" 2>/dev/null || true
    kill -TERM "${pid}" 2>/dev/null || true
    wait_pid_gone "${pid}" 15 || kill_and_wait "${pid}" "${name}" || return 0
    rm -f "${dir}/pids/${name}.pid"
}

# Kills component `name` (SIGKILL, as a crash or a lost node would) and waits for it to go, as
# stop_component does. Nothing to do when it is not running.
kill_component() {
    local dir="$1" name="$2" pid
    pid="$(component_pid "${dir}" "${name}")" || return 0
    kill_and_wait "${pid}" "${name}" || true
}
