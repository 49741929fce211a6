"""The p_i estimate file (SPEC section 4.1): where it is, its rows, reading, joining, and a summary.

`awarl estimate` writes it and `awarl train` reads it; both go through this module, so they can never
disagree on the file's place or format. One JSON line per question (docs/training.md)::

    {"qid", "dataset", "question", "k", "correct", "p_i",
     "outcomes": {"correct", "wrong", "abstain", "invalid"}}

Questions are keyed by (dataset, qid): ids are only unique within a dataset (Search-R1's parquet reuses
`train_N` across NQ and HotpotQA).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from awarl.data.types import QAExample, example_key
from awarl.io import DataError, iter_jsonl
from awarl.metrics import Outcome

log = logging.getLogger(__name__)

FILE_NAME = "p_estimates.jsonl"
OUTCOME_KEYS: tuple[str, ...] = tuple(o.value for o in Outcome)


def estimates_path(cfg: Any, *, for_training: bool = False) -> Path:
    """The p_i file of a config: the one `awarl estimate` writes (estimate.out, else
    <run.out_dir>/p_estimates.jsonl), or with `for_training` the one `awarl train` reads (train.p_estimates
    when set, else that same file)."""
    if for_training and cfg.train.p_estimates:
        return Path(cfg.train.p_estimates)
    return Path(cfg.estimate.out) if cfg.estimate.out else Path(cfg.run.out_dir) / FILE_NAME


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


def estimates_summary(rows: dict[str, dict]) -> str:
    """One paragraph on an estimate file's p_i: how many questions, their mean, and how many the standard
    checkpoint never / always solves (those are where AWA-RL's refusal reward is largest / smallest)."""
    ps = [float(r["p_i"]) for r in rows.values()]
    if not ps:
        return "no estimates"
    never, always = sum(p == 0 for p in ps), sum(p == 1 for p in ps)
    return (f"{len(ps)} questions, mean p_i {sum(ps) / len(ps):.3f}; never solved (p_i = 0): {never} "
            f"({never / len(ps):.0%}), always solved (p_i = 1): {always} ({always / len(ps):.0%})")
