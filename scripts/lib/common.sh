# shellcheck shell=bash
# Sourced by every script of scripts/: messages, the pinned versions of hack/*/go.mod, free
# loopback ports, bounded waits on a process, and templates.
#
#   say <words...>                   "<script_name>: <words>" on file descriptor say_fd
#   die <words...>                   say on stderr, then exit 1
#   pinned <dir> <module>            the version hack/<dir>/go.mod requires of <module>
#   free_ports <count>               <count> free loopback TCP ports, on one line
#   pid_state <pid>                  the state letter of /proc/<pid>/stat (R, S, D, Z, T, ...)
#   pid_running <pid>                whether <pid> is a process that is not a zombie
#   wait_pid_gone <pid> <seconds>    waits at most <seconds> for <pid> to be gone (or a zombie)
#   try_within <seconds> <command...>
#                                    runs a program for at most <seconds>
#   render <template> <out> NAME=value...
#                                    <template> with each @NAME@ replaced by its value
#
# Globals it sets, for the caller and the other libraries (each keeps a value the caller set
# before sourcing this file):
#   repo_root    the checkout: two directories above this file
#   cache_root   the build cache: SWARM_CLUSTER_CACHE, else ~/.cache/swarm-operator
#   script_name  the name messages begin with: the basename of $0
#   say_fd       the file descriptor `say` writes to: 2 (stderr)

[[ -n "${swarm_lib_common:-}" ]] && return 0
swarm_lib_common=1

repo_root="${repo_root:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
cache_root="${cache_root:-${SWARM_CLUSTER_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/swarm-operator}}"
script_name="${script_name:-${0##*/}}"
say_fd="${say_fd:-2}"

say() { echo "${script_name}: $*" >&"${say_fd}"; }
die() {
    say "$*" >&2
    exit 1
}

# The version a wrapper module requires of `module`: its go.mod is the one place it is pinned.
pinned() {
    awk -v m="$2" '$1 == "replace" || $2 == "=>" { next }
        { for (i = 1; i < NF; i++) if ($i == m && $(i + 1) ~ /^v/) { print $(i + 1); exit } }' \
        "${repo_root}/hack/$1/go.mod"
}

# `count` free loopback TCP ports.
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
held = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    held.append(s)
print(" ".join(str(s.getsockname()[1]) for s in held))
EOF
}

# The state of process `pid` (the field after the command name in /proc/<pid>/stat); fails
# when there is no such process.
pid_state() {
    local stat
    read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
    stat="${stat##*) }"
    echo "${stat%% *}"
}

# Whether `pid` is a process that may still act: a zombie (exited, not yet reaped by its
# parent) is not.
pid_running() {
    local state
    kill -0 "$1" 2>/dev/null || return 1
    state="$(pid_state "$1")" || return 1
    [[ "${state}" != Z && "${state}" != X ]]
}

# Waits at most `seconds` for process `pid` to be gone (or a zombie); fails if it is still there.
wait_pid_gone() {
    local pid="$1" deadline=$((SECONDS + $2))
    while pid_running "${pid}"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.1
    done
}

# try_within <seconds> <command...>: the command's status; a program still running after
# <seconds> is stopped (SIGTERM, then SIGKILL 2 s later) and the status is 124. A shell function
# runs as it is: it must bound itself.
try_within() {
    local seconds="$1"
    shift
    if [[ "$(type -t "$1")" == file ]]; then
        timeout --foreground --kill-after=2 "${seconds}" "$@"
    else
        "$@"
    fi
}

# render <template> <out> NAME=value...: writes <template> to <out> with every @NAME@ replaced by
# its value. Fails when the template names a placeholder that has no value, or a value has no
# placeholder.
render() {
    local template="$1" out="$2" text="" pair name left
    shift 2
    IFS= read -r -d '' text <"${template}" || [[ -n "${text}" ]] || die "cannot read ${template}"
    for pair in "$@"; do
        name="${pair%%=*}"
        [[ "${text}" == *"@${name}@"* ]] || die "${template} has no @${name}@"
        # Quoted, so neither the pattern nor the value is a glob or `&` (patsub_replacement).
        text="${text//"@${name}@"/"${pair#*=}"}"
    done
    left="$(grep -o '@[A-Z_][A-Z0-9_]*@' <<<"${text}" | sort -u | tr '\n' ' ')" || true
    [[ -z "${left}" ]] || die "${template}: no value for ${left% }"
    printf '%s' "${text}" >"${out}"
}
