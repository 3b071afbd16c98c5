# Shared by tools/cold_run.sh and tools/cold_test.sh (sourced): the pieces
# of a cold-run page. The caller sets `work` (its WORK folder, holding
# make.log with each line prefixed by the seconds since the start) and the
# array `steps` ("name|pattern": a step starts at the first make.log line
# matching its pattern).

# Sets page_only, work, src and targets from a script's arguments
# ([--page-only] [WORK]); $1 is the default WORK.
cold_args() {
    local default=$1
    shift
    page_only=0
    if [[ ${1:-} == --page-only ]]; then page_only=1; shift; fi
    work=${1:-$default}
    src=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
    targets=$src/tools/bench/targets.py
}

# Seconds since the start of the first make.log line matching $1, or empty.
first_at() { grep -E -m1 -- "^[0-9]+ .*$1" "$work/make.log" | cut -d' ' -f1; }

mmss() { printf '%d min %02d s' $(($1 / 60)) $(($1 % 60)); }

# One line of the machine: cores, CPU model, memory, bf16/AMX flags.
machine() {
    local cpu mem flags=""
    cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
    mem=$(awk '/MemTotal/ {printf "%d GiB", $2 / 1048576}' /proc/meminfo)
    grep -qw avx512_bf16 /proc/cpuinfo && flags+=" avx512_bf16"
    grep -qw amx_bf16 /proc/cpuinfo && flags+=" amx_bf16" || flags+=" (no AMX)"
    echo "$(nproc) cores, $cpu, $mem RAM,$flags"
}

# The step table's rows; $1 is the second the last step ended (empty: it
# did not finish).
step_rows() {
    local end=$1 prev_name="" prev_at="" entry name pat at
    echo "| step | wall | done at |"
    echo "|---|---|---|"
    for entry in "${steps[@]}"; do
        name=${entry%%|*} pat=${entry#*|}
        at=$(first_at "$pat")
        [[ -z $at ]] && { echo "| $name | not seen in make.log | |"; continue; }
        [[ -n $prev_name ]] && echo "| $prev_name | $(mmss $((at - prev_at))) | $(mmss "$at") |"
        prev_name=$name prev_at=$at
    done
    if [[ -n $end && -n $prev_name ]]; then
        echo "| $prev_name | $(mmss $((end - prev_at))) | $(mmss "$end") |"
    elif [[ -n $prev_name ]]; then
        echo "| $prev_name | not finished | |"
    fi
}
