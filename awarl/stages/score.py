"""Score a predictions file: outcomes, P / A / RA-F1 per dataset and macro, bootstrap CIs, coverage gaps.

The predictions format (docs/formats.md) is one JSON line per question with `id, dataset, question,
prediction, answers` and optional `valid`, `judge_correct`, `judge_failed`, `gold_evidence`, `trajectory`,
`critic`. A malformed line is reported as `file:line: reason` in `skipped_lines` and the rest is scored: one
bad line never loses a whole run. The citation critic's verdict summaries (`critic`, written by `awarl
eval`) are averaged over the judged answers per dataset and macro; lines with gold evidence and a
trajectory add citation precision/recall, the evidence-retrieved share and the judge's agreement with the
gold judge (`evidence`, awarl.stages.evidence_metrics); under `metrics.correctness: judge` the lines whose
grade failed are counted (`grader_failures`). A file without these fields scores exactly as before.
"""

from __future__ import annotations

import logging
import math
import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from awarl.agent.templates import run_abstention_phrases
from awarl.io import DataError, iter_jsonl
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
from awarl.stages.evidence_metrics import (
    EvidenceAcc,
    evidence_summary,
    macro_evidence,
    validate_gold_evidence,
)

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
    if not has_verdict(critic):  # failed or skipped: no figures to check
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
    sup = critic.get("supporting", [])
    if not isinstance(sup, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in sup):
        return "key 'critic.supporting': expected a list of passage numbers"
    return None


def line_problem(row: Any, correctness: str, phrases: list[str] | None = None) -> str | None:
    """The reason a predictions line cannot be scored, or None (a resumed eval regenerates such a line)."""
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
    # Only a real answer to a question with gold answers needs the judge's verdict: abstentions, blank/invalid
    # answers and answers to an unanswerable question (no gold: wrong) have an outcome without one
    # (classify_outcome never consults judge_correct for them).
    needs_verdict = (pred is not None and pred.strip() and row.get("valid", True) and answers
                     and not is_abstention(pred, phrases or []))
    if correctness == "judge" and jc is None and needs_verdict:
        return "correctness=judge but the line has no 'judge_correct' verdict"
    traj = row.get("trajectory")
    if traj is not None and not isinstance(traj, dict):
        return f"key 'trajectory': expected an object, got {type(traj).__name__}"
    return validate_gold_evidence(row.get("gold_evidence")) or _validate_critic(row.get("critic"))


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


def has_verdict(critic: Any) -> bool:
    """Whether a line's critic summary holds a verdict: not absent, not `failed`, not `skipped` (the gold
    judge without gold evidence and no fallback), the only shapes without a groundedness (`_validate_critic`)."""
    return isinstance(critic, dict) and critic.get("failed") is not True and not isinstance(critic.get("skipped"), str)


def gated(outcome: Outcome, critic: Any, gate: float | None) -> bool:
    """True when `metrics.critic_gate` turns this answer into an abstention: an answered line whose critic
    verdict has groundedness below the gate. Lines without a verdict are left as they are."""
    return (gate is not None and outcome in (Outcome.CORRECT, Outcome.WRONG) and has_verdict(critic)
            and float(critic["groundedness"]) < gate)


def question_key(row: dict) -> tuple[str, str]:
    """(dataset, id) of a scorable line: the question it answers."""
    return str(row.get("dataset")), str(row.get("id"))


def duplicate_problem(key: tuple[str, str], first_at: str) -> str:
    """Why a later line of a question is not scored. The one duplicate rule, of `awarl score` and of a resumed
    evaluation alike (awarl.stages.predictions): a question's line is the FIRST line of it that the scorer can
    score; every later copy is a duplicate, whatever it says (a resumed eval moves them out of the file)."""
    return f"duplicate id {key[1]!r} in dataset {key[0]!r} (first at {first_at}; the first scorable line is kept)"


def scorable_rows(rows: list[Any], metrics_cfg: MetricsConfig, phrases: list[str], *, source: str,
                  line_numbers: list[int] | None, skipped: list[str]) -> Iterator[tuple[dict, Outcome, bool]]:
    """(row, outcome, gated) of every valid, first-seen line (gated: turned into an abstention by
    `metrics.critic_gate`); the others are appended to `skipped` as `source:LINE: reason`."""
    seen: dict[tuple[str, str], str] = {}
    for k, row in enumerate(rows):
        where = f"{source}:{line_numbers[k]}" if line_numbers else f"{source}: row {k}"
        reason = line_problem(row, metrics_cfg.correctness, phrases)
        key = question_key(row) if isinstance(row, dict) else None
        if reason is None and key in seen:
            reason = duplicate_problem(key, seen[key])
        if reason is not None:
            skipped.append(f"{where}: {reason}")
            continue
        assert key is not None  # line_problem refuses a line that is not an object
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


@dataclass
class _DatasetAcc:
    outcomes: list[Outcome] = field(default_factory=list)
    em: list[float] = field(default_factory=list)
    f1: list[float] = field(default_factory=list)
    cover_em: list[float] = field(default_factory=list)
    critic: list[dict] = field(default_factory=list)
    evidence: EvidenceAcc = field(default_factory=EvidenceAcc)
    gated: int = 0
    grader_failures: int = 0

    def add(self, row: dict, outcome: Outcome, was_gated: bool) -> bool | None:
        """Record one scored line; returns whether its gold evidence was all retrieved (None: unknown)."""
        # A gated answer counts as abstained: its text is not scored as an answer either.
        pred, golds = (None if was_gated else row["prediction"]), row["answers"]
        self.gated += was_gated
        self.grader_failures += row.get("judge_failed") is True
        self.outcomes.append(outcome)
        self.em.append(float(exact_match(pred, golds)))
        self.f1.append(token_f1(pred, golds))
        self.cover_em.append(float(cover_em(pred, golds)))
        answered = was_gated or outcome in (Outcome.CORRECT, Outcome.WRONG)
        critic = row.get("critic")
        if critic is not None and outcome in (Outcome.CORRECT, Outcome.WRONG):
            # Only answered, valid trajectories are judged (SPEC section 4 step 10); a stray verdict on an
            # abstention or invalid line is ignored.
            self.critic.append(critic)
        return self.evidence.add(row, answered, outcome is Outcome.CORRECT)


def score_predictions(rows: list[dict], metrics_cfg: MetricsConfig, phrases: list[str], seed: int = 0, *,
                      source: str = "<rows>", line_numbers: list[int] | None = None,
                      skipped: list[str] | None = None) -> dict[str, Any]:
    """Score parsed prediction rows. `line_numbers` (parallel to rows) and `source` only label messages;
    `skipped` carries messages of lines that could not even be parsed."""
    skipped = list(skipped or [])
    per_ds: dict[str, _DatasetAcc] = defaultdict(_DatasetAcc)
    gaps: list[dict[str, Any]] = []
    for row, outcome, was_gated in scorable_rows(rows, metrics_cfg, phrases, source=source,
                                                 line_numbers=line_numbers, skipped=skipped):
        retrieved = per_ds[row["dataset"]].add(row, outcome, was_gated)
        if outcome is Outcome.ABSTAIN:
            gaps.append({"id": str(row["id"]), "dataset": row["dataset"], "question": row["question"],
                         "searches": _searches(row), **({"gated": True} if was_gated else {}),
                         **({} if retrieved is None else {"evidence_retrieved": retrieved})})
    if skipped:
        log.warning("%s: skipped %d line(s); first: %s", source, len(skipped), skipped[0])
    nboot = metrics_cfg.bootstrap_samples
    per_dataset = {ds: _dataset_metrics(per_ds[ds], metrics_cfg, seed) for ds in sorted(per_ds)}
    if any(a.critic for a in per_ds.values()):  # then every dataset gets a critic entry, possibly empty
        for ds, m in per_dataset.items():
            m["critic"] = critic_summary(per_ds[ds].critic)
    macro = _macro_metrics(per_ds, per_dataset, nboot, seed)
    pooled = _DatasetAcc()
    for a in per_ds.values():
        for name in ("outcomes", "em", "f1", "cover_em", "critic"):
            getattr(pooled, name).extend(getattr(a, name))
    overall = aggregate(pooled.outcomes, em=pooled.em, f1=pooled.f1, cover=pooled.cover_em)
    if any(a.critic for a in per_ds.values()):
        overall["critic"] = critic_summary(pooled.critic)
    if metrics_cfg.correctness == "judge":
        overall["grader_failures"] = sum(a.grader_failures for a in per_ds.values())
    return {
        "per_dataset": per_dataset,
        "macro": macro,
        "overall": overall,
        "n": len(pooled.outcomes),
        "config": {"correctness": metrics_cfg.correctness, "f1_threshold": metrics_cfg.f1_threshold,
                   "critic_gate": metrics_cfg.critic_gate,
                   "bootstrap_samples": nboot, "abstention_phrases": list(phrases), "seed": seed},
        "coverage_gaps": gaps,
        "skipped_lines": skipped,
    }


def _dataset_metrics(acc: _DatasetAcc, metrics_cfg: MetricsConfig, seed: int) -> dict[str, Any]:
    nboot = metrics_cfg.bootstrap_samples
    m = aggregate(acc.outcomes, em=acc.em, f1=acc.f1, cover=acc.cover_em)
    m["ci"] = {met: list(bootstrap_ci(acc.outcomes, met, nboot, seed, values=getattr(acc, met, None)))
               for met in CI_METRICS} if nboot else {}
    if metrics_cfg.critic_gate is not None:
        m["gated"] = acc.gated
    if metrics_cfg.correctness == "judge":
        m["grader_failures"] = acc.grader_failures
    ev = evidence_summary(acc.evidence, nboot, seed)
    if ev is not None:
        m["evidence"] = ev
    return m


def _macro_metrics(per_ds: dict[str, _DatasetAcc], per_dataset: dict[str, dict[str, Any]], nboot: int,
                   seed: int) -> dict[str, Any]:
    if not per_dataset:
        return {}
    macro = macro_average(per_dataset)
    macro["ci"] = {met: list(bootstrap_macro_ci({ds: a.outcomes for ds, a in per_ds.items()}, met, nboot, seed,
                                                values={ds: getattr(a, met) for ds, a in per_ds.items()}
                                                if met in MEAN_METRICS else None))
                   for met in CI_METRICS} if nboot else {}
    if any("grader_failures" in m for m in per_dataset.values()):
        macro["grader_failures"] = sum(m.get("grader_failures", 0) for m in per_dataset.values())
    if any("critic" in m for m in per_dataset.values()):
        macro["critic"] = macro_critic({ds: m["critic"] for ds, m in per_dataset.items()})
    ev = macro_evidence({ds: a.evidence for ds, a in per_ds.items()},
                        {ds: m.get("evidence") for ds, m in per_dataset.items()}, nboot, seed)
    if ev is not None:
        macro["evidence"] = ev
    return macro


def critic_summary(verdicts: list[dict]) -> dict[str, Any]:
    """Means of coverage / redundancy / groundedness / r_cite over the judged answers, the number judged, the
    judge failures, the answers deliberately not judged (`skipped`: no gold evidence under gold_fallback
    none), those a gold judge left to its fallback, and how many judged answers carry at least one flag. Means
    are None with nothing judged."""
    skipped = sum(isinstance(v.get("skipped"), str) for v in verdicts)
    ok = [v for v in verdicts if has_verdict(v)]
    out: dict[str, Any] = {"judged": len(ok), "failures": len(verdicts) - len(ok) - skipped, "skipped": skipped,
                           "fallbacks": sum(v.get("fallback") is True for v in ok)}
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
    out: dict[str, Any] = {k: sum(c.get(k, 0) for c in per_dataset.values())
                           for k in ("judged", "failures", "skipped", "fallbacks", "flagged")}
    for key in CRITIC_MEANS:
        vals = [c[key] for c in per_dataset.values() if c.get(key) is not None]
        out[key] = sum(vals) / len(vals) if vals else None
    out["datasets_judged"] = sum(1 for c in per_dataset.values() if c["judged"])
    return out


def score_file(path: str | os.PathLike, out_dir: str | os.PathLike | None, cfg: AwarlConfig) -> dict[str, Any]:
    """Score a predictions JSONL and write results.json / results.md / results.png into `out_dir`
    (default: the predictions file's folder). Returns the results dict. A file with no scorable line is a
    DataError, raised before anything is written: an empty report must not replace an earlier one."""

    path = Path(path)
    rows, lines, errors = read_predictions(path)
    results = score_predictions(rows, cfg.metrics, run_abstention_phrases(cfg.agent), seed=cfg.run.seed,
                                source=str(path), line_numbers=lines, skipped=errors)
    if results["n"] == 0:
        skipped = results["skipped_lines"]
        why = f"{len(skipped)} line(s) skipped; first: {skipped[0]}" if skipped else "the file has no lines"
        raise DataError(f"{path}: no scorable line ({why})")
    results["source"] = str(path)
    write_report(results, Path(out_dir) if out_dir is not None else path.parent)
    return results
