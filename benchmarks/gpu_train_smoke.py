"""Smoke run of the real `awarl estimate` + `awarl train` commands on a GPU (bf16), with a resume.

Issue 46, step 3: at the Qwen2.5-0.5B layer shapes (random init, the tiny BPE tokenizer's vocabulary, as
benchmarks/grpo_step_bench.py builds it), in a fresh folder:

1. `awarl estimate` (K samples of every training question: the p_i file, as a run would make it);
2. `awarl train` for `--steps` GRPO steps with a checkpoint every step, the AWA-RL reward, the gold citation
   judge, the final evaluation on a few held-out questions;
3. `awarl train --resume train.max_steps=<steps + 1>`: the run continues from its last checkpoint for one
   more step (optimizer, scheduler, data position, RNG and the reward's Ē restored).

Each command runs as its own process (`python -m awarl.cli ...`), exactly as a user launches it. Checked and
recorded in OUT/train_smoke.json: every command's exit code and wall time; every logged training step has a
finite loss and the reward's statistics (awarl/rho, rho_hat, E_bar, penalty); the checkpoints exist; the
resumed run starts where the first stopped (its log continues at step steps + 1, and the reward state it
wrote has one more update than the checkpoint it resumed from). The exit code is 1 if any check failed.

On the GPU machine (the device tool; wheels as in benchmarks/grpo_step_bench.py):

    PYTHONPATH=/tmp/site:. python3 benchmarks/gpu_train_smoke.py --shape 0.5B --out $OUT

On CPU (tests; the tiny model, fp32, forced by awarl on a machine without CUDA):

    .venv/bin/python benchmarks/gpu_train_smoke.py --shape tiny --out /tmp/smoke
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpo_step_bench as gsb  # noqa: E402  (the model and index builders of the GRPO benchmark)

RESULTS_FILE = "train_smoke.json"
REWARD_KEYS = ("awarl/rho", "awarl/rho_hat", "awarl/E_bar", "awarl/penalty")


def smoke_config(work: Path, model_dir: Path, index_dir: Path, steps: int, questions: int, cuda: bool) -> dict:
    """The run's config (written as YAML and passed with --config): base.yaml's recipe at smoke size."""
    run = work / "run"
    return {
        "extends": str(ROOT / "configs" / "base.yaml"),
        "run": {"name": "gpu-smoke", "out_dir": str(run), "seed": 0},
        "data": {"train": [{"path": str(ROOT / "data/hotpotqa/hotpot_dev_distractor_v1.sample200.json"),
                            "format": "hotpotqa", "limit": questions}]},
        "retrieval": {"kind": "bm25", "index_dir": str(index_dir), "topk": 2},
        "agent": {"max_turns": 2, "max_new_tokens_per_turn": 96, "max_trajectory_tokens": 768},
        "generation": {"backend": "hf", "batch_size": 16, "dtype": "bfloat16" if cuda else "float32"},
        "critic": {"judge": "gold", "cache_dir": str(run / "critic_cache")},
        "estimate": {"k": 2, "out": str(work / "p_estimates.jsonl")},
        "eval": {"datasets": ["musique"], "limit": 4},
        "train": {"model": str(model_dir), "p_estimates": str(work / "p_estimates.jsonl"), "num_generations": 4,
                  "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "max_steps": steps,
                  "save_steps": 1, "learning_rate": 1e-6, "bf16": cuda, "gradient_checkpointing": False,
                  "report_to": ["none"]},
    }


def awarl(args: list[str], log_path: Path, timeout: float) -> dict[str, Any]:
    """One `python -m awarl.cli ...` process; its output goes to `log_path` (the tail is kept in the record)."""
    cmd = [sys.executable, "-m", "awarl.cli", *args]
    t = time.perf_counter()
    with log_path.open("w", encoding="utf-8") as log:
        try:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    tail = log_path.read_text(encoding="utf-8", errors="replace")[-1500:]
    return {"cmd": "awarl " + " ".join(args), "rc": rc, "seconds": round(time.perf_counter() - t, 1), "tail": tail}


def training_log(run: Path) -> list[dict]:
    """The per-step log entries of the newest trainer state (the last checkpoint's, or final/'s)."""
    states = sorted(run.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    if not states:
        return []
    hist = json.loads(states[-1].read_text(encoding="utf-8")).get("log_history", [])
    return [h for h in hist if "loss" in h and "step" in h]


def check_log(entries: list[dict], steps: int) -> list[str]:
    """What is wrong with a run's per-step log (pure): a missing step, a non-finite loss, a missing reward key."""
    problems = []
    seen = sorted({int(e["step"]) for e in entries})
    if seen != list(range(1, steps + 1)):
        problems.append(f"logged steps {seen}, expected 1..{steps}")
    for e in entries:
        if not (isinstance(e.get("loss"), (int, float)) and math.isfinite(e["loss"])):
            problems.append(f"step {e.get('step')}: loss {e.get('loss')!r} is not finite")
        missing = [k for k in REWARD_KEYS if k not in e]
        if missing:
            problems.append(f"step {e.get('step')}: reward statistics {missing} not logged")
    return problems


def reward_updates(ckpt: Path) -> int | None:
    path = ckpt / "awarl_reward_state.json"
    return json.loads(path.read_text(encoding="utf-8")).get("updates") if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=["tiny", *gsb.SHAPES], default="tiny")
    p.add_argument("--steps", type=int, default=2, help="GRPO steps of the first run (the resume adds one)")
    p.add_argument("--questions", type=int, default=8, help="training questions (HotpotQA dev sample)")
    p.add_argument("--out", required=True, help=f"folder of {RESULTS_FILE} and the commands' logs")
    p.add_argument("--work", default=None, help="model, index and run folder (default: temporary, deleted)")
    p.add_argument("--timeout-s", type=float, default=300.0, help="time limit of each command")
    args = p.parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="gpu_smoke_"))
    work.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"kind": "train_smoke", "run_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                              "shape": args.shape, "steps": args.steps, "cuda": cuda,
                              "device": torch.cuda.get_device_name(0) if cuda else "cpu", "commands": [],
                              "problems": []}
    try:
        t = time.perf_counter()
        model_dir, info = gsb.build_model(args.shape, work, work / "tiny-model", seed=0)
        index_dir = gsb.build_retrieval(work)
        record.update(model=info, setup_s=round(time.perf_counter() - t, 1))
        import yaml

        cfg_path = work / "smoke.yaml"
        cfg_path.write_text(yaml.safe_dump(smoke_config(work, model_dir, index_dir, args.steps, args.questions,
                                                        cuda), sort_keys=False), encoding="utf-8")
        run = work / "run"
        plan = [("estimate", ["estimate", "--config", str(cfg_path)]),
                ("train", ["train", "--config", str(cfg_path)]),
                ("resume", ["train", "--config", str(cfg_path), "--resume", f"train.max_steps={args.steps + 1}"])]
        for name, cmd in plan:
            res = awarl(cmd, out / f"{name}.log", args.timeout_s)
            res["name"] = name
            record["commands"].append(res)
            print(f"{name}: rc={res['rc']} in {res['seconds']} s", flush=True)
            if res["rc"] != 0:
                record["problems"].append(f"{name} exited {res['rc']}")
                break
            if name == "train":
                record["first_run_checkpoints"] = sorted(d.name for d in run.glob("checkpoint-*"))
                record["updates_before_resume"] = reward_updates(run / f"checkpoint-{args.steps}")
        else:
            entries = training_log(run)
            record["log"] = [{k: e.get(k) for k in ("step", "loss", "grad_norm", "learning_rate", *REWARD_KEYS)}
                             for e in entries]
            record["problems"] += check_log(entries, args.steps + 1)
            last = run / f"checkpoint-{args.steps + 1}"
            after = reward_updates(last)
            record["updates_after_resume"] = after
            if not last.is_dir():
                record["problems"].append(f"no {last.name} after the resume")
            elif record.get("updates_before_resume") is None or after != record["updates_before_resume"] + 1:
                record["problems"].append(f"reward updates {record.get('updates_before_resume')} -> {after}: the "
                                          "resume did not continue the reward state by one step")
            if not (run / "final").is_dir():
                record["problems"].append("no final/ model")
        if torch.cuda.is_available():
            record["note"] = "each command is its own process; peak memory is not measured here"
    finally:
        (out / RESULTS_FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({k: v for k, v in record.items() if k != "commands"}, indent=1), flush=True)
    return 1 if record["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
