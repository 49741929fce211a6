"""Score a predictions file: outcomes, P / A / RA-F1 per dataset and macro, bootstrap CIs, coverage gaps.

The predictions format (docs/formats.md) is one JSON line per question with `id, dataset, question,
prediction, answers` and optional `valid`, `judge_correct`, `trajectory`, `critic`. A malformed line is
reported as `file:line: reason` in `skipped_lines` and the rest is scored: one bad line never loses a whole
run. The citation critic's verdict summaries (`critic`, written by `awarl eval`) are averaged over the
judged answers per dataset and macro; a file without them scores exactly as before (no `critic` keys).
"""

from __future__ import annotations

import logging
import math
import os
from collections import defaultdict
from collections.abc import Iterator
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
    is_abstention,
    macro_average,
    token_f1,
)
from awarl.report import write_report

if TYPE_CHECKING:
    from awarl.config import AwarlConfig, MetricsConfig

log = logging.getLogger(__name__)

CI_METRICS = RATE_METRICS + MEAN_METRICS
REQUIRED_KEYS = ("id", "dataset", "question", "prediction", "answers")


# Per-answer critic means reported (SPEC section 4 step 10 / section 5): coverage, redundancy, their
# difference r_cite, and the judge's overall groundedness.
CRITIC_MEANS = ("coverage", "redundancy", "groundedness", "reward")
_CRITIC_BOUNDS = {"coverage": (0.0, 1.0), "redundancy": (0.0, 1.0), "groundedness": (0.0, 1.0),
                  "reward": (-1.0, 1.0)}


def _validate_critic(critic: Any) -> str | None:
    if critic is None:
        return None
    if not isinstance(critic, dict):
        return f"key 'critic': expected an object or null, got {type(critic).__name__}"
    if critic.get("failed") is True:
        return None
    for key in ("coverage", "redundancy", "groundedness"):
        if key not in critic:
            return f"key 'critic': missing {key!r} (or \"failed\": true)"
    for key, (lo, hi) in _CRITIC_BOUNDS.items():
        v = critic.get(key)
        if v is None and key == "reward":
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
            return f"key 'critic.{key}': expected a number in [{lo:g}, {hi:g}], got {v!r}"
    flags = critic.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        return "key 'critic.flags': expected a list of strings"
    return None


def _validate(row: Any, correctness: str, phrases: list[str] | None = None) -> str | None:
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
    pred = row["prediction"]
    # Only a real answer needs the judge's verdict: abstentions and blank/invalid answers have an outcome
    # without one (classify_outcome never consults judge_correct for them).
    needs_verdict = (pred is not None and pred.strip() and row.get("valid", True)
                     and not is_abstention(pred, phrases or []))
    if correctness == "judge" and jc is None and needs_verdict:
        return "correctness=judge but the line has no 'judge_correct' verdict"
    traj = row.get("trajectory")
    if traj is not None and not isinstance(traj, dict):
        return f"key 'trajectory': expected an object, got {type(traj).__name__}"
    return _validate_critic(row.get("critic"))


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


def gated(outcome: Outcome, critic: Any, gate: float | None) -> bool:
    """True when `metrics.critic_gate` turns this answer into an abstention: an answered line whose critic
    verdict (not failed) has groundedness below the gate. Lines without a verdict are left as they are."""
    return (gate is not None and outcome in (Outcome.CORRECT, Outcome.WRONG) and isinstance(critic, dict)
            and critic.get("failed") is not True and float(critic["groundedness"]) < gate)


def scorable_rows(rows: list[Any], metrics_cfg: MetricsConfig, phrases: list[str], *, source: str,
                  line_numbers: list[int] | None, skipped: list[str]) -> Iterator[tuple[dict, Outcome, bool]]:
    """(row, outcome, gated) of every valid, first-seen line (gated: turned into an abstention by
    `metrics.critic_gate`); the others are appended to `skipped` as `source:LINE: reason`."""
    seen: dict[tuple[str, str], str] = {}
    for k, row in enumerate(rows):
        where = f"{source}:{line_numbers[k]}" if line_numbers else f"{source}: row {k}"
        reason = _validate(row, metrics_cfg.correctness, phrases)
        key = (str(row.get("dataset")), str(row.get("id"))) if isinstance(row, dict) else None
        if reason is None and key in seen:
            reason = f"duplicate id {key[1]!r} in dataset {key[0]!r} (first at {seen[key]})"
        if reason is not None:
            skipped.append(f"{where}: {reason}")
            continue
        seen[key] = where
        outcome = classify_outcome(row["prediction"], row["answers"], valid=row.get("valid", True),
                                   phrases=phrases, correctness=metrics_cfg.correctness,
                                   f1_threshold=metrics_cfg.f1_threshold, judge_correct=row.get("judge_correct"))
        if gated(outcome, row.get("critic"), metrics_cfg.critic_gate):
            yield row, Outcome.ABSTAIN, True
        else:
            yield row, outcome, False


def read_predictions(path: str | os.PathLike) -> tuple[list[Any], list[int], list[str]]:
    """(rows, their line numbers, messages of unreadable lines) of a predictions JSONL."""

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"predictions file not found: {path}")
    errors: list[str] = []
    rows, lines = [], []
    # A line that is not UTF-8 or not JSON is skipped and named like any other bad line.
    for n, obj in iter_jsonl(path, on_error="skip", errors=errors):
        rows.append(obj)
        lines.append(n)
    return rows, lines, errors


def score_predictions(rows: list[dict], metrics_cfg: MetricsConfig, phrases: list[str], seed: int = 0, *,
                      source: str = "<rows>", line_numbers: list[int] | None = None,
                      skipped: list[str] | None = None) -> dict[str, Any]:
    """Score parsed prediction rows. `line_numbers` (parallel to rows) and `source` only label messages;
    `skipped` carries messages of lines that could not even be parsed."""
    skipped = list(skipped or [])
    per_ds: dict[str, dict[str, list]] = defaultdict(lambda: {"outcomes": [], "em": [], "f1": [], "cover_em": [],
                                                              "critic": []})
    any_critic = False
    gaps: list[dict[str, Any]] = []
    n_gated: dict[str, int] = defaultdict(int)
    for row, outcome, was_gated in scorable_rows(rows, metrics_cfg, phrases, source=source,
                                                 line_numbers=line_numbers, skipped=skipped):
        # A gated answer counts as abstained: its text is not scored as an answer either.
        pred, golds = (None if was_gated else row["prediction"]), row["answers"]
        acc = per_ds[row["dataset"]]
        n_gated[row["dataset"]] += was_gated
        acc["outcomes"].append(outcome)
        acc["em"].append(float(exact_match(pred, golds)))
        acc["f1"].append(token_f1(pred, golds))
        acc["cover_em"].append(float(cover_em(pred, golds)))
        critic = row.get("critic")
        if critic is not None and outcome in (Outcome.CORRECT, Outcome.WRONG):
            # Only answered, valid trajectories are judged (SPEC section 4 step 10); a stray verdict on an
            # abstention or invalid line is ignored.
            acc["critic"].append(critic)
            any_critic = True
        if outcome is Outcome.ABSTAIN:
            gaps.append({"id": str(row["id"]), "dataset": row["dataset"], "question": row["question"],
                         "searches": _searches(row), **({"gated": True} if was_gated else {})})
    if skipped:
        log.warning("%s: skipped %d line(s); first: %s", source, len(skipped), skipped[0])

    nboot = metrics_cfg.bootstrap_samples
    per_dataset: dict[str, dict[str, Any]] = {}
    for ds in sorted(per_ds):
        acc = per_ds[ds]
        m = aggregate(acc["outcomes"], em=acc["em"], f1=acc["f1"], cover=acc["cover_em"])
        m["ci"] = {met: list(bootstrap_ci(acc["outcomes"], met, nboot, seed, values=acc.get(met)))
                   for met in CI_METRICS} if nboot else {}
        if metrics_cfg.critic_gate is not None:
            m["gated"] = n_gated[ds]
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
    if any_critic:
        for ds, m in per_dataset.items():
            m["critic"] = critic_summary(per_ds[ds]["critic"])
        if macro:
            macro["critic"] = macro_critic({ds: m["critic"] for ds, m in per_dataset.items()})
        overall["critic"] = critic_summary([c for a in per_ds.values() for c in a["critic"]])
    return {
        "per_dataset": per_dataset,
        "macro": macro,
        "overall": overall,
        "n": len(all_out),
        "config": {"correctness": metrics_cfg.correctness, "f1_threshold": metrics_cfg.f1_threshold,
                   "critic_gate": metrics_cfg.critic_gate,
                   "bootstrap_samples": nboot, "abstention_phrases": list(phrases), "seed": seed},
        "coverage_gaps": gaps,
        "skipped_lines": skipped,
    }


def critic_summary(verdicts: list[dict]) -> dict[str, Any]:
    """Means of coverage / redundancy / groundedness / r_cite over the judged answers, the number judged, the
    judge failures, and how many judged answers carry at least one flag. Means are None with nothing judged."""
    ok = [v for v in verdicts if v.get("failed") is not True]
    out: dict[str, Any] = {"judged": len(ok), "failures": len(verdicts) - len(ok)}
    for key in CRITIC_MEANS:
        vals = [float(v[key]) for v in ok if v.get(key) is not None]
        if key == "reward" and len(vals) < len(ok):  # older lines without r_cite: derive it
            vals = [float(v["coverage"]) - float(v["redundancy"]) for v in ok]
        out[key] = sum(vals) / len(vals) if vals else None
    out["flagged"] = sum(bool(v.get("flags")) for v in ok)
    return out


def macro_critic(per_dataset: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Counts summed over datasets; each mean is the unweighted mean over the datasets that have at least one
    judged answer (a dataset where everything was abstained on has no citation quality to average)."""
    out: dict[str, Any] = {"judged": sum(c["judged"] for c in per_dataset.values()),
                           "failures": sum(c["failures"] for c in per_dataset.values()),
                           "flagged": sum(c["flagged"] for c in per_dataset.values())}
    for key in CRITIC_MEANS:
        vals = [c[key] for c in per_dataset.values() if c.get(key) is not None]
        out[key] = sum(vals) / len(vals) if vals else None
    out["datasets_judged"] = sum(1 for c in per_dataset.values() if c["judged"])
    return out


def score_file(path: str | os.PathLike, out_dir: str | os.PathLike | None, cfg: AwarlConfig) -> dict[str, Any]:
    """Score a predictions JSONL and write results.json / results.md / results.png into `out_dir`
    (default: the predictions file's folder). Returns the results dict."""

    path = Path(path)
    rows, lines, errors = read_predictions(path)
    results = score_predictions(rows, cfg.metrics, list(cfg.agent.abstention_phrases), seed=cfg.run.seed,
                                source=str(path), line_numbers=lines, skipped=errors)
    results["source"] = str(path)
    write_report(results, Path(out_dir) if out_dir is not None else path.parent)
    return results
