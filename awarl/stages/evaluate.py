"""Evaluation stage: run the search agent on evaluation sets, write predictions, score them.

`awarl eval` and the training loop's periodic evaluation both call :func:`run_eval`. It is resumable:
predictions are appended batch by batch (fsync'd), so a rerun skips finished questions and a killed run
loses at most the batch in flight. A manifest records everything that makes the result reproducible.
"""

from __future__ import annotations

import logging
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from awarl.config import AwarlConfig, save_resolved
from awarl.data.types import QAExample
from awarl.io import append_jsonl, atomic_write_json, file_sha256, iter_jsonl
from awarl.metrics import Outcome, classify_outcome

log = logging.getLogger(__name__)

PREDICTIONS = "predictions.jsonl"
MANIFEST = "manifest.json"
PACKAGES = ("awarl", "torch", "transformers", "trl", "datasets", "accelerate", "peft", "bm25s", "vllm",
            "sentence-transformers", "faiss-cpu")


@dataclass
class EvalSet:
    """The questions of one evaluation run, grouped by dataset, with the files they came from."""

    examples: list[QAExample]
    files: dict[str, str] = field(default_factory=dict)  # dataset -> source file


def load_eval_set(cfg: AwarlConfig, datasets: list[str] | None = None, limit: int | None = None) -> EvalSet:
    """`data.eval` files when configured, else the shipped dev samples of `eval.datasets`.

    `limit` applies per dataset, as a seeded subsample, so runs with the same seed see the same questions.
    """
    from awarl.data.loaders import SHIPPED_DEV, load_examples
    from awarl.io import shipped_data_dir

    limit = limit if limit is not None else cfg.eval.limit
    out: list[QAExample] = []
    files: dict[str, str] = {}
    if cfg.data.eval and not datasets:
        for f in cfg.data.eval:
            res = load_examples(f.path, format=f.format, dataset=f.dataset, on_error=cfg.data.on_error,
                                limit=limit or f.limit, seed=cfg.run.seed)
            for msg in res.skipped:
                log.warning("skipped: %s", msg)
            out.extend(res.examples)
            for ex in res.examples:
                files.setdefault(ex.dataset, str(f.path))
        return EvalSet(out, files)
    for ds in datasets or cfg.eval.datasets:
        if ds not in SHIPPED_DEV:
            raise ValueError(f"unknown evaluation dataset {ds!r}; shipped: {', '.join(SHIPPED_DEV)} "
                             "(or list your own files under data.eval)")
        path = shipped_data_dir() / SHIPPED_DEV[ds]
        res = load_examples(path, dataset=ds, limit=limit, seed=cfg.run.seed)
        out.extend(res.examples)
        files[ds] = str(path)
    return EvalSet(out, files)


def trajectory_outcome(parsed: Any, golds: list[str], cfg: AwarlConfig, phrases: list[str]) -> Outcome:
    """The outcome of a parsed trajectory under the run's correctness rule. `phrases`: the engine's
    abstention phrases (template + config), so the outcome and the parser's `abstained` flag agree."""
    return classify_outcome(parsed.answer, golds, valid=parsed.valid, phrases=phrases,
                            correctness=cfg.metrics.correctness, f1_threshold=cfg.metrics.f1_threshold)


def trajectory_record(ex: QAExample, traj: Any, cfg: AwarlConfig, phrases: list[str]) -> dict[str, Any]:
    """One predictions.jsonl line (docs/formats.md) from an example and its trajectory.

    `phrases`: the engine's abstention phrases (see trajectory_outcome)."""
    p = traj.parsed
    outcome = trajectory_outcome(p, ex.answers, cfg, phrases)
    return {
        "id": ex.id,
        "dataset": ex.dataset,
        "question": ex.question,
        "prediction": p.answer,
        "answers": ex.answers,
        "valid": p.valid,
        "outcome": outcome.value,
        "trajectory": {
            "searches": list(p.searches),
            "citations": list(p.citations),
            "invalid_reason": p.invalid_reason,
            "stop_reason": traj.stop_reason,
            "num_turns": p.num_turns,
            "passages": [{k: d.get(k) for k in ("number", "id", "title")} for d in traj.passages],
            "response": traj.response_text,
            "model_tokens": int(sum(traj.env_mask)),
            "env_tokens": int(len(traj.env_mask) - sum(traj.env_mask)),
        },
    }


def read_done(path: Path) -> dict[str, dict]:
    """Finished predictions keyed by (dataset, id); a torn last line from a killed run is ignored."""
    if not path.exists():
        return {}
    errors: list[str] = []
    done = {f"{r['dataset']}/{r['id']}": r for _, r in iter_jsonl(path, on_error="skip", errors=errors)
            if "id" in r and "dataset" in r}
    for e in errors:
        log.warning("ignoring unreadable line (an interrupted write?): %s", e)
    return done


def _versions() -> dict[str, str | None]:
    out = {}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def model_identity(model_ref: str, model: Any = None) -> dict[str, Any]:
    """Model name and revision: the hub commit when loaded from the hub, else a hash of the local config
    and tokenizer files (hashing multi-GB weights at every eval would cost minutes; their sizes are kept)."""
    ident: dict[str, Any] = {"name": model_ref}
    commit = getattr(getattr(model, "config", None), "_commit_hash", None)
    if commit:
        ident["revision"] = commit
    p = Path(model_ref)
    if p.is_dir():
        small = sorted(f for f in p.iterdir() if f.suffix in {".json", ".txt", ".model", ".jinja"})
        ident["files_sha256"] = {f.name: file_sha256(f) for f in small}
        ident["weights_bytes"] = {f.name: f.stat().st_size for f in sorted(p.iterdir())
                                  if f.suffix in {".safetensors", ".bin"}}
    return ident


def write_manifest(out_dir: Path, cfg: AwarlConfig, eval_set: EvalSet, model_ident: dict,
                   retriever_meta: dict | None, extra: dict | None = None) -> dict:
    manifest = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": model_ident,
        "template": cfg.agent.template,
        "agent": cfg.agent.model_dump(mode="json"),
        "sampling": {"temperature": cfg.eval.temperature, "top_p": cfg.generation.top_p,
                     "backend": cfg.generation.backend, "batch_size": cfg.generation.batch_size},
        "seed": cfg.run.seed,
        "data": {ds: {"path": f, "sha256": file_sha256(f)} for ds, f in eval_set.files.items()},
        "questions": len(eval_set.examples),
        "retrieval": {"kind": cfg.retrieval.kind, "topk": cfg.retrieval.topk, "index": retriever_meta},
        "packages": _versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        **(extra or {}),
    }
    atomic_write_json(out_dir / MANIFEST, manifest)
    return manifest


def retriever_identity(retriever: Any) -> dict | None:
    """The index meta (kind, corpus hash, size, settings) of an in-process index, or what a retrieval
    server reports on /health (a Search-R1 server has no /health: then only its URL is known)."""
    meta = getattr(retriever, "meta", None)
    if meta is not None:
        return dict(meta)
    if hasattr(retriever, "health"):
        try:
            return {"server": getattr(retriever, "base_url", None), **retriever.health()}
        except Exception as e:  # noqa: BLE001 - the manifest must not fail an evaluation
            return {"server": getattr(retriever, "base_url", None), "health_error": str(e)}
    return None


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


def generate_predictions(engine: Any, examples: list[QAExample], cfg: AwarlConfig, out_path: Path, *,
                         batch_size: int, temperature: float, seed: int,
                         on_batch: Callable[[int], None] | None = None) -> int:
    """Run the engine over the examples not yet in `out_path`, appending one line per question after
    each batch. Returns how many questions were generated now."""
    from tqdm.auto import tqdm

    done = read_done(out_path)
    todo = [ex for ex in examples if f"{ex.dataset}/{ex.id}" not in done]
    if done:
        log.info("resuming: %d of %d questions already in %s", len(examples) - len(todo), len(examples), out_path)
    stats = LiveStats()
    for r in done.values():
        stats.add(r.get("outcome", ""))
    bar = tqdm(total=len(examples), initial=len(examples) - len(todo), desc="eval", unit="q")
    bar.set_postfix(stats.postfix())
    for start in range(0, len(todo), batch_size):
        batch = todo[start:start + batch_size]
        trajs = engine.run([ex.question for ex in batch], temperature=temperature, seed=seed + start)
        rows = [trajectory_record(ex, t, cfg, engine.abstention_phrases)
                for ex, t in zip(batch, trajs, strict=True)]
        append_jsonl(out_path, rows)
        for r in rows:
            stats.add(r["outcome"])
        bar.update(len(batch))
        bar.set_postfix(stats.postfix())
        if on_batch:
            on_batch(start // batch_size)
    bar.close()
    return len(todo)


def build_engine(cfg: AwarlConfig, model: Any, tokenizer: Any, retriever: Any) -> Any:
    """The rollout engine for a model reference (path/hub id) or an already-loaded model object."""
    from awarl.agent.backends import make_backend
    from awarl.agent.rollout import RolloutEngine
    from awarl.agent.templates import load_template

    backend = make_backend(cfg.generation, model, tokenizer)
    return RolloutEngine(backend, tokenizer, retriever, load_template(cfg.agent.template), cfg.agent,
                         cfg.retrieval.topk)


def run_eval(cfg: AwarlConfig, out_dir: str | Path, *, model: Any = None, tokenizer: Any = None,
             retriever: Any = None, datasets: list[str] | None = None, limit: int | None = None,
             on_batch: Callable[[int], None] | None = None) -> dict:
    """Evaluate `model` (default: cfg.train.model; a path, hub id or loaded model object) and score it.

    Writes DIR/predictions.jsonl, DIR/manifest.json, DIR/resolved_config.yaml, DIR/results.{json,md,png}.
    Returns the results dict of the scorer.
    """
    from awarl.report import write_report
    from awarl.retrieval import load_retriever
    from awarl.stages.score import score_predictions

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_resolved(cfg, out)
    model = model if model is not None else cfg.train.model
    model_ref = model if isinstance(model, str) else getattr(getattr(model, "config", None), "_name_or_path", "model")
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_ref)
    retriever = retriever if retriever is not None else load_retriever(cfg.retrieval)
    eval_set = load_eval_set(cfg, datasets, limit)
    if not eval_set.examples:
        raise ValueError("no evaluation questions: check eval.datasets / data.eval")
    engine = build_engine(cfg, model, tokenizer, retriever)
    retriever_meta = retriever_identity(retriever)
    backend_model = getattr(engine.backend, "model", None)
    write_manifest(out, cfg, eval_set, model_identity(model_ref, backend_model), retriever_meta,
                   {"status": "running"})
    t0 = time.time()
    pred_path = out / PREDICTIONS
    n_new = generate_predictions(engine, eval_set.examples, cfg, pred_path, batch_size=cfg.generation.batch_size,
                                 temperature=cfg.eval.temperature, seed=cfg.run.seed, on_batch=on_batch)
    wanted = {f"{ex.dataset}/{ex.id}" for ex in eval_set.examples}
    rows = [r for k, r in read_done(pred_path).items() if k in wanted]
    results = score_predictions(rows, cfg.metrics, engine.abstention_phrases, seed=cfg.run.seed)
    write_report(results, out)
    write_manifest(out, cfg, eval_set, model_identity(model_ref, backend_model), retriever_meta,
                   {"status": "complete", "generated_now": n_new, "seconds": round(time.time() - t0, 1)})
    return results


def predictions_summary(path: str | Path) -> dict[str, int]:
    """Outcome counts of a predictions file (for logs and tests)."""
    counts: dict[str, int] = {}
    for r in read_done(Path(path)).values():
        counts[r.get("outcome", "?")] = counts.get(r.get("outcome", "?"), 0) + 1
    return counts
