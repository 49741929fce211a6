"""Score a predictions file: outcomes, P / A / RA-F1 per dataset and macro, bootstrap CIs, coverage gaps.

The predictions format (docs/formats.md) is one JSON line per question with `id, dataset, question,
prediction, answers` and optional `valid`, `judge_correct`, `trajectory`. A malformed line is reported
as `file:line: reason` in `skipped_lines` and the rest is scored: one bad line never loses a whole run.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from awarl.io import iter_jsonl
from awarl.metrics import (
    MEAN_METRICS,
    RATE_METRICS,
    Outcome,
    aggregate,
    bootstrap_ci,
    bootstrap_macro_ci,
    classify_outcome,
    cover_em,
    exact_match,
    macro_average,
    token_f1,
)

if TYPE_CHECKING:
    from awarl.config import AwarlConfig, MetricsConfig

log = logging.getLogger(__name__)

CI_METRICS = RATE_METRICS + MEAN_METRICS
REQUIRED_KEYS = ("id", "dataset", "question", "prediction", "answers")


def _validate(row: Any, correctness: str) -> str | None:
    """The reason a row cannot be scored, or None."""
    if not isinstance(row, dict):
        return f"expected a JSON object, got {type(row).__name__}"
    missing = [k for k in REQUIRED_KEYS if k not in row]
    if missing:
        return f"missing key(s) {', '.join(repr(k) for k in missing)}"
    rid = row["id"]
    if isinstance(rid, bool) or not isinstance(rid, (str, int)) or str(rid) == "":
        return f"key 'id': expected a non-empty string, got {rid!r}"
    if not isinstance(row["dataset"], str) or not row["dataset"]:
        return f"key 'dataset': expected a non-empty string, got {row['dataset']!r}"
    if not isinstance(row["question"], str):
        return f"key 'question': expected a string, got {type(row['question']).__name__}"
    if row["prediction"] is not None and not isinstance(row["prediction"], str):
        return f"key 'prediction': expected a string or null, got {type(row['prediction']).__name__}"
    answers = row["answers"]
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        return "key 'answers': expected a list of strings"
    if "valid" in row and not isinstance(row["valid"], bool):
        return f"key 'valid': expected true or false, got {row['valid']!r}"
    jc = row.get("judge_correct")
    if jc is not None and not isinstance(jc, bool):
        return f"key 'judge_correct': expected true, false or null, got {jc!r}"
    if correctness == "judge" and jc is None and row["prediction"] is not None and row.get("valid", True):
        return "correctness=judge but the line has no 'judge_correct' verdict"
    traj = row.get("trajectory")
    if traj is not None and not isinstance(traj, dict):
        return f"key 'trajectory': expected an object, got {type(traj).__name__}"
    return None


def _searches(row: dict) -> list[str]:
    raw = (row.get("trajectory") or {}).get("searches") or []
    if not isinstance(raw, list):
        return [str(raw)]
    out = []
    for s in raw:
        if isinstance(s, dict):  # tolerate {"query": ..., "results": ...} entries
            s = s.get("query", s)
        out.append(s if isinstance(s, str) else str(s))
    return out


def score_predictions(rows: list[dict], metrics_cfg: MetricsConfig, phrases: list[str], seed: int = 0, *,
                      source: str = "<rows>", line_numbers: list[int] | None = None,
                      skipped: list[str] | None = None) -> dict[str, Any]:
    """Score parsed prediction rows. `line_numbers` (parallel to rows) and `source` only label messages;
    `skipped` carries messages of lines that could not even be parsed."""
    skipped = list(skipped or [])
    per_ds: dict[str, dict[str, list]] = defaultdict(lambda: {"outcomes": [], "em": [], "f1": [], "cover_em": []})
    seen: dict[tuple[str, str], str] = {}
    gaps: list[dict[str, Any]] = []
    for k, row in enumerate(rows):
        where = f"{source}:{line_numbers[k]}" if line_numbers else f"{source}: row {k}"
        reason = _validate(row, metrics_cfg.correctness)
        key = (str(row.get("dataset")), str(row.get("id"))) if isinstance(row, dict) else None
        if reason is None and key in seen:
            reason = f"duplicate id {key[1]!r} in dataset {key[0]!r} (first at {seen[key]})"
        if reason is not None:
            skipped.append(f"{where}: {reason}")
            continue
        seen[key] = where
        pred, golds = row["prediction"], row["answers"]
        outcome = classify_outcome(pred, golds, valid=row.get("valid", True), phrases=phrases,
                                   correctness=metrics_cfg.correctness, f1_threshold=metrics_cfg.f1_threshold,
                                   judge_correct=row.get("judge_correct"))
        acc = per_ds[row["dataset"]]
        acc["outcomes"].append(outcome)
        acc["em"].append(float(exact_match(pred, golds)))
        acc["f1"].append(token_f1(pred, golds))
        acc["cover_em"].append(float(cover_em(pred, golds)))
        if outcome is Outcome.ABSTAIN:
            gaps.append({"id": str(row["id"]), "dataset": row["dataset"], "question": row["question"],
                         "searches": _searches(row)})
    if skipped:
        log.warning("%s: skipped %d line(s); first: %s", source, len(skipped), skipped[0])

    nboot = metrics_cfg.bootstrap_samples
    per_dataset: dict[str, dict[str, Any]] = {}
    for ds in sorted(per_ds):
        acc = per_ds[ds]
        m = aggregate(acc["outcomes"], em=acc["em"], f1=acc["f1"], cover=acc["cover_em"])
        m["ci"] = {met: list(bootstrap_ci(acc["outcomes"], met, nboot, seed, values=acc.get(met)))
                   for met in CI_METRICS} if nboot else {}
        per_dataset[ds] = m
    macro = macro_average(per_dataset) if per_dataset else {}
    if per_dataset and nboot:
        outs = {ds: a["outcomes"] for ds, a in per_ds.items()}
        macro["ci"] = {met: list(bootstrap_macro_ci(outs, met, nboot, seed,
                                                    values={ds: a[met] for ds, a in per_ds.items()}
                                                    if met in MEAN_METRICS else None))
                       for met in CI_METRICS}
    elif per_dataset:
        macro["ci"] = {}
    all_out = [o for a in per_ds.values() for o in a["outcomes"]]
    overall = aggregate(all_out, em=[v for a in per_ds.values() for v in a["em"]],
                        f1=[v for a in per_ds.values() for v in a["f1"]],
                        cover=[v for a in per_ds.values() for v in a["cover_em"]])
    return {
        "per_dataset": per_dataset,
        "macro": macro,
        "overall": overall,
        "n": len(all_out),
        "config": {"correctness": metrics_cfg.correctness, "f1_threshold": metrics_cfg.f1_threshold,
                   "bootstrap_samples": nboot, "abstention_phrases": list(phrases), "seed": seed},
        "coverage_gaps": gaps,
        "skipped_lines": skipped,
    }


def score_file(path: str | os.PathLike, out_dir: str | os.PathLike | None, cfg: AwarlConfig) -> dict[str, Any]:
    """Score a predictions JSONL and write results.json / results.md / results.png into `out_dir`
    (default: the predictions file's folder). Returns the results dict."""
    from awarl.report import write_report

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"predictions file not found: {path}")
    errors: list[str] = []
    rows, lines = [], []
    for n, obj in iter_jsonl(path, on_error="skip", errors=errors):
        rows.append(obj)
        lines.append(n)
    results = score_predictions(rows, cfg.metrics, list(cfg.agent.abstention_phrases), seed=cfg.run.seed,
                                source=str(path), line_numbers=lines, skipped=errors)
    results["source"] = str(path)
    write_report(results, Path(out_dir) if out_dir is not None else path.parent)
    return results
