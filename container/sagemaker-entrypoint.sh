#!/usr/bin/env bash
# SageMaker entrypoint: vLLM (Voxtral realtime) on a loopback port, the bridge on 8080.
#
# 1. Starts `vllm serve` on $VLLM_HOST:$VLLM_PORT (127.0.0.1:8081) with the flags Voxtral
#    needs; every SM_VLLM_<NAME> variable becomes `--<name>` (lowercase, _ → -):
#      SM_VLLM_MAX_NUM_SEQS=4        → --max-num-seqs 4
#      SM_VLLM_ENFORCE_EAGER=true    → --enforce-eager
#      SM_VLLM_X=false or empty      → no flag (also drops one of the defaults below)
#    SM_VLLM_MODEL is the model (default /opt/ml/model, where SageMaker mounts the S3 data);
#    SM_VLLM_SERVED_MODEL_NAME must equal what clients send in `session.update`.
#    Arguments after an optional leading `serve` (what SageMaker passes) are appended.
# 2. Waits for vLLM's /health (at most $VLLM_HEALTH_TIMEOUT_S), failing loudly if vLLM exits.
# 3. Starts the bridge (python -m bridge.app) on $BRIDGE_HOST:$BRIDGE_PORT (0.0.0.0:8080).
# 4. Forwards SIGTERM/SIGINT to both and exits 0 once they stopped; if either dies on its
#    own, logs which one and its exit code, stops the other and exits non-zero, so that
#    SageMaker replaces the container instead of routing to half of it.
#
# For tests and local runs: VLLM_BIN (the vllm command), BRIDGE_PYTHON and BRIDGE_PYTHONPATH
# (the bridge's interpreter and import path; default: this script's folder, which holds
# bridge/), VLLM_PORT, BRIDGE_PORT, STOP_GRACE_S.
set -euo pipefail

log() { printf '%s sagemaker-entrypoint: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2; }

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VLLM_BIN=${VLLM_BIN:-vllm}
VLLM_HOST=${VLLM_HOST:-127.0.0.1}
VLLM_PORT=${VLLM_PORT:-8081}
VLLM_HEALTH_TIMEOUT_S=${VLLM_HEALTH_TIMEOUT_S:-1200}
BRIDGE_PYTHON=${BRIDGE_PYTHON:-python3}
BRIDGE_PYTHONPATH=${BRIDGE_PYTHONPATH:-$script_dir}
export BRIDGE_HOST=${BRIDGE_HOST:-0.0.0.0}
export BRIDGE_PORT=${BRIDGE_PORT:-8080}
STOP_GRACE_S=${STOP_GRACE_S:-20}
export VLLM_DISABLE_COMPILE_CACHE=${VLLM_DISABLE_COMPILE_CACHE:-1}  # per the model card

health_url="http://$VLLM_HOST:$VLLM_PORT/health"
export UPSTREAM_URL=${UPSTREAM_URL:-ws://$VLLM_HOST:$VLLM_PORT/v1/realtime}
export UPSTREAM_HEALTH_URL=${UPSTREAM_HEALTH_URL:-$health_url}

for number in VLLM_PORT BRIDGE_PORT VLLM_HEALTH_TIMEOUT_S STOP_GRACE_S; do
    if [[ ! ${!number} =~ ^[0-9]+$ ]]; then
        log "$number must be a whole number, got '${!number}'"
        exit 2
    fi
done

# ------------------------------------------------------------------ vLLM's command line
if [[ ${1:-} == serve ]]; then shift; fi
model=${SM_VLLM_MODEL:-/opt/ml/model}

declare -A option=(
    [tokenizer-mode]=mistral
    [config-format]=mistral
    [load-format]=mistral
    [compilation-config]='{"cudagraph_mode":"PIECEWISE"}'
    [served-model-name]=mistralai/Voxtral-Mini-4B-Realtime-2602
    [max-model-len]=${MAX_MODEL_LEN:-45000}
)
order=(tokenizer-mode config-format load-format compilation-config served-model-name max-model-len)

while IFS= read -r name; do
    case $name in
        SM_VLLM_MODEL) continue ;;
        SM_VLLM_HOST | SM_VLLM_PORT)
            log "ignoring $name: vLLM listens on $VLLM_HOST:$VLLM_PORT for the bridge (set VLLM_PORT)"
            continue
            ;;
    esac
    flag=${name#SM_VLLM_}
    flag=${flag,,}
    flag=${flag//_/-}
    if [[ ! -v option[$flag] ]]; then order+=("$flag"); fi
    option[$flag]=${!name}
done < <(compgen -e | grep '^SM_VLLM_[A-Z0-9_]*$' | LC_ALL=C sort || true)

vllm_args=(serve "$model" --host "$VLLM_HOST" --port "$VLLM_PORT")
for flag in "${order[@]}"; do
    value=${option[$flag]}
    case ${value,,} in
        '' | false) ;;
        true) vllm_args+=("--$flag") ;;
        *) vllm_args+=("--$flag" "$value") ;;
    esac
done
vllm_args+=("$@")

# ------------------------------------------------------------------ children and signals
vllm_pid=""
bridge_pid=""
stopping=""

on_signal() {
    if [[ -z $stopping ]]; then
        stopping=$1
        log "received SIG$1; stopping the bridge and vLLM"
    fi
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT

alive() { [[ -n $1 ]] && kill -0 "$1" 2>/dev/null; }

# TERM the given children, KILL what is left after STOP_GRACE_S, and reap them.
stop_children() {
    local pid pids=() left deadline=$((SECONDS + STOP_GRACE_S))
    for pid in "$@"; do
        if alive "$pid"; then pids+=("$pid"); fi
    done
    ((${#pids[@]})) || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    while :; do
        left=()
        for pid in "${pids[@]}"; do
            if alive "$pid"; then left+=("$pid"); fi
        done
        ((${#left[@]})) || break
        if ((SECONDS >= deadline)); then
            log "still running ${STOP_GRACE_S}s after SIGTERM, killing: ${left[*]}"
            kill -KILL "${left[@]}" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}

shutdown_and_exit() {
    stop_children "$bridge_pid" "$vllm_pid"
    log "stopped on SIG$stopping"
    exit 0
}

vllm_healthy() {
    "$BRIDGE_PYTHON" - "$health_url" <<'PY' 2>/dev/null
import sys
import urllib.request

opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
with opener.open(sys.argv[1], timeout=2) as response:
    sys.exit(0 if response.status == 200 else 1)
PY
}

# ------------------------------------------------------------------ start vLLM, wait for health
log "starting vLLM: $(printf '%q ' "$VLLM_BIN" "${vllm_args[@]}")"
"$VLLM_BIN" "${vllm_args[@]}" &
vllm_pid=$!
log "vLLM started (pid $vllm_pid); waiting up to ${VLLM_HEALTH_TIMEOUT_S}s for $health_url"

deadline=$((SECONDS + VLLM_HEALTH_TIMEOUT_S))
until vllm_healthy; do
    if [[ -n $stopping ]]; then shutdown_and_exit; fi
    if ! alive "$vllm_pid"; then
        code=0
        wait "$vllm_pid" || code=$?
        log "vLLM (pid $vllm_pid) exited with code $code before it became healthy; see its log above"
        exit $((code == 0 ? 1 : code))
    fi
    if ((SECONDS >= deadline)); then
        log "vLLM did not become healthy within ${VLLM_HEALTH_TIMEOUT_S}s; stopping it" \
            "(raise VLLM_HEALTH_TIMEOUT_S if the model needs longer to load)"
        stop_children "$vllm_pid"
        exit 1
    fi
    sleep 0.5 &
    wait $! || true
done
if [[ -n $stopping ]]; then shutdown_and_exit; fi
log "vLLM is healthy"

# ------------------------------------------------------------------ start the bridge
PYTHONPATH="$BRIDGE_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}" "$BRIDGE_PYTHON" -m bridge.app &
bridge_pid=$!
log "bridge started (pid $bridge_pid) on $BRIDGE_HOST:$BRIDGE_PORT, relaying to $UPSTREAM_URL"

# ------------------------------------------------------------------ supervise
while :; do
    exited=""
    code=0
    wait -n -p exited "$vllm_pid" "$bridge_pid" || code=$?
    if [[ -n $stopping ]]; then shutdown_and_exit; fi
    if [[ -z $exited ]]; then continue; fi  # a signal we don't handle interrupted the wait
    if [[ $exited == "$vllm_pid" ]]; then
        log "vLLM (pid $vllm_pid) exited with code $code; stopping the bridge"
        stop_children "$bridge_pid"
    else
        log "bridge (pid $bridge_pid) exited with code $code; stopping vLLM"
        stop_children "$vllm_pid"
    fi
    exit $((code == 0 ? 1 : code))
done
