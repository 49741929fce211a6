#!/usr/bin/env bash
# Launch `awarl train` on one or several nodes with accelerate (+ DeepSpeed from the accelerate config).
# Run the same command on every node, changing only --machine-rank.
#
#   scripts/train_multinode.sh --config configs/qwen2.5-7b_cold_8gpu.yaml \
#       [--accelerate-config configs/accelerate/zero3_8gpu.yaml] [--num-machines 1] [--machine-rank 0] \
#       [--main-ip 127.0.0.1] [--main-port 29500] [--procs-per-node 6] [--gpus 2,3,4,5,6,7] \
#       [--resume [CKPT]] [-- KEY=VALUE ...]
#
# --procs-per-node is the number of training processes per node (GPUs serving neither vLLM nor the judge); --gpus sets
# CUDA_VISIBLE_DEVICES for them. Everything after `--` is passed to `awarl train` as config overrides
# (each must look like key.path=value). Arguments are validated and never evaluated by the shell.
set -euo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
die() { echo "train_multinode.sh: $*" >&2; exit 2; }

config=""; acc_cfg="configs/accelerate/zero3_8gpu.yaml"; nm="1"; rank="0"; ip="127.0.0.1"; mport="29500"
ppn=""; gpus=""; resume=0; resume_ckpt=""; overrides=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --config) config="${2:?--config needs a value}"; shift 2 ;;
    --accelerate-config) acc_cfg="${2:?--accelerate-config needs a value}"; shift 2 ;;
    --num-machines) nm="${2:?--num-machines needs a value}"; shift 2 ;;
    --machine-rank) rank="${2:?--machine-rank needs a value}"; shift 2 ;;
    --main-ip) ip="${2:?--main-ip needs a value}"; shift 2 ;;
    --main-port) mport="${2:?--main-port needs a value}"; shift 2 ;;
    --procs-per-node) ppn="${2:?--procs-per-node needs a value}"; shift 2 ;;
    --gpus) gpus="${2:?--gpus needs a value}"; shift 2 ;;
    --resume)
      resume=1
      if [[ $# -gt 1 && "$2" != --* ]]; then resume_ckpt="$2"; shift; fi
      shift ;;
    --) shift; overrides=("$@"); break ;;
    -h|--help) usage 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

[[ -n "$config" ]] || die "--config is required"
[[ -f "$config" ]] || die "config file not found: $config"
[[ -f "$acc_cfg" ]] || die "accelerate config not found: $acc_cfg"
[[ "$nm" =~ ^[1-9][0-9]*$ ]] || die "--num-machines must be a positive integer, got '$nm'"
[[ "$rank" =~ ^[0-9]+$ ]] && (( rank < nm )) || die "--machine-rank must be in [0, $nm), got '$rank'"
[[ "$ip" =~ ^[A-Za-z0-9.-]+$ ]] || die "--main-ip: unexpected characters in '$ip'"
[[ "$mport" =~ ^[0-9]+$ ]] && (( mport > 0 && mport < 65536 )) || die "--main-port must be 1-65535"
[[ -z "$ppn" || "$ppn" =~ ^[1-9][0-9]*$ ]] || die "--procs-per-node must be a positive integer"
[[ -z "$gpus" || "$gpus" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--gpus must be a comma-separated list of GPU indices"
[[ -z "$resume_ckpt" || -d "$resume_ckpt" ]] || die "--resume: checkpoint folder not found: $resume_ckpt"
for o in "${overrides[@]}"; do
  [[ "$o" =~ ^[A-Za-z_][A-Za-z0-9_.]*=.*$ ]] || die "override must look like key.path=value, got '$o'"
done
if [[ -z "$ppn" ]]; then
  if [[ -n "$gpus" ]]; then ppn=$(tr ',' '\n' <<<"$gpus" | wc -l)
  else ppn=$(sed -n 's/^num_processes: *\([0-9]*\).*/\1/p' "$acc_cfg"); ppn="${ppn:-1}"; fi
fi
command -v accelerate >/dev/null || die "the 'accelerate' command is not on PATH"

cmd=(accelerate launch --config_file "$acc_cfg" --num_machines "$nm" --machine_rank "$rank"
     --main_process_ip "$ip" --main_process_port "$mport" --num_processes "$(( nm * ppn ))"
     -m awarl.cli train --config "$config")
if (( resume )); then
  cmd+=(--resume)
  [[ -n "$resume_ckpt" ]] && cmd+=("$resume_ckpt")
fi
(( ${#overrides[@]} )) && cmd+=("${overrides[@]}")
echo "${gpus:+CUDA_VISIBLE_DEVICES=$gpus }${cmd[*]}" >&2
if [[ -n "$gpus" ]]; then export CUDA_VISIBLE_DEVICES="$gpus"; fi
exec "${cmd[@]}"
