"""Evaluation stage: run the search agent on evaluation sets, write predictions, score them.

`awarl eval` and the training loop's periodic evaluation both call :func:`run_eval`, which reads as
load (questions, model, retriever) -> generate (trajectories, grades, citation verdicts, appended per batch)
-> score (the report). It is resumable: predictions are appended batch by batch (fsync'd), so a rerun skips
finished questions and a killed run loses at most the batch in flight; the manifest and the resume rules
live in awarl.stages.eval_manifest, the predictions file in awarl.stages.predictions.

The citation critic (`critic.judge`, SPEC section 5) verifies every answered, valid trajectory against all
the passages it retrieved, in original text, through the same `judge_citations` as the training reward; its
verdict summary is stored on the prediction line and the report averages it per dataset and macro
(awarl.stages.score.critic_summary). Each line also carries the question's gold evidence (titles and
passage ids), from which the report computes citation precision/recall and the evidence-retrieved share
whatever the judge. An OpenAI-compatible judge or grader is checked before any model loads; on a rerun,
lines whose answer grade failed are graded again (`regrade_failed`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from awarl.agent.backends.base import question_seed
from awarl.agent.rollout import RolloutEngine
from awarl.agent.templates import load_template
from awarl.config import AwarlConfig, save_resolved
from awarl.critic import check_endpoints, critic_cache_dir, make_judge
from awarl.critic.correctness import AnswerGrader, close_grader, grade_trajectories, make_answer_grader
from awarl.critic.schema import Judge
from awarl.data.evidence import gold_evidence
from awarl.data.types import QAExample, example_key
from awarl.io import append_jsonl, atomic_write_json, pending_batches
from awarl.locks import folder_lock
from awarl.metrics import Outcome
from awarl.models.loading import load_tokenizer
from awarl.report import write_report
from awarl.research.planner import Planner
from awarl.research.records import critic_loop_rows, make_loop_judge, make_planner, research_summary
from awarl.retrieval import load_retriever
from awarl.retrieval.types import Retriever
from awarl.rewards.citation import CitationItem, judge_citations
from awarl.stages.eval_manifest import (
    MANIFEST,
    build_manifest,
    check_resumable,
    model_identity,
    model_ref,
    retriever_identity,
)
from awarl.stages.predictions import (
    PREDICTIONS,
    REJECTED,
    critic_label,
    drop_failed_verdicts,
    read_done,
    regrade_failed,
    set_aside_bad_lines,
    trajectory_record,
)
from awarl.stages.questions import EvalSet, load_eval_set
from awarl.stages.score import score_predictions

log = logging.getLogger(__name__)


class LiveStats:
    """Running accuracy and abstention rate for the progress bar."""

    def __init__(self) -> None:
        self.n = self.correct = self.abstain = 0

    def add(self, outcome: str) -> None:
        self.n += 1
        self.correct += outcome == Outcome.CORRECT.value
        self.abstain += outcome == Outcome.ABSTAIN.value

    def postfix(self) -> dict[str, str]:
        n = max(self.n, 1)
        return {"acc": f"{self.correct / n:.3f}", "abstain": f"{self.abstain / n:.3f}"}


def single_pass_rows(engine: RolloutEngine, judge: Judge | None, grader: AnswerGrader | None, batch: list[QAExample], cfg: AwarlConfig, *,
                     temperature: float, top_p: float, seed: int) -> list[dict[str, Any]]:
    """One trajectory per question, sampled from the question's own seed (`question_seed`: a resumed question
    gets the answer of an uninterrupted run); its line with the grader's verdict and the critic's summary."""
    seeds = [question_seed(seed, ex.dataset, ex.id) for ex in batch]
    trajs = engine.run([ex.question for ex in batch], temperature=temperature, top_p=top_p, seed=seeds)
    grades = grade_trajectories(grader, [ex.question for ex in batch], trajs, [ex.gold_answers for ex in batch],
                                engine.abstention_phrases)
    rows = [trajectory_record(ex, t, cfg, engine.abstention_phrases, g)
            for ex, t, g in zip(batch, trajs, grades, strict=True)]
    verdicts = judge_citations(judge, [CitationItem(ex.question, t.parsed.answer, t.parsed.citations,
                                                    t.passages, r["outcome"], gold_evidence(ex))
                                       for ex, t, r in zip(batch, trajs, rows, strict=True)],
                               cfg.reward.inferred_weight)
    for r, v in zip(rows, verdicts, strict=True):
        r["critic"] = None if v is None else v.summary(critic_label(cfg))
    return rows


def generate_predictions(engine: RolloutEngine, examples: list[QAExample], cfg: AwarlConfig, out_path: Path, *,
                         batch_size: int, temperature: float, seed: int, top_p: float = 1.0,
                         judge: Judge | None = None, grader: AnswerGrader | None = None,
                         on_batch: Callable[[int], None] | None = None, planner: Planner | None = None,
                         loop_judge: Judge | None = None) -> int:
    """Run the agent (`eval.agent`: one trajectory per question, or the critic loop) over the examples not yet
    in `out_path`, appending one line per question after each batch (with the critic's verdict summary when
    `judge` is given, and the answer grader's verdict under `metrics.correctness: judge`). Returns how many
    questions were generated now."""
    from tqdm.auto import tqdm

    phrases = engine.abstention_phrases
    set_aside_bad_lines(out_path, cfg.metrics.correctness, phrases)  # also completes a batch a kill interrupted
    done = read_done(out_path, cfg.metrics.correctness, phrases)
    # The same question listed twice (two data.eval files) is generated once.
    unique = list({example_key(ex.dataset, ex.id): ex for ex in examples}.values())
    n_todo = sum(example_key(ex.dataset, ex.id) not in done for ex in unique)
    if done:
        log.info("resuming: %d of %d questions already in %s", len(unique) - n_todo, len(unique), out_path)
    stats = LiveStats()
    for r in done.values():
        stats.add(r.get("outcome", ""))
    bar = tqdm(total=len(unique), initial=len(unique) - n_todo, desc="eval", unit="q")
    bar.set_postfix(stats.postfix())
    if cfg.eval.agent == "critic_loop" and loop_judge is None:
        loop_judge = make_loop_judge(cfg, reuse=judge)
    # Both agents seed each question by itself (question_seed), never by its batch: a resumed question, sampled
    # in a smaller batch, draws what it would have in an uninterrupted run.
    for start, batch in pending_batches(unique, batch_size, lambda ex: example_key(ex.dataset, ex.id) in done):
        if cfg.eval.agent == "critic_loop":
            planner = planner if planner is not None else make_planner(cfg)
            rows = critic_loop_rows(engine, judge, grader, batch, cfg, temperature=temperature, top_p=top_p,
                                    seed=seed, label=critic_label(cfg),
                                    planner=planner, loop_judge=loop_judge)
        else:
            rows = single_pass_rows(engine, judge, grader, batch, cfg, temperature=temperature, top_p=top_p,
                                    seed=seed)
        append_jsonl(out_path, rows)
        for r in rows:
            stats.add(r["outcome"])
        bar.update(len(batch))
        bar.set_postfix(stats.postfix())
        if on_batch:
            on_batch(start // batch_size)
    bar.close()
    return n_todo


def run_eval(cfg: AwarlConfig, out_dir: str | Path, *, model: Any = None, tokenizer: Any = None,
             retriever: Retriever | None = None, datasets: list[str] | None = None, limit: int | None = None,
             on_batch: Callable[[int], None] | None = None, model_ident: dict | None = None) -> dict:
    """Evaluate `model` (default: cfg.train.model; a path, hub id or loaded model object) and score it.

    `model_ident` names the model in the manifest (and so in the resume check) when its name and files do
    not say which weights these are: training passes its live policy's (`policy_identity`).

    Writes DIR/predictions.jsonl, DIR/manifest.json, DIR/resolved_config.yaml, DIR/results.{json,md,png}.
    Returns the results dict of the scorer.
    """
    out = Path(out_dir)
    load_template(cfg.agent.template)  # a bad template fails here, before any model loads
    eval_set = load_eval_set(cfg.data, cfg.eval, cfg.run.seed, datasets, limit)
    if not eval_set.examples:
        raise ValueError("no evaluation questions: check eval.datasets / data.eval")
    # One writer per folder: a second evaluation into it (started before this one appended anything, so the
    # settings check below could not tell) would interleave two models' lines in one file.
    with folder_lock(out, f"evaluation folder {out}", remedy="or use another --out"):
        return _run_eval_locked(cfg, out, eval_set, model=model, tokenizer=tokenizer, retriever=retriever,
                                on_batch=on_batch, model_ident=model_ident)


def _run_eval_locked(cfg: AwarlConfig, out: Path, eval_set: EvalSet, *, model: Any, tokenizer: Any,
                     retriever: Retriever | None, on_batch: Callable[[int], None] | None, model_ident: dict | None) -> dict:
    """`run_eval` once the folder's lock is held."""
    judge = make_judge(cfg.critic, critic_cache_dir(cfg.critic, out))
    grader = make_answer_grader(cfg.metrics, cfg.critic, out / "critic_cache")
    pred_path = out / PREDICTIONS
    loop, loop_judge = cfg.eval.agent == "critic_loop", None
    try:
        check_endpoints(cfg.critic, judge, grader)  # a dead judge endpoint fails here, before any model loads
        planner = make_planner(cfg, out / "critic_cache", check=True) if loop else None
        if loop:  # the loop's own judge (research.judge), checked before any model loads too
            loop_judge = make_loop_judge(cfg, critic_cache_dir(cfg.critic, out), check=True, reuse=judge)
        model = model if model is not None else cfg.train.model
        ref = model_ref(model)
        if tokenizer is None:
            tokenizer = load_tokenizer(ref, "--model / train.model")
        retriever = retriever if retriever is not None else load_retriever(cfg.retrieval)
        engine = RolloutEngine.from_config(cfg, tokenizer, retriever, model=model)
        ident = model_ident if model_ident is not None else \
            model_identity(ref, getattr(engine.backend, "model", None))
        manifest = build_manifest(cfg, eval_set, ident,
                                  retriever_identity(retriever), {"status": "running"})
        check_resumable(out, manifest)
        # Only now: a refused resume must leave the folder's record of its settings as the run made it (and a
        # bad --model / --datasets / --template leaves no empty --out folder behind: folder_lock removes the
        # folder it made when nothing was written)
        save_resolved(cfg, out)
        atomic_write_json(out / MANIFEST, manifest)
        set_aside = set_aside_bad_lines(pred_path, cfg.metrics.correctness, engine.abstention_phrases)
        rejudged = drop_failed_verdicts(pred_path) if judge is not None else 0
        regrade_failed(pred_path, grader, cfg, engine.abstention_phrases)
        t0 = time.time()
        n_new = generate_predictions(engine, eval_set.examples, cfg, pred_path,
                                     batch_size=cfg.generation.batch_size, temperature=cfg.eval.temperature,
                                     top_p=cfg.generation.top_p, seed=cfg.run.seed, judge=judge, grader=grader,
                                     on_batch=on_batch, planner=planner, loop_judge=loop_judge)
    finally:
        if (usage := getattr(judge, "usage", None)) is not None:
            log.info("citation judge: %s", usage())
        if (close := getattr(judge, "close", None)) is not None:
            close()
        if loop_judge is not None and loop_judge is not judge and hasattr(loop_judge, "close"):
            loop_judge.close()
        close_grader(grader, flagged_in=str(pred_path))
    wanted = {example_key(ex.dataset, ex.id) for ex in eval_set.examples}
    rows = [r for k, r in read_done(pred_path, cfg.metrics.correctness, engine.abstention_phrases).items()
            if k in wanted]
    results = score_predictions(rows, cfg.metrics, engine.abstention_phrases, seed=cfg.run.seed)
    if (research := research_summary(rows)) is not None:
        results["research"] = research
    write_report(results, out)
    manifest.update(status="complete", generated_now=n_new, seconds=round(time.time() - t0, 1))
    if set_aside:  # what the resume found wrong, and where the lines went
        manifest["lines_set_aside"] = {"count": len(set_aside), "file": REJECTED, "first": set_aside[0]}
    if rejudged:
        manifest["verdicts_retried"] = rejudged
    atomic_write_json(out / MANIFEST, manifest)
    return results
