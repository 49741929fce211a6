"""Reproducible critic-loop evals (the critic-loop article's last section): fixed tasks, a frozen source
snapshot, expected claim classifications, and a loud failure when a claim once found unsupported is
approved again.

A tasks file is JSON Lines: an optional first line `{"snapshot": {...}}` (the retrieval snapshot the
expectations were recorded against), then one task a line::

    {"id": "t1", "question": "...", "dataset": "musique", "example_id": "2hop__...",   # optional: its plan
     "expected": {"approved": false, "claims": {"Zebra Crossing Borough": "unsupported"}}}

`awarl research --regression TASKS.jsonl --record` writes the expectations of the current run (and the
snapshot); without `--record` the run is checked against them and refused on a different snapshot.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from awarl.io import DataError, iter_jsonl, write_jsonl
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
    """(recorded snapshot or None, tasks); errors name the file and line."""
    snapshot, tasks, seen = None, [], set()
    for n, row in iter_jsonl(path):
        if "snapshot" in row and n == 1:
            snapshot = row["snapshot"]
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
    return {"approved": report.approved, "claims": {c.claim: c.status for c in report.findings}}


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
    return regress + other


def record(path: str | Path, snapshot: dict, tasks: Sequence[dict], reports: Sequence[ResearchReport]) -> None:
    rows = [{"snapshot": snapshot}] + [{**{k: v for k, v in t.items() if k != "expected"},
                                        "expected": expectations(r)} for t, r in zip(tasks, reports, strict=True)]
    write_jsonl(path, rows)


def check_snapshot(recorded: dict | None, current: dict, path: str | Path) -> None:
    if recorded is None:
        raise ValueError(f"{path}: no recorded snapshot; record the expectations first with --record")
    if recorded.get("sha256") != current["sha256"]:
        diff = {k: (recorded.get(k), current.get(k)) for k in SNAPSHOT_KEYS if recorded.get(k) != current.get(k)}
        raise ValueError(f"{path}: recorded against another source snapshot ({diff}); point the run at the same "
                         "index, or re-record with --record")
