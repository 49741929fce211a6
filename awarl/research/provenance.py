"""What a research report was made with (issue 43: the evidence chain persists the index and model identity):
the index (its kind, corpus hash, size and settings, as `awarl research --regression` records a snapshot),
the executor policy (a local checkpoint's weights hash, a scripted replay's script hash, else the model's
name), the judge (its name, model and the offline judge's settings) and the planner."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from awarl.agent.backends import backend_kind
from awarl.agent.rollout import RolloutEngine
from awarl.choices import JUDGES
from awarl.config import GenerationConfig
from awarl.critic import judge_kind
from awarl.critic.schema import Judge
from awarl.io import canonical_sha256
from awarl.research.planner import Planner
from awarl.research.regression import SNAPSHOT_KEYS, weights_identity
from awarl.retrieval.types import Retriever


def index_identity(retriever: Retriever | None) -> dict[str, Any]:
    """The index's identity from its meta (an in-process index) or a retrieval server's /health."""
    if retriever is None:
        return {}
    meta = getattr(retriever, "meta", None)
    out: dict[str, Any] = {}
    if meta is None and hasattr(retriever, "health"):
        out["server"] = getattr(retriever, "base_url", None)
        try:
            meta = (retriever.health() or {}).get("meta")
        except Exception as e:  # noqa: BLE001 - the report says it could not be read, research goes on
            return {**out, "error": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"}
    if not isinstance(meta, dict):
        return {**out, "kind": type(retriever).__name__}
    meta = meta.get("meta", meta) if isinstance(meta.get("meta"), dict) else meta
    core = {k: meta.get(k) for k in SNAPSHOT_KEYS}
    return {**out, **core, "sha256": canonical_sha256(core)}


@lru_cache(maxsize=8)
def _weights(path: str, mtime: float) -> dict[str, Any]:
    return weights_identity(Path(path))


def executor_identity(engine: RolloutEngine | None, generation: GenerationConfig | None = None, model_ref: str | None = None
                      ) -> dict[str, Any]:
    """The executor policy: a scripted replay's script, a local checkpoint's weights, else the model's name."""
    if generation is not None and backend_kind(generation.backend).replays_script and generation.script:
        from awarl.io import file_sha256

        return {"kind": "scripted", "script_sha256": file_sha256(generation.script)}
    backend = getattr(engine, "backend", None)
    script = getattr(backend, "script", None) or getattr(getattr(backend, "inner", None), "script", None)
    if isinstance(script, dict):
        return {"kind": "scripted", "script_sha256": canonical_sha256(script)}
    if model_ref and Path(model_ref).is_dir():
        return _weights(str(Path(model_ref).resolve()), Path(model_ref).stat().st_mtime)
    model = getattr(backend, "model", None)
    name = model_ref or getattr(model, "name_or_path", None)
    if name and Path(str(name)).is_dir():
        return _weights(str(Path(str(name)).resolve()), Path(str(name)).stat().st_mtime)
    return {"kind": "hub" if name else type(backend).__name__, **({"name": str(name)} if name else {})}


def judge_identity(judge: Judge | None) -> dict[str, Any]:
    if judge is None:
        return {"name": "none"}
    cfg = getattr(judge, "cfg", None)
    out: dict[str, Any] = {"name": getattr(judge, "name", type(judge).__name__)}
    if out["name"] not in JUDGES:  # a judge object of its own (tests, notebooks): its name is all that is known
        return out
    kind = judge_kind(out["name"])
    if kind.endpoint and cfg is not None:
        out.update(model=cfg.model, base_url=cfg.base_url)
    if kind.settings and cfg is not None:
        out["settings"] = {k: getattr(cfg, k) for k in kind.settings}
    if kind.oracle:
        out["oracle"] = True
    return out


def planner_identity(planner: Planner | None) -> dict[str, Any]:
    client = getattr(planner, "client", None)
    if client is not None:
        return {"planner": "openai", "model": client.cfg.model, "base_url": client.base_url}
    return {"planner": "decomposition" if type(planner).__name__ == "DecompositionPlanner" else type(planner).__name__}


def provenance(engine: RolloutEngine | None, judge: Judge | None, planner: Planner | None, generation: GenerationConfig | None = None,
               model_ref: str | None = None) -> dict[str, Any]:
    return {"index": index_identity(getattr(engine, "retriever", None)),
            "executor": executor_identity(engine, generation, model_ref),
            "judge": judge_identity(judge), "planner": planner_identity(planner)}
