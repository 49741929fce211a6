"""Citation and evidence metrics of an evaluation report, from predictions lines that carry gold evidence.

Per line (`gold_evidence` from the dataset, `trajectory.passages` and `trajectory.citations` from the run),
the gold judge's verdict (`awarl.critic.gold_judge.gold_verdict`, scored by `citation_reward` as in
training) gives:
- citation precision: share of the cited passages that are gold evidence (1 − the gold judge's redundancy;
  a citation of a number never shown is not gold), over answered lines that cite something;
- citation recall: share of the gold paragraphs a cited passage matches (the gold judge's coverage), over
  answered lines;
- evidence retrieved: 1 when every gold paragraph was retrieved somewhere in the trajectory (the gold judge
  found all its facts grounded), over every line; with `evidence_recall` its share per line. A wrong or
  abstained answer whose evidence was all retrieved is a *reading failure*; one whose evidence was not is a
  *retrieval gap*;
- agreement of the run's judge with the gold judge, on lines that carry another judge's verdict: per cited
  passage, whether both call it supporting (needs the verdict's `supporting` list, written since issue 12),
  and |r_cite − gold r_cite|.
Means get 95% percentile bootstrap intervals over questions (the macro one resamples within each dataset and
averages the datasets that have the metric). Lines without evidence (NQ-style data) or without a
trajectory are left out, and the counts say how many were used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from awarl.critic import is_oracle
from awarl.critic.gold_judge import evidence_from, gold_verdict, refs_from_line
from awarl.metrics import percentile_ci
from awarl.rewards.citation import citation_reward

MEANS = ("citation_precision", "citation_recall", "evidence_retrieved", "evidence_recall")
AGREEMENT_MEANS = ("passage_agreement", "r_cite_abs_diff", "r_cite_judge", "r_cite_gold")


@dataclass
class EvidenceAcc:
    """Per-question values of one dataset."""

    values: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in MEANS + AGREEMENT_MEANS})
    reading_failures: int = 0
    retrieval_gaps: int = 0
    judges: dict[str, int] = field(default_factory=dict)

    def add(self, row: Mapping[str, Any], answered: bool, correct: bool) -> bool | None:
        """Record one scored line; returns whether its gold evidence was all retrieved (None: unknown)."""
        ev = evidence_from(row.get("gold_evidence"))
        traj = row.get("trajectory")
        if ev is None or not isinstance(traj, dict) or not isinstance(traj.get("passages"), list):
            return None
        refs = refs_from_line(traj["passages"])
        citations = [int(c) for c in traj.get("citations") or [] if isinstance(c, int)]
        by_number = {p.number: p for p in refs}
        cited = [by_number[n] for n in dict.fromkeys(citations) if n in by_number]
        verdict = gold_verdict(ev, refs, cited)
        gold = citation_reward(verdict, citations, refs)
        retrieved = all(c.status == "grounded" for c in verdict.verified_claims)
        v = self.values
        v["evidence_retrieved"].append(float(retrieved))
        v["evidence_recall"].append(float(verdict.overall_groundedness))
        if answered:
            v["citation_recall"].append(gold.coverage)
            if citations:
                v["citation_precision"].append(1.0 - gold.redundancy)
        if not correct:
            self.reading_failures += retrieved
            self.retrieval_gaps += not retrieved
        if answered:
            self._agreement(row.get("critic"), gold, cited)
        return retrieved

    def _agreement(self, critic: Any, gold: Any, cited: list) -> None:
        if not isinstance(critic, dict) or critic.get("failed") or critic.get("skipped") is not None:
            return
        label = str(critic.get("judge", "?"))
        if is_oracle(label) or critic.get("reward") is None:
            return
        self.judges[label] = self.judges.get(label, 0) + 1
        v = self.values
        v["r_cite_judge"].append(float(critic["reward"]))
        v["r_cite_gold"].append(gold.reward)
        v["r_cite_abs_diff"].append(abs(float(critic["reward"]) - gold.reward))
        sup = critic.get("supporting")
        if isinstance(sup, list) and cited:
            mine, theirs = set(sup), set(gold.supporting)
            v["passage_agreement"].append(sum((p.number in mine) == (p.number in theirs) for p in cited) / len(cited))


def _draws(values: list[float], n: int, rng: int | np.random.Generator) -> np.ndarray:
    """`n` bootstrap means of `values`; `rng` a seed, or one generator shared by the datasets of a macro
    interval, so that each dataset is resampled on its own draws (one seed each would resample datasets of
    equal size at the same indices, in lockstep, and the macro interval would come out too narrow)."""
    arr = np.asarray(values, dtype=float)
    idx = np.random.default_rng(rng).integers(0, len(arr), size=(n, len(arr)))
    return arr[idx].mean(axis=1)


def _macro_ci(accs: dict[str, EvidenceAcc], dss: list[str], key: str, nboot: int, seed: int) -> list[float]:
    """The interval of the unweighted mean over `dss` of `key`: resampled within each dataset, independently
    (one generator across them, in name order, as `awarl.metrics.bootstrap_macro_ci` does)."""
    rng = np.random.default_rng(seed)
    return _ci(np.mean([_draws(accs[ds].values[key], nboot, rng) for ds in sorted(dss)], axis=0))


def _ci(draws: np.ndarray) -> list[float]:
    return list(percentile_ci(draws))   # a list: the JSON shape of every interval in results.json


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def evidence_summary(acc: EvidenceAcc, nboot: int, seed: int) -> dict[str, Any] | None:
    """The `evidence` entry of one dataset (and `judge_agreement` inside it when another judge ran), None when
    no line carried gold evidence and a trajectory."""
    v = acc.values
    if not v["evidence_retrieved"]:
        return None
    out: dict[str, Any] = {"questions": len(v["evidence_retrieved"]), "answered": len(v["citation_recall"]),
                           "citing": len(v["citation_precision"]), "reading_failures": acc.reading_failures,
                           "retrieval_gaps": acc.retrieval_gaps}
    out.update({k: _mean(v[k]) for k in MEANS})
    out["ci"] = {k: _ci(_draws(v[k], nboot, seed)) for k in MEANS if v[k]} if nboot else {}
    if v["r_cite_abs_diff"]:
        agree: dict[str, Any] = {"judge": max(acc.judges, key=lambda j: acc.judges[j]), "compared": len(v["r_cite_abs_diff"]),
                                 "passages_compared": len(v["passage_agreement"])}
        agree.update({k: _mean(v[k]) for k in AGREEMENT_MEANS})
        agree["ci"] = {k: _ci(_draws(v[k], nboot, seed)) for k in AGREEMENT_MEANS if v[k]} if nboot else {}
        out["judge_agreement"] = agree
    return out


def macro_evidence(accs: dict[str, EvidenceAcc], per_dataset: dict[str, dict[str, Any] | None], nboot: int,
                   seed: int) -> dict[str, Any] | None:
    """Counts summed; each mean the unweighted mean over the datasets that have it, its interval from
    resampling within each of them."""
    have = {ds: s for ds, s in per_dataset.items() if s is not None}
    if not have:
        return None
    out: dict[str, Any] = {k: sum(s[k] for s in have.values())
                           for k in ("questions", "answered", "citing", "reading_failures", "retrieval_gaps")}
    out["datasets"] = sorted(have)
    out["ci"] = {}
    for k in MEANS:
        dss = [ds for ds in have if accs[ds].values[k]]
        out[k] = _mean([have[ds][k] for ds in dss])
        if nboot and dss:
            out["ci"][k] = _macro_ci(accs, dss, k, nboot, seed)
    agreeing = {ds: s["judge_agreement"] for ds, s in have.items() if "judge_agreement" in s}
    if agreeing:
        agree: dict[str, Any] = {"judge": next(iter(agreeing.values()))["judge"],
                                 "compared": sum(a["compared"] for a in agreeing.values()),
                                 "passages_compared": sum(a["passages_compared"] for a in agreeing.values()),
                                 "ci": {}}
        for k in AGREEMENT_MEANS:
            dss = [ds for ds in agreeing if accs[ds].values[k]]
            agree[k] = _mean([agreeing[ds][k] for ds in dss])
            if nboot and dss:
                agree["ci"][k] = _macro_ci(accs, dss, k, nboot, seed)
        out["judge_agreement"] = agree
    return out


def validate_gold_evidence(value: Any) -> str | None:
    """The reason a line's `gold_evidence` cannot be read, or None."""
    try:
        evidence_from(value)
    except ValueError as e:
        return f"key 'gold_evidence': {e}"
    return None
