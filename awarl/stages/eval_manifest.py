"""The manifest of an evaluation run and the rules for resuming one.

`manifest.json` records everything that makes an evaluation reproducible (model revision, template hash,
agent limits, sampling, seed, data and index hashes, package versions). A rerun whose model, template,
agent limits, sampling, seed, data or index differ from the recorded ones is refused instead of mixing two
runs' predictions in one report. `awarl estimate` keeps the same record of its rollouts beside its p_i file
(`rollout_settings`, `refuse_mixed_settings`) and refuses the same way.
"""

from __future__ import annotations

import hashlib
import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from awarl.agent.backends import backend_kind
from awarl.agent.templates import load_template
from awarl.config import AwarlConfig
from awarl.critic import judge_kind
from awarl.io import canonical_sha256, file_sha256, loads_json
from awarl.retrieval.types import Retriever
from awarl.rewards.trl_reward import STATE_FILE
from awarl.stages.predictions import PREDICTIONS, critic_label
from awarl.stages.questions import EvalSet
from awarl.training.checkpoints import MARKER as CHECKPOINT_MARKER
from awarl.training.warmup import WARMUP_INFO
from awarl.upstream import transformers as upstream_transformers

MANIFEST = "manifest.json"
# Files awarl writes into a model folder beside the model: records of how and when it was made, not part of it.
# A resume does not compare them: a warm-up folder an earlier awarl wrote without its info file, warmed up
# again with the same seed, is the same model with one more file.
BOOKKEEPING_FILES = frozenset({WARMUP_INFO, CHECKPOINT_MARKER, STATE_FILE})
PACKAGES = ("awarl", "torch", "transformers", "trl", "datasets", "accelerate", "peft", "bm25s", "vllm",
            "sentence-transformers", "faiss-cpu")


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def model_ref(model: Any) -> str:
    """The name a model is known by: the path or hub id it was given as, else its config's name_or_path."""
    return model if isinstance(model, str) else getattr(getattr(model, "config", None), "name_or_path", "model")


def model_identity(model_ref: str, model: Any = None) -> dict[str, Any]:
    """Model name and revision: the hub commit when loaded from the hub, else a hash of the local config
    and tokenizer files (hashing multi-GB weights at every eval would cost minutes; their sizes are kept)."""
    ident: dict[str, Any] = {"name": model_ref}
    commit = upstream_transformers.commit_hash(model, model_ref)
    if commit:
        ident["revision"] = commit
    p = Path(model_ref)
    if p.is_dir():
        small = sorted(f for f in p.iterdir() if f.suffix in {".json", ".txt", ".model", ".jinja"})
        ident["files_sha256"] = {f.name: file_sha256(f) for f in small}
        ident["weights_bytes"] = {f.name: f.stat().st_size for f in sorted(p.iterdir())
                                  if f.suffix in {".safetensors", ".bin"}}
    return ident


def policy_identity(base_model: str, global_step: int) -> dict[str, Any]:
    """The identity of a training run's live policy: the model it was trained from and the optimizer step
    its weights are at. The step is part of the resume fingerprint: the final evaluation of a run extended
    from step 2 to 3 is another policy's, not a continuation of step 2's (kill -9 and resume reproduce the
    weights at a step, so a killed evaluation of step N resumes on the policy it started with)."""
    return {**model_identity(base_model), "global_step": global_step}


def template_sha256(template_ref: str) -> str | None:
    """Hash of the resolved template (prompt text, tags, phrases), so an edited template file is noticed."""
    try:
        return canonical_sha256(load_template(template_ref).model_dump(mode="json"))
    except Exception:  # noqa: BLE001 - the engine reports a bad template itself
        return None


def loop_judge_fields(cfg: AwarlConfig) -> dict[str, Any]:
    """Which judge decided a critic-loop run, and whether it is an oracle (the gold judge reads gold evidence)."""
    j = cfg.research.judge
    kind = judge_kind(j)
    label = kind.label(j, cfg.critic) + (" (oracle)" if kind.oracle else "")
    return {"loop_judge": label, "oracle": kind.oracle}


def rollout_settings(cfg: AwarlConfig, model_ident: dict, retriever_meta: dict | None, temperature: float) -> dict:
    """What decides the trajectories sampled and how they are graded (model, template, agent limits, sampling
    at `temperature`, seed, retrieval, correctness rule), with the package versions: the part of the manifest
    that evaluation and estimation share."""
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": model_ident,
        "template": cfg.agent.template,
        "template_sha256": template_sha256(cfg.agent.template),
        "agent": cfg.agent.model_dump(mode="json"),
        "sampling": {"temperature": temperature, "top_p": cfg.generation.top_p,
                     "backend": cfg.generation.backend, "batch_size": cfg.generation.batch_size,
                     "search_lag_steps": cfg.generation.search_lag_steps, "script": script_record(cfg)},
        "seed": cfg.run.seed,
        "retrieval": {"kind": cfg.retrieval.kind, "topk": cfg.retrieval.topk, "index": retriever_meta},
        "correctness": {"rule": cfg.metrics.correctness, "f1_threshold": cfg.metrics.f1_threshold,
                        "grader": f"openai:{cfg.critic.model}" if cfg.metrics.correctness == "judge" else None},
        "packages": _versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def script_record(cfg: AwarlConfig) -> dict | None:
    """The replay file of the scripted backend (its path and sha256), which decides every answer the way a
    model's weights do; None when a model generates."""
    g = cfg.generation
    if not backend_kind(g.backend).replays_script or not g.script:
        return None
    path = Path(g.script)
    return {"path": str(path), "sha256": file_sha256(path) if path.is_file() else None}


def _script_fingerprint(sampling: dict) -> str | None:
    """What generated: a script (by its hash) or a model ("model"); None for a manifest from before scripts were
    recorded. A model finishing a scripted run, or another script, would mix two runs' answers; the engine a
    model runs on (transformers or vLLM) may change."""
    if "script" not in sampling:
        return None
    script = sampling["script"]
    return "model" if not script else f"script sha256 {script.get('sha256')}"


def data_record(paths: list[str]) -> dict:
    """The manifest's record of one dataset's source files: `path` and `sha256` for one file; for several
    (two data.eval entries with the same dataset) each file under `files` and, under `sha256`, a hash of
    their hashes in order, so that a resume notices an edit to any of them, not only to the first."""
    if len(paths) == 1:
        return {"path": paths[0], "sha256": file_sha256(paths[0])}
    files = [{"path": f, "sha256": file_sha256(f)} for f in paths]
    joined = "\n".join(f["sha256"] for f in files).encode()
    return {"files": files, "sha256": hashlib.sha256(joined).hexdigest()}


def build_manifest(cfg: AwarlConfig, eval_set: EvalSet, model_ident: dict, retriever_meta: dict | None,
                   extra: dict | None = None) -> dict:
    return {
        **rollout_settings(cfg, model_ident, retriever_meta, cfg.eval.temperature),
        "eval_agent": {"kind": cfg.eval.agent,
                       **({"research": cfg.research.model_dump(mode="json"), **loop_judge_fields(cfg)}
                          if cfg.eval.agent == "critic_loop" else {})},
        "data": {ds: data_record(paths) for ds, paths in eval_set.files.items()},
        "questions": len(eval_set.examples),
        "critic": {"judge": critic_label(cfg), "inferred_weight": cfg.reward.inferred_weight,
                   "support_threshold": cfg.critic.support_threshold},
        **(extra or {}),
    }


def _grading(correctness: dict | None) -> str | None:
    if not correctness:
        return None
    return f"judge ({correctness.get('grader')})" if correctness.get("rule") == "judge" else "recomputable"


def _fingerprint(m: dict, exact_grading: bool = False) -> dict[str, Any]:
    """What must not change between a run and its resumption (dotted key -> value; absent keys are None).
    Not included on purpose: the generation backend and batch size (finishing a run on another engine is
    legitimate; a scripted replay is not an engine but the answers themselves, and is included), the question limit and dataset list (only the requested questions are scored), the critic.
    `exact_grading`: the correctness rule and F1 threshold must match too (p_i rows keep only outcome counts,
    which cannot be graded again; predictions keep the answer text, which the scorer re-grades)."""
    model, sampling, retrieval = m.get("model") or {}, m.get("sampling") or {}, m.get("retrieval") or {}
    files = model.get("files_sha256")
    if isinstance(files, dict):
        files = {k: v for k, v in files.items() if k not in BOOKKEEPING_FILES}
    fp = {"model.name": model.get("name"), "model.revision": model.get("revision"),
          "model.files_sha256": files, "model.global_step": model.get("global_step"),
          "template": m.get("template"),
          "template_sha256": m.get("template_sha256"), "agent": m.get("agent"), "seed": m.get("seed"),
          # an older manifest has no eval_agent: it was a single-pass run
          "eval_agent": m.get("eval_agent") or {"kind": "single_pass"},
          "sampling.temperature": sampling.get("temperature"), "sampling.top_p": sampling.get("top_p"),
          "generation.script": _script_fingerprint(sampling),
          "retrieval.kind": retrieval.get("kind"), "retrieval.topk": retrieval.get("topk"),
          "retrieval.index.meta_sha256": (retrieval.get("index") or {}).get("meta_sha256"),
          # An LLM grader's verdicts are stored in the lines and cannot be recomputed; em / f1 / cover_em
          # are recomputed from the answer text by the scorer, so switching among them is fine.
          "correctness": _grading(m.get("correctness"))}
    if exact_grading and m.get("correctness"):
        c = m["correctness"]
        fp["correctness"] = {"rule": c.get("rule"), "grader": c.get("grader"),
                             **({"f1_threshold": c.get("f1_threshold")} if c.get("rule") == "f1" else {})}
    for ds, d in (m.get("data") or {}).items():
        fp[f"data.{ds}.sha256"] = (d or {}).get("sha256")
    return fp


def resume_conflicts(old: dict, new: dict, exact_grading: bool = False) -> list[str]:
    """Settings that differ between the manifest of the predictions on disk and this run. A key missing on
    either side (an older manifest, a server without /health) is not a conflict. `exact_grading` as in
    `_fingerprint`."""
    a, b = _fingerprint(old, exact_grading), _fingerprint(new, exact_grading)
    return [f"{k}: {a[k]!r} -> {b[k]!r}" for k in sorted(set(a) & set(b))
            if a[k] is not None and b[k] is not None and a[k] != b[k]]


def refuse_mixed_settings(manifest_path: Path, rows_path: Path, manifest: dict, *, holder: str, what: str,
                          remedy: str, exact_grading: bool = False) -> None:
    """ValueError naming the differing settings when `rows_path` already holds rows made under settings
    (recorded in `manifest_path`) other than `manifest`'s, or when it holds rows and there is no record to
    check them against (deleted, or an awarl older than the record): what made those rows cannot be told, so
    they are not resumed. Nothing to check without rows. `holder` and `what` name them in the message,
    `remedy` says what to do; `exact_grading` for rows that keep grades, not answers (`_fingerprint`)."""
    if not rows_path.is_file() or rows_path.stat().st_size == 0:
        return
    if not manifest_path.is_file():
        raise ValueError(f"{holder}: holds {what} ({rows_path.name}) but no {manifest_path.name}, the record of the "
                         f"model and settings that made them, so they cannot be checked and are not resumed; "
                         f"{remedy}")
    try:
        old = loads_json(manifest_path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise ValueError(f"{manifest_path}: unreadable manifest ({e}); cannot tell whether {rows_path} was made "
                         f"with the same settings: {remedy}") from None
    conflicts = resume_conflicts(old if isinstance(old, dict) else {}, manifest, exact_grading)
    if conflicts:
        raise ValueError(f"{holder}: holds {what} made with other settings, resuming would mix two runs "
                         f"({'; '.join(c[:300] for c in conflicts)}); {remedy}")


def check_resumable(out_dir: Path, manifest: dict) -> None:
    """Refuse to append to predictions made under different settings (ValueError naming them)."""
    pred_path = out_dir / PREDICTIONS
    refuse_mixed_settings(out_dir / MANIFEST, pred_path, manifest, holder=str(out_dir), what="predictions",
                          remedy=f"use another --out, or delete {pred_path} to start over")


def index_identity(index_dir: str | Path) -> dict:
    """`retriever_identity` of the index in `index_dir`, from its meta file alone (no index loaded)."""
    from awarl.retrieval.index import read_meta

    meta = read_meta(index_dir)
    return {**meta, "meta_sha256": canonical_sha256(meta)}


def retriever_identity(retriever: Retriever) -> dict | None:
    """The index meta (kind, corpus hash, size, settings) of an in-process index, or what a retrieval
    server reports on /health (a Search-R1 server has no /health: then only its URL is known)."""
    meta = getattr(retriever, "meta", None)
    if meta is not None:
        # meta_sha256 identifies the index build (corpus hash, settings, build time) without hashing
        # multi-GB index files.
        return {**dict(meta), "meta_sha256": canonical_sha256(dict(meta))}
    if hasattr(retriever, "health"):
        try:
            health = retriever.health()
        except Exception as e:  # noqa: BLE001 - the manifest must not fail an evaluation
            return {"server": getattr(retriever, "base_url", None), "health_error": str(e)}
        out = {"server": getattr(retriever, "base_url", None), **health}
        if isinstance(health.get("meta"), dict):
            out["meta_sha256"] = canonical_sha256(health["meta"])
        return out
    return None
