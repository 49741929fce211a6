"""What an arm of the real-model study costs on a packaged model, measured on a small slice (issue 42 item 4:
Gemma-3-270M, a base model; SmolLM2-135M-Instruct, the study's own model, measured the same way beside it).

The study (scripts/real_model_study.py, configs/study/real_smollm2.yaml) is pre-registered on SmolLM2; this
runs its stages on `--model` with the same split (`split_questions`, seed 42), the same protocol adapter
settings (`ADAPTER`) and the model's study config (Gemma: configs/study/real_gemma3.yaml, which extends
SmolLM2's unchanged), each cut short:

1. `awarl model pretrained MODEL` (for Gemma: assembly, hash check, conversion; cached after the first call);
2. `--adapter-steps` steps of the study's protocol adapter on the warm-up pool (the study: 36), merged;
3. the greedy evaluation of that checkpoint on the first `--questions` evaluation questions (the study: 150);
4. p_i, K = 4 samples at T = 1, on the first `--questions` RL-pool questions (the study: 294);
5. `--grpo-steps` GRPO steps of plain GRPO, seed 0, LoRA (the study: 60 per run), no final evaluation.

Each stage's wall and CPU seconds (this process's user + system time) and the process's peak memory so far go
to OUT/cost.json with the slice's sizes, and the full arm (AWA-RL and plain GRPO, 2 seeds each: 4 runs of 60 steps and a 150-question evaluation,
plus the adapter, p_i and the warm checkpoint's evaluation) is extrapolated linearly from them. A checkpoint
warmed for a few steps is not the study's warm checkpoint: its outputs are not results, only costs (it may
write longer turns than a warm one, so the per-question figures are upper bounds).

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python scripts/study_arm_cost.py --model gemma3-270m --out runs/cost-gemma
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import real_model_study as S  # noqa: E402  (the protocol's split and adapter settings, read, not changed)
import yaml  # noqa: E402

from awarl.data.loaders import SHIPPED_DEV  # noqa: E402
from awarl.io import atomic_write_json, atomic_write_text, write_jsonl  # noqa: E402

CONFIGS = {"gemma3-270m": "configs/study/real_gemma3.yaml", "smollm2-135m": S.CONFIG}
# The full arm of issue 42 item 4: AWA-RL and plain GRPO, seeds 0 and 1, as the protocol runs them.
ARM_RUNS, ARM_STEPS, ARM_EVAL, ARM_POOL = 4, 60, 150, 294


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(costs: dict[str, Any], name: str, fn: Callable[[], Any], **sizes: Any) -> Any:
    """Run `fn`, record its wall and CPU seconds under `name`, print them, save the costs so far."""
    w0, c0 = time.time(), _cpu()
    out = fn()
    # ru_maxrss (KB on Linux) is the process's peak so far: the stage that raises it is the one that needs it
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    costs[name] = {"wall_s": round(time.time() - w0, 1), "cpu_s": round(_cpu() - c0, 1),
                   "peak_rss_gb_so_far": round(peak, 2), **sizes}
    print(f"{name}: {costs[name]}", flush=True)
    return out


def write_config(out: Path, config: str, split: dict[str, list], n: int, warm: Path, grpo_steps: int) -> Path:
    data = out / "data"
    write_jsonl(data / "pool.jsonl", (e.to_dict() for e in split["pool"][:n]))
    evals = []
    per = -(-n // len(SHIPPED_DEV))
    for ds in SHIPPED_DEV:
        write_jsonl(data / f"eval_{ds}.jsonl", (e.to_dict() for e in split["eval"] if e.dataset == ds))
        evals.append({"path": str(data / f"eval_{ds}.jsonl"), "dataset": ds, "limit": per})
    cfg = {"extends": str(ROOT / config), "run": {"out_dir": str(out / "grpo")},
           "data": {"train": [{"path": str(data / "pool.jsonl")}], "eval": evals},
           "retrieval": {"corpus": str(out / "corpus.jsonl"), "index_dir": str(out / "index")},
           "estimate": {"model": str(warm), "out": str(out / "p_estimates.jsonl")},
           "train": {"model": str(warm), "p_estimates": str(out / "p_estimates.jsonl"), "max_steps": grpo_steps,
                     "save_steps": max(grpo_steps, 1)}}
    path = out / "cost.yaml"
    atomic_write_text(path, yaml.safe_dump(cfg, sort_keys=False))
    return path


def token_stats(predictions: Path) -> dict[str, Any]:
    rows = [json.loads(line) for line in predictions.open() if line.strip()]
    model = [r["trajectory"]["model_tokens"] for r in rows]
    return {"questions": len(rows), "model_tokens_median": statistics.median(model) if model else None,
            "outcomes": {o: sum(r["outcome"] == o for r in rows) for o in ("correct", "wrong", "abstain", "invalid")}}


def extrapolate(c: dict[str, Any], n: int, adapter_steps: int, grpo_steps: int) -> dict[str, Any]:
    """The full arm's CPU seconds, linear in steps and questions from the slice's figures."""
    eval_q = c["eval"]["cpu_s"] / n
    est_q = c["estimate"]["cpu_s"] / n
    step = c["grpo"]["cpu_s"] / grpo_steps
    adapter = c["adapter"]["cpu_s"] / adapter_steps * S.ADAPTER["steps"]
    run = ARM_STEPS * step + ARM_EVAL * eval_q
    parts = {"adapter_36_steps": adapter, "p_i_294_questions": ARM_POOL * est_q,
             "warm_eval_150_questions": ARM_EVAL * eval_q, "per_run_60_steps_and_eval": run,
             "four_runs": ARM_RUNS * run}
    total = parts["adapter_36_steps"] + parts["p_i_294_questions"] + parts["warm_eval_150_questions"] + parts["four_runs"]
    return {"cpu_s": {k: round(v) for k, v in parts.items()}, "total_cpu_h": round(total / 3600, 1),
            "per_question_eval_cpu_s": round(eval_q, 1), "per_question_p_i_cpu_s": round(est_q, 1),
            "per_grpo_step_cpu_s": round(step, 1),
            "note": "CPU seconds of one thread; on 2 idle cores two runs go at once (the study's parallel=2)"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gemma3-270m", choices=sorted(CONFIGS))
    ap.add_argument("--out", default="runs/cost-gemma")
    ap.add_argument("--questions", type=int, default=9, help="evaluation and RL-pool questions (3 per dataset)")
    ap.add_argument("--adapter-steps", type=int, default=2)
    ap.add_argument("--grpo-steps", type=int, default=1)
    ap.add_argument("--stages", default="convert,adapter,eval,estimate,grpo")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cost_file = out / "cost.json"
    costs: dict[str, Any] = json.loads(cost_file.read_text()) if cost_file.exists() else {}
    stages = args.stages.split(",")
    split = S.split_questions(S.EVAL_PER_DATASET, S.WARMUP_PER_DATASET)
    warm = out / "warm"
    cfg_path = write_config(out, CONFIGS[args.model], split, args.questions, warm, args.grpo_steps)

    from awarl.agent.templates import load_template
    from awarl.config import load_config
    from awarl.models.pretrained import pretrained_folder
    from awarl.stages.demo import closed_corpus_index
    from awarl.training.protocol_adapter import merge_adapter, train_protocol_adapter

    cfg = load_config(cfg_path)
    base = timed(costs, "convert", lambda: pretrained_folder(args.model)) if "convert" in stages \
        else pretrained_folder(args.model)
    if "adapter" in stages:
        retriever = closed_corpus_index(cfg, "study_arm_cost")
        info = timed(costs, "adapter", lambda: train_protocol_adapter(
            base, out / "adapter", split["warmup"], retriever, load_template(cfg.agent.template), topk=cfg.retrieval.topk,
            **{**S.ADAPTER, "steps": args.adapter_steps}, abstain_phrase=cfg.agent.abstention_phrases[0],
            command="study_arm_cost"), steps=args.adapter_steps)
        costs["adapter"].update(sequences=info["sequences"], left_out_too_long=info["left_out_too_long"],
                                losses=info["losses"], train_s=info["cost"]["train_seconds"])
        timed(costs, "merge", lambda: merge_adapter(base, out / "adapter", warm))
    atomic_write_json(cost_file, costs)
    if "eval" in stages:
        from awarl.stages.evaluate import run_eval

        timed(costs, "eval", lambda: run_eval(cfg, out / "eval", model=str(warm)), questions=args.questions)
        costs["eval"].update(token_stats(out / "eval" / "predictions.jsonl"))
        atomic_write_json(cost_file, costs)
    if "estimate" in stages:
        from awarl.stages.estimate import run_estimate

        timed(costs, "estimate", lambda: run_estimate(cfg), questions=args.questions, k=cfg.estimate.k)
        atomic_write_json(cost_file, costs)
    if "grpo" in stages:
        from awarl.stages.train import run_train

        plain = load_config(cfg_path, ["reward.strategy=none", "run.seed=0"])
        timed(costs, "grpo", lambda: run_train(plain, final_eval=False), steps=args.grpo_steps)
        atomic_write_json(cost_file, costs)
    if all(k in costs for k in ("adapter", "eval", "estimate", "grpo")):
        costs["extrapolated_arm"] = extrapolate(costs, args.questions, args.adapter_steps, args.grpo_steps)
    costs["model"], costs["load_average_at_end"] = args.model, os.getloadavg()
    atomic_write_json(cost_file, costs)
    print(json.dumps(costs.get("extrapolated_arm"), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
