"""p_i estimation (SPEC section 4.1): K sampled trajectories per training question with the "standard"
checkpoint, same template and retrieval as training; p_i = share of them that are `correct`.

Output: JSONL, one line per question (docs/training.md)::

    {"qid", "dataset", "question", "k", "correct", "p_i",
     "outcomes": {"correct", "wrong", "abstain", "invalid"}}

Rows are appended and fsync'd after every finished batch, so a killed run loses at most the batch in
flight and a rerun skips the questions already written. Questions are keyed by (dataset, qid): ids are only
unique within a dataset (Search-R1's parquet reuses `train_N` across NQ and HotpotQA).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from awarl.config import AwarlConfig, DataFile, save_resolved
from awarl.data.paths import resolve_data_path
from awarl.data.types import QAExample, example_key
from awarl.io import DataError, append_jsonl, iter_jsonl, pending_batches
from awarl.metrics import Outcome

log = logging.getLogger(__name__)

OUTCOME_KEYS: tuple[str, ...] = tuple(o.value for o in Outcome)


def load_train_examples(cfg: AwarlConfig, files: Sequence[DataFile] | None = None) -> list[QAExample]:
    """The training questions of `data.train`, each file subsampled by its own `limit`.

    Questions are deduplicated by their text (first occurrence wins, with a warning): the TRL rollout
    function only sees the prompt text, so two examples with the same question could not be told apart.
    """
    from awarl.data.loaders import load_examples

    files = list(cfg.data.train if files is None else files)
    if not files:
        raise DataError("no training questions: data.train lists no files")
    out: list[QAExample] = []
    seen: set[str] = set()
    dup = 0
    for f in files:
        res = load_examples(resolve_data_path(f.path), format=f.format, dataset=f.dataset,
                            on_error=cfg.data.on_error, limit=f.limit, seed=cfg.run.seed)
        for ex in res.examples:
            q = ex.question.strip()
            if q in seen:
                dup += 1
                continue
            seen.add(q)
            out.append(ex)
    if dup:
        log.warning("dropped %d training question(s) whose text duplicates an earlier one", dup)
    if not out:
        raise DataError(f"no training questions in {[f.path for f in files]}")
    return out


def default_estimates_path(cfg: AwarlConfig) -> Path:
    return Path(cfg.estimate.out or Path(cfg.run.out_dir) / "p_estimates.jsonl")


def estimates_summary(rows: dict[str, dict]) -> str:
    """One paragraph on an estimate file's p_i: how many questions, their mean, and how many the standard
    checkpoint never / always solves (those are where AWA-RL's refusal reward is largest / smallest)."""
    ps = [float(r["p_i"]) for r in rows.values()]
    if not ps:
        return "no estimates"
    never, always = sum(p == 0 for p in ps), sum(p == 1 for p in ps)
    return (f"{len(ps)} questions, mean p_i {sum(ps) / len(ps):.3f}; never solved (p_i = 0): {never} "
            f"({never / len(ps):.0%}), always solved (p_i = 1): {always} ({always / len(ps):.0%})")


def estimate_row(ex: QAExample, outcomes: Sequence[str]) -> dict[str, Any]:
    """One output line from the K outcomes of a question (pure)."""
    counts = Counter(outcomes)
    unknown = set(counts) - set(OUTCOME_KEYS)
    if unknown:
        raise ValueError(f"unknown outcome(s) {sorted(unknown)}; expected {OUTCOME_KEYS}")
    k = len(outcomes)
    if k == 0:
        raise ValueError(f"question {ex.id!r}: no trajectories to estimate p_i from")
    correct = counts[Outcome.CORRECT.value]
    return {"qid": ex.id, "dataset": ex.dataset, "question": ex.question, "k": k, "correct": correct,
            "p_i": correct / k, "outcomes": {o: counts[o] for o in OUTCOME_KEYS}}


def read_estimates(path: str | os.PathLike) -> dict[str, dict]:
    """Rows of an estimate file keyed by example_key(dataset, qid); a later row for the same question wins.

    A torn last line (a killed writer) is skipped with a warning; any other malformed row is an error that
    names the file and line."""
    path = Path(path)
    if not path.exists():
        return {}
    out: dict[str, dict] = {}
    data = path.read_bytes()
    # Only an unterminated last line can be a torn write; its number as iter_jsonl counts lines:
    torn_line = data.count(b"\n") + 1 if data and not data.endswith(b"\n") else None
    errors: list[str] = []
    for n, row in iter_jsonl(path, on_error="skip", errors=errors):
        missing = [k for k in ("qid", "dataset", "p_i") if k not in row]
        if missing:
            raise DataError(f"{path}:{n}: estimate row lacks {missing}")
        p = row["p_i"]
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
            raise DataError(f"{path}:{n}: p_i must be a number in [0, 1], got {p!r}")
        out[example_key(str(row["dataset"]), str(row["qid"]))] = row
    for e in errors:
        # Only the last line may be torn by a kill; a bad line in the middle is corruption.
        if torn_line is None or not e.startswith(f"{path}:{torn_line}:"):
            raise DataError(e)
        log.warning("ignoring a torn last line (interrupted write): %s", e)
    return out


def join_p(examples: Sequence[QAExample], estimates: dict[str, dict]) -> tuple[list[float | None], int]:
    """p_i per example (None where the estimate file has no row) and how many are missing."""
    ps: list[float | None] = []
    for ex in examples:
        row = estimates.get(example_key(ex.dataset, ex.id))
        ps.append(float(row["p_i"]) if row is not None else None)
    return ps, sum(p is None for p in ps)


def run_estimate(cfg: AwarlConfig, *, model: Any = None, tokenizer: Any = None, retriever: Any = None,
                 engine: Any = None, examples: list[QAExample] | None = None,
                 on_batch: Callable[[int], None] | None = None) -> Path:
    """Estimate p_i for every training question not yet in the output file; returns the file's path.

    `model` defaults to `estimate.model`, else `train.model` (cold start: the instruct model itself).
    Tests and callers that already hold an engine/model can pass them in."""
    from tqdm.auto import tqdm

    from awarl.critic.correctness import close_grader, make_answer_grader
    from awarl.stages.evaluate import grade_trajectories, trajectory_outcome

    out = default_estimates_path(cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_resolved(cfg, out.parent / "estimate")
    examples = examples if examples is not None else load_train_examples(cfg)
    k = cfg.estimate.k
    done = {key for key, row in read_estimates(out).items() if row.get("k") == k}
    todo = [ex for ex in examples if example_key(ex.dataset, ex.id) not in done]
    if len(todo) < len(examples):
        log.info("resuming: %d of %d questions already estimated in %s", len(examples) - len(todo),
                 len(examples), out)
    if not todo:
        return out
    if engine is None:
        engine = _build_engine(cfg, model, tokenizer, retriever)
    # One batch holds whole questions (all K samples of each), so a finished batch is a set of finished rows.
    per_batch = max(1, cfg.generation.batch_size // k)
    bar = tqdm(total=len(examples), initial=len(examples) - len(todo), desc="estimate p_i", unit="q")
    total_correct = n_new = 0
    grader = make_answer_grader(cfg, out.parent / "critic_cache")
    try:
        # Seeded by position in the whole list: a rerun after a kill draws what an uninterrupted run would.
        batches = pending_batches(examples, per_batch, lambda ex: example_key(ex.dataset, ex.id) in done)
        for b, (start, batch) in enumerate(batches):
            questions = [ex.question for ex in batch for _ in range(k)]
            trajs = engine.run(questions, temperature=cfg.estimate.temperature, top_p=cfg.generation.top_p,
                               seed=cfg.run.seed + start)
            if len(trajs) != len(questions):
                raise RuntimeError(f"rollout engine returned {len(trajs)} trajectories for {len(questions)} "
                                   "requests")
            grades = grade_trajectories(grader, questions, trajs, [ex.answers for ex in batch for _ in range(k)],
                                        engine.abstention_phrases)
            rows = []
            for i, ex in enumerate(batch):
                outcomes = [trajectory_outcome(t.parsed, ex.answers, cfg, engine.abstention_phrases, g).value
                            for t, g in zip(trajs[i * k:(i + 1) * k], grades[i * k:(i + 1) * k], strict=True)]
                rows.append(estimate_row(ex, outcomes))
            append_jsonl(out, rows)
            total_correct += sum(r["correct"] for r in rows)
            n_new += len(batch)
            bar.update(len(batch))
            bar.set_postfix(mean_p=f"{total_correct / (k * n_new):.3f}")
            if on_batch:
                on_batch(b)
    finally:
        close_grader(grader)
    bar.close()
    log.info("wrote p_i of %d questions to %s", len(todo), out)
    return out


def _build_engine(cfg: AwarlConfig, model: Any, tokenizer: Any, retriever: Any) -> Any:
    from awarl.retrieval import load_retriever
    from awarl.stages.evaluate import build_engine
    from awarl.stages.resources import ensure_default_retrieval

    model = model if model is not None else (cfg.estimate.model or cfg.train.model)
    if tokenizer is None:
        from awarl.models.loading import load_tokenizer

        ref = model if isinstance(model, str) else model.config._name_or_path
        tokenizer = load_tokenizer(ref, "estimate.model" if cfg.estimate.model else "train.model")
    if retriever is None:
        retriever = load_retriever(ensure_default_retrieval(cfg).retrieval)
    log.info("estimating p_i with %s (k=%d, temperature=%.2f)",
             model if isinstance(model, str) else type(model).__name__, cfg.estimate.k, cfg.estimate.temperature)
    return build_engine(cfg, model, tokenizer, retriever)
