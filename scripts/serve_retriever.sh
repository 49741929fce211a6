#!/usr/bin/env bash
# Serve a BM25 or dense index as its own HTTP service with Search-R1's contract (POST /retrieve), for
# runs with retrieval.kind: server (configs/qwen2.5-7b_*_8gpu.yaml expect http://127.0.0.1:8100).
#
#   scripts/serve_retriever.sh --index indexes/wiki18-bm25 [--port 8100] [--host 127.0.0.1]
#                              [--max-batch 512] [--workers N] [--mmap auto|on|off] [--device cuda|cpu] [--gpus 0]
#
# Build the index first: awarl index build --corpus wiki-18.jsonl.gz --kind bm25 --out indexes/wiki18-bm25
# --host defaults to loopback; bind another address only on a trusted network (there is no auth).
# Arguments are validated and passed as separate words; nothing is evaluated by the shell.
set -euo pipefail

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
die() { echo "serve_retriever.sh: $*" >&2; exit 2; }

index=""; host="127.0.0.1"; port="8100"; max_batch="512"; device=""; gpus=""; workers=""; mmap="auto"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --index) index="${2:?--index needs a value}"; shift 2 ;;
    --host) host="${2:?--host needs a value}"; shift 2 ;;
    --port) port="${2:?--port needs a value}"; shift 2 ;;
    --max-batch) max_batch="${2:?--max-batch needs a value}"; shift 2 ;;
    --workers) workers="${2:?--workers needs a value}"; shift 2 ;;
    --mmap) mmap="${2:?--mmap needs a value}"; shift 2 ;;
    --device) device="${2:?--device needs a value}"; shift 2 ;;
    --gpus) gpus="${2:?--gpus needs a value}"; shift 2 ;;
    -h|--help) usage 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

[[ -n "$index" ]] || die "--index is required (a folder built by \`awarl index build\`)"
[[ -f "$index/index_meta.json" ]] || die "not an index folder (no index_meta.json): $index"
[[ "$host" =~ ^[A-Za-z0-9.:-]+$ ]] || die "--host: unexpected characters in '$host'"
[[ "$port" =~ ^[0-9]+$ ]] && (( port > 0 && port < 65536 )) || die "--port must be 1-65535, got '$port'"
[[ "$max_batch" =~ ^[1-9][0-9]*$ ]] || die "--max-batch must be a positive integer"
[[ -z "$workers" || "$workers" =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer"
[[ "$mmap" == auto || "$mmap" == on || "$mmap" == off ]] || die "--mmap must be auto, on or off"
[[ -z "$device" || "$device" == cpu || "$device" == cuda ]] || die "--device must be cpu or cuda"
[[ -z "$gpus" || "$gpus" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--gpus must be a comma-separated list of GPU indices"
command -v awarl >/dev/null || die "the 'awarl' command is not on PATH (pip install -e .)"

cmd=(awarl serve retriever --index "$index" --host "$host" --port "$port" --max-batch "$max_batch" --mmap "$mmap")
[[ -n "$workers" ]] && cmd+=(--workers "$workers")
[[ -n "$device" ]] && cmd+=(--device "$device")
if [[ -n "$gpus" ]]; then export CUDA_VISIBLE_DEVICES="$gpus"; fi
echo "${cmd[*]}" >&2
exec "${cmd[@]}"
