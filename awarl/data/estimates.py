"""The p_i estimate file (SPEC section 4.1): where it is, its rows, reading, joining, and a summary.

`awarl estimate` writes it and `awarl train` reads it; both go through this module, so they can never
disagree on the file's place or format. One JSON line per question (docs/training.md)::

    {"qid", "dataset", "question", "k", "correct", "p_i", "p_answered",
     "outcomes": {"correct", "wrong", "abstain", "invalid"}}

`p_i` is correct / K (SPEC); `p_answered` is correct / answered (null when all K abstained). Which one
training uses is `reward.p_definition`, applied when the file is read (`join_p`), from the stored counts.

Questions are keyed by (dataset, qid): ids are only unique within a dataset (Search-R1's parquet reuses
`train_N` across NQ and HotpotQA).
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard

from awarl.data.types import QAExample, example_key
from awarl.estimation import estimate_p, success_estimate
from awarl.io import DataError, iter_jsonl, loads_json
from awarl.metrics import Outcome

log = logging.getLogger(__name__)

FILE_NAME = "p_estimates.jsonl"
OUTCOME_KEYS: tuple[str, ...] = tuple(o.value for o in Outcome)


def estimates_path(estimate_out: str | None, run_dir: str, *, train_file: str | None = None) -> Path:
    """The p_i file: the one `awarl estimate` writes (`estimate.out`, else <`run.out_dir`>/p_estimates.jsonl),
    or, given `train_file` (`train.p_estimates`) when set, the one `awarl train` reads."""
    if train_file:
        return Path(train_file)
    return Path(estimate_out) if estimate_out else Path(run_dir) / FILE_NAME


def estimates_record(estimates_file: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings record beside a p_i file (`awarl estimate`'s), or {} without a readable one (an older
    awarl wrote none; an unreadable or malformed one is logged, naming the file, and read as none)."""
    path = settings_path(estimates_file)
    if not path.is_file():
        return {}
    try:
        # loads_json: a record nested too deeply reads as malformed, not as a RecursionError traceback
        data = loads_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        log.warning("%s: unreadable settings record (%s); read as none", path, e)
        return {}
    if not isinstance(data, dict):
        log.warning("%s: settings record is not a JSON object (%s); read as none", path, type(data).__name__)
        return {}
    return data


def estimates_model(record: dict[str, Any]) -> str | None:
    """The model a p_i file's rows were sampled with, as its settings record (`estimates_record`) names it."""
    name = (record.get("model") or {}).get("name")
    return name if isinstance(name, str) else None


def estimates_unfinished(record: dict[str, Any]) -> bool:
    """Whether a settings record (`estimates_record`) says its estimate has not finished (still running, or
    killed): `status` running. A record without a status (an older awarl) is taken as finished."""
    return record.get("status") == "running"


def settings_path(estimates_file: str | os.PathLike[str]) -> Path:
    """The record of the settings the file's rows were sampled under, beside it: p_estimates.jsonl ->
    p_estimates.manifest.json (`awarl estimate` refuses to add rows sampled under other settings)."""
    path = Path(estimates_file)
    return path.with_name(path.stem + ".manifest.json")


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
    answered = k - counts[Outcome.ABSTAIN.value]
    return {"qid": ex.id, "dataset": ex.dataset, "question": ex.question, "k": k, "correct": correct,
            "p_i": success_estimate(correct, answered, k, "share_of_k"),
            "p_answered": success_estimate(correct, answered, k, "among_answered"),
            "outcomes": {o: counts[o] for o in OUTCOME_KEYS}}


def row_p(row: dict[str, Any], definition: str = "share_of_k") -> float:
    """p_i of one estimate row under `reward.p_definition`. `among_answered` needs the row's outcome counts;
    a question the checkpoint never answered keeps its share of K (no evidence about answering it)."""
    if definition == "share_of_k":
        return float(row["p_i"])
    outcomes = row.get("outcomes")
    if not isinstance(outcomes, dict) or "k" not in row:
        raise ValueError(f"estimate row of {row.get('dataset')}/{row.get('qid')} has no outcome counts "
                         f"(needed by reward.p_definition={definition}); rerun `awarl estimate`")
    k = int(row["k"])
    answered = k - int(outcomes.get(Outcome.ABSTAIN.value, 0))
    return estimate_p(int(outcomes.get(Outcome.CORRECT.value, 0)), answered, k, definition)


def row_samples(row: dict[str, Any], definition: str = "share_of_k") -> float | None:
    """How many samples the p_i of one estimate row rests on (what `reward.expected_rate: posterior` weighs it
    by): K under `share_of_k`; the answered samples under `among_answered` (K when none was answered, as
    `row_p` then falls back to the share of K). None for a row without counts (an older or hand-made file)."""
    if "k" not in row:
        return None
    k = int(row["k"])
    if definition == "share_of_k":
        return float(k)
    outcomes = row.get("outcomes")
    if not isinstance(outcomes, dict):
        return None
    answered = k - int(outcomes.get(Outcome.ABSTAIN.value, 0))
    return float(answered if answered > 0 else k)


def _count(value: Any) -> TypeGuard[int]:
    """A count: an integer >= 0 (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _row_problem(row: dict[str, Any]) -> str | None:
    """Why an estimate row cannot be used (None when it can): the fields every row needs (qid, dataset,
    p_i in [0, 1]) and the counts where it has them. `k`, `correct` and `outcomes` are optional (a
    hand-made or older file may carry p_i alone), but present they must be what `estimate_row` writes:
    K >= 1, 0 <= correct <= K, outcome counts (keys of OUTCOME_KEYS, missing ones 0) summing to at most
    K, their `correct` equal to the row's. Checked on reading, so a bad row is refused naming its line,
    not later in `join_p` / `row_p` with an error that names neither file nor line."""
    missing = [k for k in ("qid", "dataset", "p_i") if k not in row]
    if missing:
        return f"estimate row lacks {missing}"
    p = row["p_i"]
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
        return f"p_i must be a number in [0, 1], got {p!r}"
    k = row.get("k")
    if "k" in row and (not _count(k) or k < 1):
        return f"key 'k': expected an integer >= 1, got {k!r:.40}"
    correct = row.get("correct")
    if "correct" in row and (not _count(correct) or (k is not None and correct > k)):
        return f"key 'correct': expected an integer in [0, {'k' if k is None else k}], got {correct!r:.40}"
    if "outcomes" in row:
        outcomes = row["outcomes"]
        if not isinstance(outcomes, dict):
            return f"key 'outcomes': expected an object of counts, got {type(outcomes).__name__}"
        unknown = sorted(set(outcomes) - set(OUTCOME_KEYS))
        if unknown:
            return f"key 'outcomes': unknown outcome(s) {unknown}; expected {list(OUTCOME_KEYS)}"
        bad = {o: n for o, n in outcomes.items() if not _count(n)}
        if bad:
            return f"key 'outcomes': counts must be integers >= 0, got {bad!r:.80}"
        if k is not None and sum(outcomes.values()) > k:
            return f"key 'outcomes': counts sum to {sum(outcomes.values())}, more than k={k}"
        if correct is not None and outcomes.get(Outcome.CORRECT.value, 0) != correct:
            return (f"key 'outcomes': {outcomes.get(Outcome.CORRECT.value, 0)} correct, but the row's "
                    f"'correct' is {correct}")
        if correct is None:
            correct = outcomes.get(Outcome.CORRECT.value, 0)
    if k is not None and correct is not None and not math.isclose(p, correct / k, abs_tol=1e-9):
        # share_of_k would read p_i (with k samples behind it) and among_answered the counts: two p's for one row
        return f"p_i is {p!r}, but the row's counts give correct/k = {correct}/{k} = {correct / k:.6g}"
    return None


def read_estimates(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Rows of an estimate file keyed by example_key(dataset, qid); a later row for the same question wins.

    A torn last line (a killed writer; not a JSON object) is skipped with a warning, and `repair_torn_tail`
    cuts it before the next append. A whole last row that lacks only its newline is a row like any other
    (that repair completes it, so a resume that counted it done keeps it). Any other malformed row
    (`_row_problem`) is an error that names the file and line."""
    path = Path(path)
    if not path.exists():
        return {}
    out: dict[str, dict[str, Any]] = {}
    data = path.read_bytes()
    # Only an unterminated last line can be a torn write; its number as iter_jsonl counts lines:
    torn_line = data.count(b"\n") + 1 if data and not data.endswith(b"\n") else None
    errors: list[str] = []
    for n, row in iter_jsonl(path, on_error="skip", errors=errors):
        problem = _row_problem(row)
        if problem:
            raise DataError(f"{path}:{n}: {problem}")
        out[example_key(str(row["dataset"]), str(row["qid"]))] = row
    for e in errors:
        # Only the last line may be torn by a kill; a bad line in the middle is corruption.
        if torn_line is None or not e.startswith(f"{path}:{torn_line}:"):
            raise DataError(e)
        log.warning("ignoring a torn last line (interrupted write): %s", e)
    return out


def join_p(examples: Sequence[QAExample], estimates: dict[str, dict[str, Any]],
           definition: str = "share_of_k") -> tuple[list[float | None], int]:
    """p_i per example under `definition` (None where the estimate file has no row) and how many are missing."""
    ps: list[float | None] = []
    for ex in examples:
        row = estimates.get(example_key(ex.dataset, ex.id))
        ps.append(row_p(row, definition) if row is not None else None)
    return ps, sum(p is None for p in ps)


def join_samples(examples: Sequence[QAExample], estimates: dict[str, dict[str, Any]],
                 definition: str = "share_of_k") -> list[float | None]:
    """The sample count behind each example's p_i (`row_samples`; None where the file has no row or no counts)."""
    out: list[float | None] = []
    for ex in examples:
        row = estimates.get(example_key(ex.dataset, ex.id))
        out.append(row_samples(row, definition) if row is not None else None)
    return out


def estimates_summary(rows: dict[str, dict[str, Any]]) -> str:
    """One paragraph on an estimate file's p_i under both `reward.p_definition`s: how many questions, the
    means, how many the standard checkpoint never / always solves (where AWA-RL's refusal reward is largest /
    smallest), and how much it abstained (the gap between the two definitions)."""
    ps = [float(r["p_i"]) for r in rows.values()]
    if not ps:
        return "no estimates"
    n = len(ps)
    never, always = sum(p == 0 for p in ps), sum(p == 1 for p in ps)
    text = (f"{n} questions, mean p_i {sum(ps) / n:.3f}; never solved (p_i = 0): {never} "
            f"({never / n:.0%}), always solved (p_i = 1): {always} ({always / n:.0%})")
    counted = [r for r in rows.values() if isinstance(r.get("outcomes"), dict) and "k" in r]
    if counted:
        answered = [row_p(r, "among_answered") for r in counted]
        k_total = sum(int(r["k"]) for r in counted)
        abstained = sum(int(r["outcomes"].get(Outcome.ABSTAIN.value, 0)) for r in counted)
        never_answered = sum(int(r["outcomes"].get(Outcome.ABSTAIN.value, 0)) == int(r["k"]) for r in counted)
        text += (f"; mean p_i among answered {sum(answered) / len(answered):.3f} (reward.p_definition="
                 f"among_answered); the checkpoint abstained in {abstained / k_total:.1%} of the samples, "
                 f"on every sample of {never_answered} question(s)")
    return text
