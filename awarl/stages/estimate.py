"""p_i estimation (SPEC section 4.1): K sampled trajectories per training question with the "standard"
checkpoint, same template and retrieval as training; p_i = share of them that are `correct`.

The output file (its place, rows and reader) is awarl.data.estimates. Rows are appended and fsync'd after
every finished batch, so a killed run loses at most the batch in flight and a rerun skips the questions
already written. Beside the file, the settings its rows were sampled under (model, template, agent limits,
temperature, top_p, seed, retrieval, correctness rule: awarl.stages.eval_manifest.rollout_settings); a rerun
under other settings is refused, finished or not, instead of handing training one model's p_i as another's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from awarl.agent.backends import backend_kind
from awarl.agent.backends.base import question_seed
from awarl.agent.rollout import RolloutEngine
from awarl.config import AwarlConfig, save_resolved
from awarl.critic import check_endpoints
from awarl.critic.correctness import close_grader, grade_trajectories, make_answer_grader, trajectory_outcome
from awarl.data.estimates import (
    estimate_row,
    estimates_path,
    estimates_record,
    estimates_unfinished,
    read_estimates,
    settings_path,
)
from awarl.data.types import QAExample, example_key
from awarl.io import append_jsonl, atomic_write_json, finish_interrupted_append, pending_batches
from awarl.locks import path_lock
from awarl.models.loading import load_tokenizer
from awarl.retrieval import load_retriever
from awarl.retrieval.types import Retriever
from awarl.stages.eval_manifest import (
    index_identity,
    model_identity,
    model_ref,
    refuse_mixed_settings,
    retriever_identity,
    rollout_settings,
)
from awarl.stages.questions import load_train_examples
from awarl.stages.resources import ensure_default_retrieval

log = logging.getLogger(__name__)


def run_estimate(cfg: AwarlConfig, *, model: Any = None, tokenizer: Any = None, retriever: Retriever | None = None,
                 engine: RolloutEngine | None = None, examples: list[QAExample] | None = None,
                 on_batch: Callable[[int], None] | None = None) -> Path:
    """Estimate p_i for every training question not yet in the output file; returns the file's path.

    `model` defaults to `estimate.model`, else `train.model` (cold start: the instruct model itself).
    Tests and callers that already hold an engine/model can pass them in."""
    out = estimates_path(cfg.estimate.out, cfg.run.out_dir)
    # One writer per p_i file: two estimates started together both passed the settings check (neither had
    # written a row yet) and appended each question twice.
    with path_lock(out, f"p_i estimate {out}", remedy="or set estimate.out to another file",
                   companions=(settings_path(out).name,)):
        return _run_estimate_locked(cfg, out, model=model, tokenizer=tokenizer, retriever=retriever,
                                    engine=engine, examples=examples, on_batch=on_batch)


def _run_estimate_locked(cfg: AwarlConfig, out: Path, *, model: Any, tokenizer: Any, retriever: Retriever | None,
                         engine: RolloutEngine | None, examples: list[QAExample] | None,
                         on_batch: Callable[[int], None] | None) -> Path:
    """`run_estimate` once the p_i file's lock is held."""
    from tqdm.auto import tqdm

    examples = examples if examples is not None else load_train_examples(cfg.data, cfg.run.seed)
    k = cfg.estimate.k
    model = model if model is not None else (cfg.estimate.model or cfg.train.model)
    if retriever is None and engine is None:
        cfg = ensure_default_retrieval(cfg)
    settings = _settings(cfg, model, retriever if retriever is not None else getattr(engine, "retriever", None))
    record = settings_path(out)
    # First: a batch a kill interrupted is completed (its rows were made under the recorded settings), so the
    # check below sees them; a kill during the first append left the rows file empty and the check let a
    # rerun under other settings count them done.
    finish_interrupted_append(out)
    # Checked before the finished-run shortcut too: a rerun with another estimate.model must not be a no-op.
    # The correctness rule exactly: a row keeps only its outcome counts, which no other rule can re-grade.
    refuse_mixed_settings(record, out, settings, holder=str(out), what="p_i estimates",
                          remedy=f"set estimate.out to another file, or delete {out} and {record.name} to estimate "
                                 "again", exact_grading=True)
    save_resolved(cfg, out.parent / "estimate")  # after the check: a refused rerun leaves the record as it was
    done = {key for key, row in read_estimates(out).items() if row.get("k") == k}
    todo = [ex for ex in examples if example_key(ex.dataset, ex.id) not in done]
    if len(todo) < len(examples):
        log.info("resuming: %d of %d questions already estimated in %s", len(examples) - len(todo),
                 len(examples), out)
    if not todo:
        _mark_complete(out)  # a rerun of a finished (or killed at its very end) estimate
        return out
    grader = make_answer_grader(cfg.metrics, cfg.critic, out.parent / "critic_cache")
    check_endpoints(cfg.critic, None, grader)  # a dead grader endpoint fails here, before any model loads
    if engine is None:
        engine = _build_engine(cfg, model, tokenizer, retriever)
    # recorded from the loaded model: a hub checkpoint's revision is known once it is loaded
    # `status` running until every question is in: `awarl train` refuses p_i of an estimate still being
    # written (a cluster launch that did not wait for it) or cut short
    atomic_write_json(record, {**_settings(cfg, model, getattr(engine, "retriever", None),
                                           loaded=getattr(getattr(engine, "backend", None), "model", None)),
                               "status": "running"})
    # One batch holds whole questions (all K samples of each), so a finished batch is a set of finished rows.
    per_batch = max(1, cfg.generation.batch_size // k)
    bar = tqdm(total=len(examples), initial=len(examples) - len(todo), desc="estimate p_i", unit="q")
    total_correct = n_new = 0
    try:
        batches = pending_batches(examples, per_batch, lambda ex: example_key(ex.dataset, ex.id) in done)
        for b, (_, batch) in enumerate(batches):
            questions = [ex.question for ex in batch for _ in range(k)]
            # Each sample from its own seed: a rerun after a kill draws what an uninterrupted run would.
            seeds = [question_seed(cfg.run.seed, ex.dataset, ex.id, j) for ex in batch for j in range(k)]
            trajs = engine.run(questions, temperature=cfg.estimate.temperature, top_p=cfg.generation.top_p,
                               seed=seeds)
            if len(trajs) != len(questions):
                raise RuntimeError(f"rollout engine returned {len(trajs)} trajectories for {len(questions)} "
                                   "requests")
            grades = grade_trajectories(grader, questions, trajs, [ex.gold_answers for ex in batch for _ in range(k)],
                                        engine.abstention_phrases)
            rows = []
            for i, ex in enumerate(batch):
                outcomes = [trajectory_outcome(t.parsed, ex.gold_answers, cfg.metrics, engine.abstention_phrases, g).value
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
    _mark_complete(out)
    log.info("wrote p_i of %d questions to %s", len(todo), out)
    return out


def _mark_complete(out: Path) -> None:
    """Set the settings record's `status` to complete (a record an older awarl wrote has none: left as is)."""
    data = estimates_record(out)
    if estimates_unfinished(data):
        atomic_write_json(settings_path(out), {**data, "status": "complete"})


def estimate_inputs(cfg: AwarlConfig) -> dict[str, Any]:
    """What decides the p_i estimate of `cfg`, read from the config alone (no file touched): the standard
    checkpoint, k, temperature, template and agent limits, top_p, retrieval, the correctness rule (the
    settings `awarl estimate` refuses to mix, as config values) and the training questions (with the seed
    that subsamples them when a file has a `limit`). Not the sampling seed otherwise: a shared estimate is the
    standard checkpoint's p_i, sampled once for runs that differ in their seed; nor the generation backend or
    batch size, which `awarl estimate` lets a run finish on."""
    r = cfg.retrieval
    return {"model": cfg.estimate.model or cfg.train.model, "estimate.k": cfg.estimate.k,
            "estimate.temperature": cfg.estimate.temperature, "agent": cfg.agent.model_dump(mode="json"),
            "generation.top_p": cfg.generation.top_p,
            "retrieval": {"kind": r.kind, "topk": r.topk,
                          **({"server_url": r.server_url} if r.kind == "server" else
                             {"index_dir": r.index_dir, "corpus": r.corpus}),
                          **({"embedding_model": r.embedding_model} if r.kind == "dense" else {})},
            "metrics.correctness": cfg.metrics.correctness, "metrics.f1_threshold": cfg.metrics.f1_threshold,
            **({"generation.script": cfg.generation.script}
               if backend_kind(cfg.generation.backend).replays_script else {}),
            **({"critic.model": cfg.critic.model} if cfg.metrics.correctness == "judge" else {}),
            "data.train": [d.model_dump(mode="json") for d in cfg.data.train], "data.on_error": cfg.data.on_error,
            **({"run.seed": cfg.run.seed} if any(d.limit for d in cfg.data.train) else {})}


def _settings(cfg: AwarlConfig, model: Any, retriever: Retriever | None, loaded: Any = None) -> dict:
    """The rollout settings of this estimate (`rollout_settings`), found without loading the model or the
    index: the model's small files, the index's meta file (or the loaded retriever's); `loaded`: the model
    object once the engine holds it."""
    if retriever is not None:
        index = retriever_identity(retriever)
    elif cfg.retrieval.kind == "server":
        index = {"server": cfg.retrieval.server_url}
    else:  # ensure_default_retrieval has built it, unless the caller brought its own engine
        index = index_identity(cfg.retrieval.index_dir) if cfg.retrieval.index_dir else None
    ident = model_identity(model_ref(model), loaded if loaded is not None else (None if isinstance(model, str) else model))
    return {**rollout_settings(cfg, ident, index, cfg.estimate.temperature), "k": cfg.estimate.k}


def _build_engine(cfg: AwarlConfig, model: Any, tokenizer: Any, retriever: Retriever | None) -> RolloutEngine:
    if tokenizer is None:
        ref = model if isinstance(model, str) else model.config.name_or_path
        tokenizer = load_tokenizer(ref, "estimate.model" if cfg.estimate.model else "train.model")
    if retriever is None:
        retriever = load_retriever(cfg.retrieval)
    log.info("estimating p_i with %s (k=%d, temperature=%.2f)",
             model if isinstance(model, str) else type(model).__name__, cfg.estimate.k, cfg.estimate.temperature)
    return RolloutEngine.from_config(cfg, tokenizer, retriever, model=model)
