"""`awarl demo`: the whole AWA-RL pipeline, offline, on this machine's CPU, in a few minutes.

It runs the same stage functions as a GPU run, on small real parts:

1. a tiny random-init Qwen2 model and BPE tokenizer built locally (`awarl model tiny`),
2. the closed passage corpus of the shipped HotpotQA / 2WikiMultiHopQA / MuSiQue dev samples and its
   BM25 index (`awarl data corpus`, `awarl index build`),
3. a supervised protocol warm-up (awarl/training/warmup.py), so the policy emits searches and answers,
4. p_i estimation with K samples per training question (`awarl estimate`),
5. AWA-RL GRPO through TRL with the multi-turn rollout engine (`awarl train`), 40 steps: enough for the
   report to plot the reward's ρ, ρ̂, Ē and P per step from the trainer's own log (demo_dynamics.py),
6. evaluation of the policy before and after RL on held-out questions of the three datasets, scored
   with RA-F1 (`awarl eval`), and a report.

Training and evaluation questions are disjoint: the evaluation questions are the seeded subsample that
`awarl eval --limit` would take; training uses the rest. Every stage skips work already done, so a rerun
after an interruption continues where it stopped.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from awarl.agent.templates import load_template
from awarl.config import AwarlConfig, ConfigError, config_changes, load_config, read_resolved, save_resolved
from awarl.data.corpus import shipped_closed_corpus
from awarl.data.estimates import read_estimates
from awarl.data.loaders import load_shipped
from awarl.data.types import QAExample, example_key
from awarl.io import atomic_write_text, loads_json, repo_root
from awarl.locks import folder_lock
from awarl.lr_schedule import run_refusal_warmup_steps
from awarl.models.tiny import build_tiny_model
from awarl.retrieval import load_index
from awarl.retrieval.types import Retriever
from awarl.stages.compare import compare_runs, write_comparison
from awarl.stages.demo_dynamics import write_dynamics
from awarl.stages.estimate import run_estimate
from awarl.stages.evaluate import run_eval
from awarl.stages.questions import load_eval_set
from awarl.stages.resources import ensure_index
from awarl.stages.train import run_train
from awarl.stages.train_preflight import check_enough_questions
from awarl.training.alarms import report_lines
from awarl.training.checkpoints import newest_complete
from awarl.training.warmup import WARMUP_INFO, read_warmup, warmup_to_dir

log = logging.getLogger(__name__)

DEFAULT_CONFIG = "configs/demo_cpu.yaml"


def default_config_path() -> Path:
    return repo_root() / DEFAULT_CONFIG


class Timer:
    """Seconds per stage. With `out`, the seconds of the run that did each stage's work are kept in
    `out/stage_seconds.json`: a rerun skips finished stages in no time, and its report used to show those
    skips (warm-up 0.0 s) as what the stages cost; `rows` gives the first run's figure and this run's."""

    def __init__(self, out: Path | None = None) -> None:
        self.t0 = time.time()
        self.stages: dict[str, float] = {}
        self.path = None if out is None else out / "stage_seconds.json"
        self.first: dict[str, float] = {}
        if self.path is not None and self.path.is_file():
            try:
                kept = loads_json(self.path.read_text(encoding="utf-8"))
                self.first = {str(k): float(v) for k, v in kept.items()} if isinstance(kept, dict) else {}
            except (ValueError, OSError, TypeError):
                self.first = {}

    def done(self, stage: str, since: float) -> None:
        self.stages[stage] = round(time.time() - since, 1)
        log.info("[demo] %s done in %.1fs (total %.0fs)", stage, self.stages[stage], time.time() - self.t0)
        if self.path is not None and stage not in self.first:
            self.first[stage] = self.stages[stage]
            atomic_write_text(self.path, json.dumps(self.first, indent=2))

    def rows(self) -> list[str]:
        """The report's table rows: the seconds of the run that did the stage, and this rerun's when other."""
        out = []
        for k, v in self.stages.items():
            first = self.first.get(k, v)
            out.append(f"| {k} | {first} |" if first == v else f"| {k} | {first} (this rerun: {v}) |")
        return out


def _say(msg: str) -> None:
    print(msg, flush=True)


def plan_text(cfg: AwarlConfig, out: Path) -> str:
    d, t = cfg.demo, cfg.train
    n_eval = cfg.eval.limit or 0
    return (
        f"awarl demo -> {out}\n"
        f"  1. tiny Qwen2 model ({d.tiny_layers} layers, hidden {d.tiny_hidden}) + BPE tokenizer, built locally\n"
        f"  2. closed corpus of the shipped dev samples + BM25 index\n"
        f"  3. supervised protocol warm-up: {d.warmup_steps} steps\n"
        f"  4. p_i estimate: {d.train_questions} training questions x K={cfg.estimate.k} trajectories\n"
        f"  5. AWA-RL GRPO: {t.max_steps} steps, groups of {t.num_generations}, "
        f"{'abstain line at RA-F1/2' if cfg.reward.abstain_line == 'ra_f1' else f'γ={cfg.reward.gamma}'}"
        f"{_warmup_words(cfg)}; its logged "
        f"ρ, ρ̂, Ē, P per step are plotted beside the simulator's prediction (dynamics.png)\n"
        f"  6. evaluation before and after RL: {n_eval} held-out questions per dataset "
        f"({', '.join(cfg.eval.datasets)})\n"
        f"  expected time: about 5-8 minutes on 2 idle CPU cores; everything is offline.\n")


def _warmup_words(cfg: AwarlConfig) -> str:
    """The refusal warm-up in the plan's words ("" when off)."""
    warm = run_refusal_warmup_steps(cfg)
    share = cfg.reward.warmup_share(cfg.train.scale_rewards)
    return f" (the first {warm} pay plain GRPO's refusal reward: reward.refusal_warmup {share:g})" \
        if warm and cfg.reward.strategy == "awarl" else ""


def split_questions(cfg: AwarlConfig) -> tuple[list, list, list]:
    """(warm-up pool, training questions, evaluation questions). The evaluation questions are the seeded
    `eval.limit` subsample `awarl eval` would take; the pool is every other shipped dev question (the
    warm-up imitates the teacher on all of them) and the training questions are drawn from it."""
    import random

    eval_set = load_eval_set(cfg.data, cfg.eval, cfg.run.seed)
    held_out = {example_key(e.dataset, e.id) for e in eval_set.examples}
    pool = [e for ds in cfg.eval.datasets for e in load_shipped(ds)
            if example_key(e.dataset, e.id) not in held_out]
    train = random.Random(cfg.run.seed).sample(pool, min(cfg.demo.train_questions, len(pool)))
    return pool, train, eval_set.examples


def start_record(cfg: AwarlConfig, out: Path) -> tuple[list, list, list]:
    """Check a demo's settings, then write its resolved_config.yaml. A rerun continues the run in `out` as it
    was made: one under other settings is refused before anything is written (the record was rewritten
    first, so the report named settings the training never used, and a longer run mixed two). A demo's
    dynamics replay reads one log entry per step, its held-out split needs eval.limit, and its training
    questions must fill one generation batch. Returns `split_questions(cfg)`, which that check reads."""
    if cfg.train.logging_steps != 1:
        raise ConfigError(f"train.logging_steps: the demo's dynamics check replays the reward step by step and "
                          f"needs one log entry a step (1), got {cfg.train.logging_steps}")
    if cfg.eval.limit is None:
        raise ConfigError("eval.limit: the demo holds out this many questions per dataset for its evaluations "
                          "and trains on the rest; null would hold out every question")
    # Before the record and the stages before training: found at step 6, a rerun with more questions was
    # refused as a run under other settings.
    split = split_questions(cfg)
    check_enough_questions(len(split[1]), cfg, 1, source="demo.train_questions")
    resolved = read_resolved(out, "whether this rerun continues the demo with its settings")
    if resolved is not None:
        changes = config_changes(resolved[1], cfg.model_dump(mode="json"))
        if changes:
            raise ConfigError(f"{out} holds a demo run made with other settings ({'; '.join(c[:200] for c in changes[:8])}"
                              f"{' ...' if len(changes) > 8 else ''}); a rerun continues that run as it was made: "
                              "rerun it without those changes, or use another --out")
    out.mkdir(parents=True, exist_ok=True)
    save_resolved(cfg, out)
    return split


def run_demo(out_dir: str | Path, config: str | Path | None = None, overrides: list[str] | None = None) -> dict:
    """The whole demo into `out_dir` (one demo at a time in a folder: awarl.locks)."""
    with folder_lock(out_dir, f"demo folder {out_dir}", remedy="or use another --out"):
        return _run_demo(out_dir, config, overrides)


def _run_demo(out_dir: str | Path, config: str | Path | None, overrides: list[str] | None) -> dict:
    from transformers import AutoTokenizer

    # The demo is offline by design: every model it loads is one it built, so never wait on a hub lookup.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(out_dir)
    corpus, index_dir, warm_dir = out / "corpus.jsonl", out / "index", out / "model" / "warmup"
    ov = [f"run.out_dir={out}", f"train.p_estimates={out / 'p_estimates.jsonl'}", f"train.model={warm_dir}",
          f"estimate.model={warm_dir}", f"retrieval.index_dir={index_dir}", f"retrieval.corpus={corpus}"]
    cfg = load_config(config or default_config_path(), ov + list(overrides or []))
    pool, train_qs, eval_qs = start_record(cfg, out)
    _say(plan_text(cfg, out))
    timer = Timer(out)
    init_dir, retriever = _model_and_index(cfg, out, timer)           # 1-2
    _say(f"[demo] {len(train_qs)} training questions, {len(eval_qs)} held-out evaluation questions")
    warm_info = _warmup(cfg, init_dir, warm_dir, pool, retriever, timer)  # 3
    tokenizer = AutoTokenizer.from_pretrained(str(warm_dir))

    # 4. evaluation before RL (the warm-up policy), same questions as after
    t = time.time()
    before = run_eval(cfg, out / "eval_before_rl", model=str(warm_dir), tokenizer=tokenizer, retriever=retriever)
    timer.done("evaluation before RL", t)

    # 5. p_i estimate
    t = time.time()
    estimates_file = run_estimate(cfg, model=str(warm_dir), tokenizer=tokenizer, retriever=retriever,
                                  examples=train_qs)
    timer.done("p_i estimate", t)

    # 6. GRPO with the AWA-RL reward; its final evaluation is the "after RL" result
    t = time.time()
    train_dir = Path(cfg.run.out_dir)
    summary = run_train(cfg, model=None, tokenizer=tokenizer, retriever=retriever, examples=train_qs,
                        resume="latest" if newest_complete(train_dir) else None)
    timer.done("AWA-RL training", t)
    after, comparison = _before_after(cfg, out, train_dir / "eval" / "final" / "results.json")
    # The mechanism as the trainer ran it: its own logged ρ, ρ̂, Ē, P per step, beside the simulator's prediction.
    estimates = read_estimates(estimates_file)
    rows = [estimates[k] for k in (example_key(e.dataset, e.id) for e in train_qs) if k in estimates]
    dynamics = write_dynamics(out, cfg, summary["trainer"].state.log_history, rows)

    report = write_demo_report(out, cfg, before, after, summary, warm_info, timer, comparison, dynamics)
    _say(final_message(out, before, after, timer))
    return {"before": before, "after": after, "train": summary, "report": str(report)}


def _model_and_index(cfg: AwarlConfig, out: Path, timer: Timer) -> tuple[Path, Any]:
    """Steps 1-2: the tiny random-init model and the BM25 index of the shipped closed corpus (kept on rerun)."""
    t = time.time()
    init_dir = out / "model" / "init"
    if not (init_dir / "config.json").exists():
        build_tiny_model(init_dir, seed=cfg.run.seed, vocab_size=cfg.demo.tiny_vocab_size,
                         hidden=cfg.demo.tiny_hidden, layers=cfg.demo.tiny_layers)
    timer.done("tiny model", t)
    t = time.time()
    retriever = closed_corpus_index(cfg, "demo")
    timer.done("corpus + index", t)
    return init_dir, retriever


def closed_corpus_index(cfg: AwarlConfig, command: str) -> Any:
    """The BM25 index of the shipped closed corpus at retrieval.corpus / retrieval.index_dir (both demos set
    them under --out), built on the first run and loaded on a rerun."""
    if not cfg.retrieval.corpus or not cfg.retrieval.index_dir:
        raise ConfigError(f"{command}: retrieval.corpus and retrieval.index_dir must name where the demo's corpus "
                          "and index go (the demo sets both under its output folder)")
    corpus = Path(cfg.retrieval.corpus)
    if not corpus.exists():
        shipped_closed_corpus(corpus)
    return load_index(ensure_index(corpus, "bm25", Path(cfg.retrieval.index_dir)))


def _warmup(cfg: AwarlConfig, init_dir: Path, warm_dir: Path, pool: list[QAExample], retriever: Retriever,
            timer: Timer) -> dict[str, Any]:
    """Step 3: supervised protocol warm-up (a random-init model never emits the tags on its own)."""
    t = time.time()
    warm_info = read_warmup(warm_dir)  # a complete warm-up folder (written atomically, its info last)
    if warm_info is None:
        if warm_dir.is_dir() and any(warm_dir.iterdir()):
            # a save a kill cut short, or an earlier awarl's folder: the warm-up is seeded, so redoing it gives
            # the model the later stages were made with
            log.warning("%s holds no %s (a warm-up cut short, or one by an earlier awarl): warming up again",
                        warm_dir, WARMUP_INFO)
            shutil.rmtree(warm_dir)
        warm_info = warmup_to_dir(init_dir, warm_dir, pool, retriever, load_template(cfg.agent.template),
                                  topk=cfg.retrieval.topk, steps=cfg.demo.warmup_steps,
                                  batch_size=cfg.demo.warmup_batch_size, lr=cfg.demo.warmup_lr, seed=cfg.run.seed,
                                  max_len=cfg.demo.warmup_max_len, abstain_phrase=cfg.agent.abstention_phrases[0])
    timer.done("warm-up", t)
    return warm_info


def _before_after(cfg: AwarlConfig, out: Path, after_path: Path) -> tuple[dict | None, dict | None]:
    """The evaluation after RL and its paired comparison with the one before (same questions), if it ran."""
    after = loads_json(after_path.read_text()) if after_path.exists() else None
    if after is None:
        return None, None
    comparison = compare_runs([out / "eval_before_rl", after_path.parent], cfg, names=["before RL", "after RL"])
    write_comparison(comparison, out / "compare")
    return after, comparison


def _row(name: str, res: dict | None) -> str:
    if not res:
        return f"| {name} | — | — | — | — |"
    m = res["macro"]
    return (f"| {name} | {m['ra_f1']:.3f} | {m['precision']:.3f} | {m['accuracy']:.3f} | "
            f"{m['abstention_rate']:.3f} |")


def reward_line(state: dict) -> str:
    """The reward statistics of the last GRPO step, in words (every step: dynamics.json, tensorboard)."""
    st = state.get("last_stats") or {}
    if not st:
        return "No reward statistics recorded."
    penalty = (f"excess E = {st['E']:+.3f}, smoothed Ē = {st['E_bar']:+.3f}, penalty P(Ē) = {st['penalty']:+.2f}, "
               if "E_bar" in st else "no penalty (baseline strategy), ")
    return (f"Last step: observed refusal rate ρ = {st['rho']:.3f}, expected ρ̂ = {st['rho_hat']:.3f}, "
            f"{penalty}mean refusal reward r_ref = {st['r_ref_mean']:.3f}; outcomes correct {st['share_correct']:.3f}, "
            f"wrong {st['share_wrong']:.3f}, abstain {st['share_abstain']:.3f}, invalid {st['share_invalid']:.3f}; "
            f"mean citation reward {st['r_cite_mean']:+.3f}.")


def paired_line(comparison: dict | None) -> str:
    """The after-minus-before differences with their paired-bootstrap intervals, in words."""
    if not comparison or not comparison["deltas"]:
        return "No paired comparison (the evaluation after RL is missing)."
    d = next(iter(comparison["deltas"].values()))

    def one(metric: str, label: str) -> str:
        ci = d[metric]["ci"]
        return f"{label} {d[metric]['delta']:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")

    return (f"After minus before RL on the same {comparison['common_questions']} questions (paired bootstrap, "
            f"95% intervals; `compare/compare.md`): {one('ra_f1', 'RA-F1')}, {one('precision', 'precision')}, "
            f"{one('accuracy', 'accuracy')}, {one('abstention_rate', 'abstention rate')}. An interval that "
            "contains 0 means the change is within what resampling the questions alone produces.")


def dynamics_section(cfg: AwarlConfig, dynamics: dict | None) -> list[str]:
    """The report's section on the reward mechanism per step (from the trainer's own log)."""
    if not dynamics:
        return []
    r = cfg.reward
    return ["## The AWA-RL mechanism, step by step", "",
            f"Reward: {r.strategy}, γ = {r.gamma:g}, expected_rate = {r.expected_rate}, p_definition = "
            f"{r.p_definition}, ema_start = {r.ema_start}, r_ref_margin = {r.r_ref_margin}, r_ref_floor_margin = "
            f"{r.r_ref_floor_margin}, p_online = {r.p_online} (λ {r.p_prior_weight:g}), refusal_gate = "
            f"{r.refusal_gate} (weight {r.refusal_gate_weight}), refusal_warmup = {r.warmup_text()}, abstain_line = "
            f"{r.abstain_line}"
            f"{' (γ unused)' if r.abstain_line == 'ra_f1' else ''}. Points: the values the "
            f"trainer logged ({dynamics['source']}); line and band: the simulator (`awarl simulate`'s model, "
            f"{dynamics['simulator'].get('seeds', 0)} seeds) on these training questions' own p_i estimates and "
            "this batch shape. The numbers are in `dynamics.json`.", "",
            "![dynamics](dynamics.png)", "", dynamics["words"], ""]


def write_demo_report(out: Path, cfg: AwarlConfig, before: dict, after: dict | None, summary: dict,
                      warm: dict, timer: Timer, comparison: dict | None = None,
                      dynamics: dict | None = None) -> Path:
    rs = summary.get("reward_state", {})
    lines = [
        "# awarl demo report", "",
        "Tiny model, CPU, shipped samples: these numbers show the pipeline working end to end, not the "
        "method's quality (a 1M-parameter model cannot do multi-hop QA). Real runs: see configs/ and README.", "",
        "## Macro metrics on the held-out questions", "",
        "| policy | RA-F1 | precision | accuracy | abstention |", "|---|---|---|---|---|",
        _row("after warm-up (before RL)", before), _row("after AWA-RL GRPO", after), "",
        paired_line(comparison), "",
        "Per dataset: `eval_before_rl/results.md` and `eval/final/results.md` (with 95% bootstrap CIs "
        "and the coverage gaps: questions abstained on, with the searches tried).", "",
        "## Stages", "",
        "| stage | seconds |", "|---|---|", *timer.rows(), "",
        f"Warm-up: {json.dumps(warm)}", "",
        f"GRPO: {summary.get('global_step')} steps. {reward_line(rs)}", "",
        *report_lines(summary.get("alarms") or []),
        *dynamics_section(cfg, dynamics),
        "## Files", "",
        "- `model/init`, `model/warmup`: the tiny model before and after the protocol warm-up",
        "- `corpus.jsonl`, `index/`: closed corpus of the shipped dev samples and its BM25 index",
        "- `p_estimates.jsonl`: p_i per training question (K samples of the warm-up policy)",
        "- `checkpoint-*`, `final/`, `runs/` (tensorboard logs with rho, rho_hat, E, Ē, penalty, r_ref)",
        "- `dynamics.json`, `dynamics.png`: ρ_t, ρ̂_t, Ē_t, P(Ē_t) per step from the trainer's log, and the "
        "simulator's prediction",
        "- `eval_before_rl/`, `eval/final/`: predictions with full trajectories, manifest, results.{json,md,png}",
        "- `compare/`: the paired before/after comparison (`awarl compare`)",
        "- `resolved_config.yaml`: every setting of this run",
    ]
    path = out / "REPORT.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def final_message(out: Path, before: dict, after: dict | None, timer: Timer) -> str:
    total = time.time() - timer.t0
    def fmt(r: dict | None) -> str:
        return "n/a" if not r else (f"RA-F1 {r['macro']['ra_f1']:.3f}, precision {r['macro']['precision']:.3f}, "
                                    f"accuracy {r['macro']['accuracy']:.3f}, abstention {r['macro']['abstention_rate']:.3f}")
    return (f"\nawarl demo finished in {total / 60:.1f} min.\n"
            f"  before RL: {fmt(before)}\n  after RL:  {fmt(after)}\n"
            f"Report: {out / 'REPORT.md'} (what each number means and where every file is).\n"
            f"Plots: {out / 'eval_before_rl' / 'results.png'}, {out / 'eval' / 'final' / 'results.png'}.\n"
            "RA-F1 = 2PA/(P+A): precision P = correct/answered rewards abstaining when unsure, accuracy "
            "A = correct/all rewards answering; a tiny CPU model scores near zero, the pipeline is what is shown.")
