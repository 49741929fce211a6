#!/usr/bin/env bash
# Issue 46's GPU validation run: ONE script for the lent GPU machine (the device tool), each step time-boxed,
# each writing its figures to $OUT as it goes, in the issue's order:
#   grpo     benchmarks/grpo_step_bench.py at the Qwen2.5-0.5B shape: awarl multi-turn GRPO vs plain TRL GRPO
#   r05, r7  benchmarks/rollout_bench.py on CUDA, 0.5B and 7B shapes, static cache + compile (no vLLM there)
#   smoke    benchmarks/gpu_train_smoke.py: awarl estimate + train (bf16, 0.5B) + resume, checked
# The machine is offline with torch/transformers/accelerate/peft installed; trl, datasets, pydantic and bm25s
# travel as wheels in .whl (benchmarks/grpo_step_bench.py's docstring: how to fetch them). Device tool call:
#   run(command="bash benchmarks/gpu_validation.sh", carry=[".whl"], timeout_s=540)
# STEPS=smoke bash benchmarks/gpu_validation.sh reruns only the named steps (comma-separated).
# At most 8 files come back from $OUT: gpu_validation.log, env.txt, grpo_bench.jsonl, rollout_0.5b.json,
# rollout_7b.json, train_smoke.json.
set -u
OUT=${OUT:?set OUT to the output folder}
STEPS=${STEPS:-grpo,r05,r7,smoke}
cd "$(dirname "$0")/.."
exec > >(tee -a "$OUT/gpu_validation.log") 2>&1
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 )) s] $*"; }

stamp "install wheels"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# The image has JAX, which bm25s imports and which reserves 75% of the GPU at first use (awarl pins it to the CPU
# itself since the first run of this script ran out of memory; set here too so no other import can).
export JAX_PLATFORMS=cpu XLA_PYTHON_CLIENT_PREALLOCATE=false
{ nvidia-smi; python3 -c "import sys, torch, transformers, trl, datasets, accelerate, peft, pydantic; \
print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda); \
print('transformers', transformers.__version__, 'trl', trl.__version__, 'datasets', datasets.__version__, \
'accelerate', accelerate.__version__, 'peft', peft.__version__, 'pydantic', pydantic.__version__)"; \
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

rc=0
want() { [[ ",$STEPS," == *",$1,"* ]]; }
step() {  # step NAME SECONDS CMD...: run CMD under a time limit, keep going whatever it returns
  local name=$1 limit=$2; shift 2
  stamp "$name (limit ${limit} s): $*"
  timeout -k 10 "$limit" "$@"; local r=$?
  stamp "$name exit $r"
  [ $r -eq 0 ] || rc=1
}

want grpo && step grpo 150 python3 benchmarks/grpo_step_bench.py --shape 0.5B --steps 3 --budget-s 100 --out "$OUT"
want r05 && step r05 100 python3 benchmarks/rollout_bench.py --shape 0.5b --device cuda --static-cache --batch 64 \
    --turn-tokens 128 --runs 2 --out "$OUT/rollout_0.5b.json"
want r7 && step r7 120 python3 benchmarks/rollout_bench.py --shape 7b --device cuda --static-cache --batch 32 \
    --turn-tokens 128 --runs 2 --out "$OUT/rollout_7b.json"
if want smoke; then
  step smoke 150 python3 benchmarks/gpu_train_smoke.py --shape 0.5B --steps 2 --timeout-s 60 --out /tmp/smoke
  cp /tmp/smoke/train_smoke.json "$OUT/" 2>/dev/null || true
fi
stamp "done, rc=$rc"
exit $rc
