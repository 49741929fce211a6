"""Reproducible critic-loop evals (the critic-loop article's last section): fixed tasks, a frozen source
snapshot, expected claim classifications, and a loud failure when a claim once found unsupported is
approved again.

A tasks file is JSON Lines: an optional first line `{"snapshot": {...}, "recorded_with": {...}}` (the
retrieval snapshot the expectations were recorded against, and the judge, planner and executor policy that
produced them), then one task a line::

    {"id": "t1", "question": "...", "dataset": "musique", "example_id": "2hop__...",   # optional: its plan
     "expected": {"approved": false, "claims": {"Zebra Crossing Borough": "unsupported"},
                  "steps": [{"searches": ["Van Hook Township"], "answer": "Zebra Crossing Borough"}]}}

`steps` (what the executor searched and answered at each step's last attempt) is what catches drift of a
real executor: a changed prompt, template, model or generation setting changes what it does before it
changes any verdict. `awarl research --regression TASKS.jsonl --record` writes the expectations of the
current run (and the header); without `--record` the run is checked against them, and refused on another
source snapshot or with another judge, planner or executor policy than the recorded ones (re-record to
change them on purpose).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from awarl.agent.backends import backend_kind
from awarl.config import AwarlConfig, GenerationConfig
from awarl.io import DataError, file_sha256, iter_jsonl, write_jsonl
from awarl.research.schema import ResearchReport

# The index fields that identify its content (not where or when it was built).
SNAPSHOT_KEYS = ("kind", "corpus_sha256", "passage_count", "settings")


def snapshot_of(index_meta: dict | None) -> dict:
    """The frozen-source identity of a retriever's index meta (an in-process index or a server's /health)."""
    meta = (index_meta or {}).get("meta", index_meta) or {}
    core = {k: meta.get(k) for k in SNAPSHOT_KEYS}
    if not core.get("corpus_sha256"):
        raise ValueError("the retriever does not report its corpus hash (a server without awarl's /health?): "
                         "a regression run needs a frozen, identifiable source snapshot")
    return {**core, "sha256": hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()}


def read_tasks(path: str | Path) -> tuple[dict | None, list[dict]]:
    """(recorded header {snapshot, recorded_with} or None, tasks); errors name the file and line."""
    snapshot, tasks, seen = None, [], set()
    for n, row in iter_jsonl(path):
        if "snapshot" in row and n == 1:
            snapshot = {"snapshot": row["snapshot"], "recorded_with": row.get("recorded_with")}
            continue
        if not isinstance(row.get("question"), str) or not row["question"].strip():
            raise DataError(f"{path}:{n}: a task needs a non-empty `question`")
        tid = str(row.get("id", n))
        if tid in seen:
            raise DataError(f"{path}:{n}: duplicate task id {tid!r}")
        seen.add(tid)
        exp = row.get("expected")
        if exp is not None and (not isinstance(exp, dict) or not isinstance(exp.get("claims", {}), dict)):
            raise DataError(f"{path}:{n}: `expected` must be {{approved, claims: {{claim: status}}}}")
        tasks.append({**row, "id": tid})
    return snapshot, tasks


def expectations(report: ResearchReport) -> dict[str, Any]:
    return {"approved": report.approved, "claims": {c.claim: c.status for c in report.findings},
            "steps": [{"searches": list(s["trace"][-1]["searches"]) if s.get("trace") else [],
                       "answer": s.get("answer")} for s in report.sub_questions]}


def check(task: dict, report: ResearchReport) -> list[str]:
    """What differs from the recorded expectations; REGRESSION lines first (a claim recorded as unsupported
    that the loop now grounds in an approved answer: the hallucination the loop exists to stop)."""
    exp = task.get("expected") or {}
    now = expectations(report)
    regress, other = [], []
    for claim, status in (exp.get("claims") or {}).items():
        got = now["claims"].get(claim)
        if status == "unsupported" and got in ("grounded", "inferred") and report.approved:
            regress.append(f"REGRESSION: {claim!r} was unsupported when recorded and is now {got} in an approved "
                           f"answer ({report.answer!r})")
        elif got != status:
            other.append(f"claim {claim!r}: expected {status}, got {got or 'absent'}")
    if "approved" in exp and exp["approved"] != report.approved:
        other.append(f"approved: expected {exp['approved']}, got {report.approved} (answer {report.answer!r})")
    if "steps" in exp:
        got_steps = now["steps"]
        if len(got_steps) != len(exp["steps"]):
            other.append(f"plan: expected {len(exp['steps'])} step(s), got {len(got_steps)}")
        for k, (want, got) in enumerate(zip(exp["steps"], got_steps, strict=False)):
            for key in ("searches", "answer"):
                if want.get(key) != got.get(key):
                    other.append(f"step {k + 1} {key}: expected {want.get(key)!r}, got {got.get(key)!r} (the "
                                 "executor's behaviour drifted)")
    return regress + other


def record(path: str | Path, snapshot: dict, tasks: Sequence[dict], reports: Sequence[ResearchReport],
           recorded_with: dict | None = None) -> None:
    rows = [{"snapshot": snapshot, **({"recorded_with": recorded_with} if recorded_with else {})}] + [{**{k: v for k, v in t.items() if k != "expected"},
                                        "expected": expectations(r)} for t, r in zip(tasks, reports, strict=True)]
    write_jsonl(path, rows)


def check_snapshot(header: dict | None, current: dict, path: str | Path) -> None:
    if header is None:
        raise ValueError(f"{path}: no recorded snapshot; record the expectations first with --record")
    recorded = header["snapshot"]
    if recorded.get("sha256") != current["sha256"]:
        diff = {k: (recorded.get(k), current.get(k)) for k in SNAPSHOT_KEYS if recorded.get(k) != current.get(k)}
        raise ValueError(f"{path}: recorded against another source snapshot ({diff}); point the run at the same "
                         "index, or re-record with --record")


# What must match for recorded expectations to apply; `settings` are recorded for the reader, not enforced.
RECORDED_KEYS = ("judge", "planner", "policy")


def weights_identity(model_dir: Path, max_bytes: int = 2 << 30) -> dict[str, Any]:
    """A local checkpoint's identity: the sha256 of its weight files (up to `max_bytes` in all; a larger one
    is named by file sizes) and of its tokenizer. Paths are left out: the same weights anywhere are one policy."""
    weights = sorted(f for f in model_dir.iterdir() if f.suffix in (".safetensors", ".bin"))
    ident: dict[str, Any] = {"kind": "model"}
    if sum(f.stat().st_size for f in weights) <= max_bytes:
        h = hashlib.sha256()
        for f in weights:
            h.update(f.name.encode())
            h.update(file_sha256(f).encode())
        ident["weights_sha256"] = h.hexdigest()
    else:
        ident["weights_bytes"] = {f.name: f.stat().st_size for f in weights}
    tok = model_dir / "tokenizer.json"
    if tok.is_file():
        ident["tokenizer_sha256"] = file_sha256(tok)
    return ident


def policy_identity(generation: GenerationConfig, model_ref: str) -> dict[str, Any]:
    """The executor policy: a scripted replay (its script's hash), a local checkpoint (weights hash), or a hub
    id (its name: pin a revision to make it a fixed policy)."""
    if backend_kind(generation.backend).replays_script:
        if not generation.script:
            raise ValueError(f"generation.backend={generation.backend} needs generation.script (a JSONL of scripted turns)")
        return {"kind": "scripted", "script_sha256": file_sha256(generation.script)}
    p = Path(model_ref)
    return weights_identity(p) if p.is_dir() else {"kind": "hub", "name": model_ref}


def recorded_with(cfg: AwarlConfig, model_ref: str) -> dict[str, Any]:
    """What a tasks file records of the run it was recorded with: settings of six sections, so the whole
    (typed) config."""
    r = cfg.research
    return {"judge": r.judge, "planner": r.planner, "policy": policy_identity(cfg.generation, model_ref),
            "settings": {"approve_threshold": r.approve_threshold, "max_iterations": r.max_iterations,
                         "requery_temperature": r.requery_temperature, "requery_draws": r.requery_draws,
                         "eval_temperature": cfg.eval.temperature, "seed": cfg.run.seed,
                         "topk": cfg.retrieval.topk, "max_turns": cfg.agent.max_turns,
                         "template": cfg.agent.template, "generation_backend": cfg.generation.backend}}


def check_recorded_with(header: dict | None, current: dict, path: str | Path) -> list[str]:
    """Refuse a run whose judge, planner or executor policy is not the recorded one (its expectations would
    not apply); return the settings that differ (said in the summary, since they may explain a failure)."""
    recorded = (header or {}).get("recorded_with")
    if not recorded:
        return ["the tasks file does not record its judge and policy (re-record it with --record)"]
    diff = {k: (recorded.get(k), current.get(k)) for k in RECORDED_KEYS if recorded.get(k) != current.get(k)}
    if diff:
        raise ValueError(f"{path}: recorded with another " + ", ".join(diff) + f" ({diff}); run with the recorded "
                         "research.judge / research.planner / executor, or re-record with --record after an "
                         "intended change")
    was, now = recorded.get("settings") or {}, current.get("settings") or {}
    return [f"setting {k}: recorded {was.get(k)!r}, now {now.get(k)!r}" for k in sorted(set(was) | set(now))
            if was.get(k) != now.get(k)]
