"""Evaluation stage: run the search agent on evaluation sets, write predictions, score them.

`awarl eval` and the training loop's periodic evaluation both call :func:`run_eval`. It is resumable:
predictions are appended batch by batch (fsync'd), so a rerun skips finished questions and a killed run
loses at most the batch in flight. A manifest records everything that makes the result reproducible, and a
rerun whose model, template, agent limits, sampling, seed, data or index differ from the recorded ones is
refused instead of mixing two runs' predictions in one report.

The citation critic (`critic.judge`, SPEC section 5) verifies every answered, valid trajectory against all
the passages it retrieved, in original text; its verdict summary is stored on the prediction line and the
report averages it per dataset and macro (awarl.stages.score.critic_summary).
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from awarl.config import AwarlConfig, save_resolved
from awarl.critic.correctness import Grade, close_grader, grade_answers, make_answer_grader
from awarl.data.types import QAExample, example_key
from awarl.io import append_jsonl, atomic_write_json, file_sha256, pending_batches
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
    from awarl.data.paths import resolve_data_path
    from awarl.io import shipped_data_dir

    limit = limit if limit is not None else cfg.eval.limit
    out: list[QAExample] = []
    files: dict[str, str] = {}
    if cfg.data.eval and not datasets:
        for f in cfg.data.eval:
            path = resolve_data_path(f.path)  # hf://datasets/... files come from the Hub cache
            res = load_examples(path, format=f.format, dataset=f.dataset, on_error=cfg.data.on_error,
                                limit=limit or f.limit, seed=cfg.run.seed)
            for msg in res.skipped:
                log.warning("skipped: %s", msg)
            out.extend(res.examples)
            for ex in res.examples:
                files.setdefault(ex.dataset, str(path))
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


def trajectory_outcome(parsed: Any, golds: list[str], cfg: AwarlConfig, phrases: list[str],
                       grade: Grade | None = None) -> Outcome:
    """The outcome of a parsed trajectory under the run's correctness rule. `phrases`: the engine's
    abstention phrases (template + config), so the outcome and the parser's `abstained` flag agree.
    `grade`: the LLM grader's verdict (`metrics.correctness: judge`, see awarl.critic.correctness)."""
    return classify_outcome(parsed.answer, golds, valid=parsed.valid, phrases=phrases,
                            correctness=cfg.metrics.correctness, f1_threshold=cfg.metrics.f1_threshold,
                            judge_correct=grade.correct if grade else None)


def grade_trajectories(grader: Any, questions: list[str], trajs: list[Any], golds: list[list[str]],
                       phrases: list[str]) -> list[Grade]:
    """The grader's verdicts for a batch of trajectories (all `Grade(None)` without a grader)."""
    return grade_answers(grader, [(q, t.parsed.answer, t.parsed.valid, g)
                                  for q, t, g in zip(questions, trajs, golds, strict=True)], phrases)


def trajectory_record(ex: QAExample, traj: Any, cfg: AwarlConfig, phrases: list[str],
                      grade: Grade | None = None) -> dict[str, Any]:
    """One predictions.jsonl line (docs/formats.md) from an example and its trajectory.

    `phrases`: the engine's abstention phrases, `grade`: the LLM grader's verdict (see trajectory_outcome)."""
    p = traj.parsed
    outcome = trajectory_outcome(p, ex.answers, cfg, phrases, grade)
    graded = {} if grade is None or grade.correct is None else \
        {"judge_correct": grade.correct, **({"judge_failed": True} if grade.failed else {})}
    return {
        "id": ex.id,
        "dataset": ex.dataset,
        "question": ex.question,
        "prediction": p.answer,
        "answers": ex.answers,
        "valid": p.valid,
        "outcome": outcome.value,
        **graded,
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


def critic_label(cfg: AwarlConfig) -> str:
    """The judge named on each verdict: `lexical`, or `openai:<model>`."""
    return f"openai:{cfg.critic.model}" if cfg.critic.judge == "openai" else cfg.critic.judge


def judge_trajectories(judge: Any, items: list[tuple[str, Any, str]], inferred_weight: float,
                       label: str) -> list[dict | None]:
    """Verdict summaries for (question, trajectory, outcome) triples: None where the outcome is not an
    answered, valid one (correct or wrong) or there is no judge, `{"judge", "failed": true, "error"}` where the judge failed, else `{"judge",
    "coverage", "redundancy", "reward", "groundedness", "claims", "flags"}` (awarl.rewards.citation)."""
    from awarl.rewards.citation import build_critic_input, citation_reward, passages_from_rollout

    out: list[dict | None] = [None] * len(items)
    if judge is None:
        return out
    idx, inputs, refs = [], [], []
    for j, (question, traj, outcome) in enumerate(items):
        # SPEC section 4 step 10: only answered, valid trajectories are judged (same rule as training).
        if outcome not in (Outcome.CORRECT.value, Outcome.WRONG.value):
            continue
        p = traj.parsed
        try:
            refs_j = passages_from_rollout(traj.passages, where="trajectory passages")
        except ValueError as e:
            out[j] = {"judge": label, "failed": True, "error": str(e)}
            continue
        inputs.append(build_critic_input(question, p.answer, p.citations, refs_j))
        refs.append(refs_j)
        idx.append(j)
    if not inputs:
        return out
    try:
        verdicts = list(judge.verify(inputs))
        if len(verdicts) != len(inputs):
            raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(inputs)} answers")
    except Exception as e:  # noqa: BLE001 - a judge must never fail an evaluation; failures are counted
        log.warning("citation judge failed on a batch of %d answers: %s", len(inputs), e)
        for j in idx:
            out[j] = {"judge": label, "failed": True, "error": str(e)[:500]}
        return out
    for j, v, refs_j in zip(idx, verdicts, refs, strict=True):
        if v is None:
            out[j] = {"judge": label, "failed": True, "error": "no valid verdict"}
            continue
        score = citation_reward(v, items[j][1].parsed.citations, refs_j, inferred_weight)
        out[j] = {"judge": label, "coverage": score.coverage, "redundancy": score.redundancy,
                  "reward": score.reward, "groundedness": float(v.overall_groundedness),
                  "claims": len(v.verified_claims), "flags": list(v.flags)}
    return out


def read_done(path: Path) -> dict[str, dict]:
    """Finished predictions keyed by (dataset, id); a torn last line from a killed run is ignored."""
    from awarl.io import iter_jsonl

    if not path.exists():
        return {}
    errors: list[str] = []
    done = {example_key(str(r["dataset"]), str(r["id"])): r
            for _, r in iter_jsonl(path, on_error="skip", errors=errors) if "id" in r and "dataset" in r}
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


def _canonical_sha256(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def template_sha256(template_ref: str) -> str | None:
    """Hash of the resolved template (prompt text, tags, phrases), so an edited template file is noticed."""
    from awarl.agent.templates import load_template

    try:
        return _canonical_sha256(load_template(template_ref).model_dump(mode="json"))
    except Exception:  # noqa: BLE001 - the engine reports a bad template itself
        return None


def build_manifest(cfg: AwarlConfig, eval_set: EvalSet, model_ident: dict, retriever_meta: dict | None,
                   extra: dict | None = None) -> dict:
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": model_ident,
        "template": cfg.agent.template,
        "template_sha256": template_sha256(cfg.agent.template),
        "agent": cfg.agent.model_dump(mode="json"),
        "sampling": {"temperature": cfg.eval.temperature, "top_p": cfg.generation.top_p,
                     "backend": cfg.generation.backend, "batch_size": cfg.generation.batch_size},
        "seed": cfg.run.seed,
        "data": {ds: {"path": f, "sha256": file_sha256(f)} for ds, f in eval_set.files.items()},
        "questions": len(eval_set.examples),
        "retrieval": {"kind": cfg.retrieval.kind, "topk": cfg.retrieval.topk, "index": retriever_meta},
        "critic": {"judge": critic_label(cfg), "inferred_weight": cfg.reward.inferred_weight,
                   "support_threshold": cfg.critic.support_threshold},
        "correctness": {"rule": cfg.metrics.correctness, "f1_threshold": cfg.metrics.f1_threshold,
                        "grader": f"openai:{cfg.critic.model}" if cfg.metrics.correctness == "judge" else None},
        "packages": _versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        **(extra or {}),
    }


def _grading(correctness: dict | None) -> str | None:
    if not correctness:
        return None
    return f"judge ({correctness.get('grader')})" if correctness.get("rule") == "judge" else "recomputable"


def _fingerprint(m: dict) -> dict[str, Any]:
    """What must not change between a run and its resumption (dotted key -> value; absent keys are None).
    Not included on purpose: the generation backend and batch size (finishing a run on another engine is
    legitimate), the question limit and dataset list (only the requested questions are scored), the critic."""
    model, sampling, retrieval = m.get("model") or {}, m.get("sampling") or {}, m.get("retrieval") or {}
    fp = {"model.name": model.get("name"), "model.revision": model.get("revision"),
          "model.files_sha256": model.get("files_sha256"), "template": m.get("template"),
          "template_sha256": m.get("template_sha256"), "agent": m.get("agent"), "seed": m.get("seed"),
          "sampling.temperature": sampling.get("temperature"), "sampling.top_p": sampling.get("top_p"),
          "retrieval.kind": retrieval.get("kind"), "retrieval.topk": retrieval.get("topk"),
          "retrieval.index.meta_sha256": (retrieval.get("index") or {}).get("meta_sha256"),
          # An LLM grader's verdicts are stored in the lines and cannot be recomputed; em / f1 / cover_em
          # are recomputed from the answer text by the scorer, so switching among them is fine.
          "correctness": _grading(m.get("correctness"))}
    for ds, d in (m.get("data") or {}).items():
        fp[f"data.{ds}.sha256"] = (d or {}).get("sha256")
    return fp


def resume_conflicts(old: dict, new: dict) -> list[str]:
    """Settings that differ between the manifest of the predictions on disk and this run. A key missing on
    either side (an older manifest, a server without /health) is not a conflict."""
    a, b = _fingerprint(old), _fingerprint(new)
    return [f"{k}: {a[k]!r} -> {b[k]!r}" for k in sorted(set(a) & set(b))
            if a[k] is not None and b[k] is not None and a[k] != b[k]]


def check_resumable(out_dir: Path, manifest: dict) -> None:
    """Refuse to append to predictions made under different settings (ValueError naming them)."""
    old_path, pred_path = out_dir / MANIFEST, out_dir / PREDICTIONS
    if not old_path.is_file() or not pred_path.is_file() or pred_path.stat().st_size == 0:
        return
    try:
        old = json.loads(old_path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise ValueError(f"{old_path}: unreadable manifest ({e}); cannot tell whether {pred_path} was made "
                         "with the same settings: use another --out or delete the folder") from None
    conflicts = resume_conflicts(old if isinstance(old, dict) else {}, manifest)
    if conflicts:
        raise ValueError(f"{out_dir}: holds predictions made with other settings, resuming would mix two runs "
                         f"({'; '.join(c[:300] for c in conflicts)}); use another --out or delete "
                         f"{pred_path}")


def retriever_identity(retriever: Any) -> dict | None:
    """The index meta (kind, corpus hash, size, settings) of an in-process index, or what a retrieval
    server reports on /health (a Search-R1 server has no /health: then only its URL is known)."""
    meta = getattr(retriever, "meta", None)
    if meta is not None:
        # meta_sha256 identifies the index build (corpus hash, settings, build time) without hashing
        # multi-GB index files.
        return {**dict(meta), "meta_sha256": _canonical_sha256(dict(meta))}
    if hasattr(retriever, "health"):
        try:
            health = retriever.health()
        except Exception as e:  # noqa: BLE001 - the manifest must not fail an evaluation
            return {"server": getattr(retriever, "base_url", None), "health_error": str(e)}
        out = {"server": getattr(retriever, "base_url", None), **health}
        if isinstance(health.get("meta"), dict):
            out["meta_sha256"] = _canonical_sha256(health["meta"])
        return out
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
                         batch_size: int, temperature: float, seed: int, top_p: float = 1.0,
                         judge: Any = None, grader: Any = None,
                         on_batch: Callable[[int], None] | None = None) -> int:
    """Run the engine over the examples not yet in `out_path`, appending one line per question after
    each batch (with the critic's verdict summary when `judge` is given, and the answer grader's verdict
    under `metrics.correctness: judge`). Returns how many questions were generated now."""
    from tqdm.auto import tqdm

    done = read_done(out_path)
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
    # Seeded by position in the whole list: a rerun after a kill draws what an uninterrupted run would.
    for start, batch in pending_batches(unique, batch_size, lambda ex: example_key(ex.dataset, ex.id) in done):
        trajs = engine.run([ex.question for ex in batch], temperature=temperature, top_p=top_p,
                           seed=seed + start)
        grades = grade_trajectories(grader, [ex.question for ex in batch], trajs, [ex.answers for ex in batch],
                                    engine.abstention_phrases)
        rows = [trajectory_record(ex, t, cfg, engine.abstention_phrases, g)
                for ex, t, g in zip(batch, trajs, grades, strict=True)]
        verdicts = judge_trajectories(judge, [(ex.question, t, r["outcome"])
                                              for ex, t, r in zip(batch, trajs, rows, strict=True)],
                                      cfg.reward.inferred_weight, critic_label(cfg))
        for r, v in zip(rows, verdicts, strict=True):
            r["critic"] = v
        append_jsonl(out_path, rows)
        for r in rows:
            stats.add(r["outcome"])
        bar.update(len(batch))
        bar.set_postfix(stats.postfix())
        if on_batch:
            on_batch(start // batch_size)
    bar.close()
    return n_todo


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
    from awarl.critic import make_judge
    from awarl.report import write_report
    from awarl.retrieval import load_retriever
    from awarl.stages.score import score_predictions

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_resolved(cfg, out)
    model = model if model is not None else cfg.train.model
    model_ref = model if isinstance(model, str) else getattr(getattr(model, "config", None), "_name_or_path", "model")
    if tokenizer is None:
        from awarl.models.loading import load_tokenizer

        tokenizer = load_tokenizer(model_ref, "--model / train.model")
    retriever = retriever if retriever is not None else load_retriever(cfg.retrieval)
    eval_set = load_eval_set(cfg, datasets, limit)
    if not eval_set.examples:
        raise ValueError("no evaluation questions: check eval.datasets / data.eval")
    engine = build_engine(cfg, model, tokenizer, retriever)
    manifest = build_manifest(cfg, eval_set, model_identity(model_ref, getattr(engine.backend, "model", None)),
                              retriever_identity(retriever), {"status": "running"})
    check_resumable(out, manifest)
    atomic_write_json(out / MANIFEST, manifest)
    judge = make_judge(cfg.critic, cfg.critic.cache_dir or out / "critic_cache")
    grader = make_answer_grader(cfg, out / "critic_cache")
    t0 = time.time()
    pred_path = out / PREDICTIONS
    try:
        n_new = generate_predictions(engine, eval_set.examples, cfg, pred_path,
                                     batch_size=cfg.generation.batch_size, temperature=cfg.eval.temperature,
                                     top_p=cfg.generation.top_p, seed=cfg.run.seed, judge=judge, grader=grader,
                                     on_batch=on_batch)
    finally:
        if hasattr(judge, "close"):
            judge.close()
        close_grader(grader, flagged_in=str(pred_path))
    wanted = {example_key(ex.dataset, ex.id) for ex in eval_set.examples}
    rows = [r for k, r in read_done(pred_path).items() if k in wanted]
    results = score_predictions(rows, cfg.metrics, engine.abstention_phrases, seed=cfg.run.seed)
    write_report(results, out)
    manifest.update(status="complete", generated_now=n_new, seconds=round(time.time() - t0, 1))
    atomic_write_json(out / MANIFEST, manifest)
    return results
