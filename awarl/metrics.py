"""Answer normalisation, EM / F1 / cover-EM, outcomes, and the aggregate metrics (P, A, RA-F1, ...).

All functions are pure. Normalisation (`normalize_answer`, the one used by EM, F1, cover-EM and abstention
matching) is the official HotpotQA/SQuAD one (lower-case, drop ASCII punctuation, drop the articles a/an/the,
fold whitespace), so EM and F1 compare with published numbers, followed by two extensions applied to its result:
- punctuation is Unicode punctuation too (category P: `…`, `。`, `“”`, `’`, `–`): the official rule drops `'`
  and `-` but keeps `’` and `–`, so `Arthur’s` never matched a gold `Arthur's`;
- currency signs (category Sc: `£`, `€`, `¥`) at either end of a word, and symbols (category S: `°`, `™`, `✓`) at
  either end of the answer, are dropped: `worth £5 million` contains `5 million`, `Paris ✓` is `paris`; a symbol
  inside an answer stays (`C♯ minor` is not `C minor`).
Both map the official form to a new one, so answers the official script calls equal stay equal: EM and cover-EM
can only go up against it (F1 too, but for an answer-end symbol the other side has inside, `50° north` against
`50°`).
An answer that normalises to the empty string (e.g. "?!") never matches anything, and a gold answer that does
is left out: the official EM would call "." equal to a gold "!" while its F1 gives 0; we make them agree.
"""

from __future__ import annotations

import functools
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np

from awarl import choices

if TYPE_CHECKING:
    from awarl.config import MetricsConfig


class Outcome(str, Enum):
    """Exactly one per trajectory. For metrics, INVALID counts as answered-and-wrong."""

    CORRECT = "correct"
    WRONG = "wrong"
    ABSTAIN = "abstain"
    INVALID = "invalid"


_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# HotpotQA's F1 rule: these answers are categorical, so partial token overlap earns nothing.
_CATEGORICAL = {"yes", "no", "noanswer"}


def is_punct(ch: str) -> bool:
    return ch in _PUNCT or (not ch.isascii() and unicodedata.category(ch)[0] == "P")


def _strip_symbols(s: str, categories: str) -> str:
    """`s` without the characters of these Unicode categories ("S": symbols, "Sc": currency) at either end."""
    i, j = 0, len(s)
    while i < j and unicodedata.category(s[i]).startswith(categories):
        i += 1
    while j > i and unicodedata.category(s[j - 1]).startswith(categories):
        j -= 1
    return s[i:j]


def official_normalize(s: str) -> str:
    """The SQuAD v1.1 / HotpotQA `normalize_answer`, exactly: lower-case, ASCII punctuation dropped, the articles
    a/an/the dropped, whitespace folded."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def normalize_answer(s: str) -> str:
    """The official normalisation, then (module docstring) Unicode punctuation dropped, currency signs at each
    word's ends and symbols at the answer's ends dropped: a function of the official form, so what the official
    script equates stays equal."""
    s = "".join(ch for ch in official_normalize(s) if not is_punct(ch))
    s = " ".join(w for w in (_strip_symbols(w, "Sc") for w in s.split()) if w)
    return " ".join(_strip_symbols(s, "S").split())


def _norm_golds(golds: Sequence[str]) -> list[str]:
    return [g for g in (normalize_answer(x) for x in golds) if g]


def exact_match(pred: str | None, golds: Sequence[str]) -> bool:
    """Normalised prediction equals a normalised gold answer (any alias)."""
    p = normalize_answer(pred) if pred is not None else ""
    return bool(p) and p in _norm_golds(golds)


def _f1_pair(p: str, g: str) -> float:
    if (p in _CATEGORICAL or g in _CATEGORICAL) and p != g:
        return 0.0
    p_tok, g_tok = p.split(), g.split()
    same = sum((Counter(p_tok) & Counter(g_tok)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p_tok), same / len(g_tok)
    return 2 * precision * recall / (precision + recall)


def token_f1(pred: str | None, golds: Sequence[str]) -> float:
    """Best token F1 over the gold aliases (HotpotQA rule for yes/no/noanswer)."""
    p = normalize_answer(pred) if pred is not None else ""
    if not p:
        return 0.0
    return max((_f1_pair(p, g) for g in _norm_golds(golds)), default=0.0)


def cover_em(pred: str | None, golds: Sequence[str]) -> bool:
    """A normalised gold answer occurs in the normalised prediction on word boundaries."""
    p = normalize_answer(pred) if pred is not None else ""
    if not p:
        return False
    padded = f" {p} "
    return any(f" {g} " in padded for g in _norm_golds(golds))


def is_abstention(answer: str | None, phrases: Sequence[str]) -> bool:
    """The answer is one of the abstention phrases, compared after normalisation."""
    if answer is None:
        return False
    a = normalize_answer(answer)
    if not a:
        return False
    return any(a == normalize_answer(ph) for ph in phrases)


@dataclass(frozen=True)
class CorrectnessRule:
    """What a correctness rule registers (`metrics.correctness`, awarl.choices.CORRECTNESS; docs/extending.md).

    - `check(answer, golds, metrics, verdict)`: whether a valid, non-abstaining answer to a question with gold
      answers is correct, reading its own constants from `metrics` (a MetricsConfig: `f1_threshold`, ...);
      `verdict` is the LLM answer grader's (None when there is none).
    - `graded`: the grader's verdict decides (the OpenAI-compatible endpoint of critic.base_url / critic.model,
      asked during the run): a predictions line without its `judge_correct` cannot be scored, and a run graded
      so cannot be re-graded from the answer text (it resumes only under the same grader).
    - `settings`: the MetricsConfig fields its verdicts depend on (recorded with the run, part of a resume's
      check where outcomes cannot be re-graded).
    """

    check: Callable[[str, Sequence[str], Any, bool | None], bool]
    graded: bool = False
    settings: tuple[str, ...] = ()


def _graded(answer: str, golds: Sequence[str], metrics: MetricsConfig, verdict: bool | None) -> bool:
    if verdict is None:
        raise ValueError("correctness='judge' needs judge_correct (the judge's verdict) for every answer")
    return bool(verdict)


EM = CorrectnessRule(lambda answer, golds, metrics, verdict: exact_match(answer, golds))
F1 = CorrectnessRule(lambda answer, golds, metrics, verdict: token_f1(answer, golds) >= metrics.f1_threshold,
                     settings=("f1_threshold",))
COVER_EM = CorrectnessRule(lambda answer, golds, metrics, verdict: cover_em(answer, golds))
JUDGE = CorrectnessRule(_graded, graded=True)

CORRECTNESS = choices.CORRECTNESS.names


def correctness_rule(name: str) -> CorrectnessRule:
    """The registered rule `name` (ValueError naming the choices when there is none)."""
    return choices.CORRECTNESS.load(name)


@functools.lru_cache(maxsize=64)
def _settings(correctness: str, f1_threshold: float) -> MetricsConfig:
    from awarl.config import MetricsConfig

    return MetricsConfig().model_copy(update={"correctness": correctness, "f1_threshold": f1_threshold})


def is_correct(answer: str, golds: Sequence[str], correctness: str = "em", f1_threshold: float = 0.8,
               judge_correct: bool | None = None, *, metrics: MetricsConfig | None = None) -> bool:
    """Whether `answer` is correct under the rule `metrics.correctness` with the run's metrics settings
    (without `metrics`: the rule `correctness` at `f1_threshold`, the shipped rules' constants one by one)."""
    metrics = metrics if metrics is not None else _settings(correctness, f1_threshold)
    return correctness_rule(metrics.correctness).check(answer, golds, metrics, judge_correct)


def classify_outcome(answer: str | None, golds: Sequence[str], *, valid: bool, phrases: Sequence[str],
                     correctness: str = "em", f1_threshold: float = 0.8,
                     judge_correct: bool | None = None, metrics: MetricsConfig | None = None) -> Outcome:
    """The single outcome of a trajectory. Invalid: flagged invalid, or no (or blank) final answer.
    With an empty gold list no answer can be correct (abstaining is the right move). Correct: under the rule
    of `metrics` (a run's MetricsConfig), else `correctness` at `f1_threshold` (`is_correct`)."""
    if not valid or answer is None or not answer.strip():
        return Outcome.INVALID
    if is_abstention(answer, phrases):
        return Outcome.ABSTAIN
    if not golds:
        return Outcome.WRONG
    ok = is_correct(answer, golds, correctness, f1_threshold, judge_correct, metrics=metrics)
    return Outcome.CORRECT if ok else Outcome.WRONG


# ------------------------------------------------------------------------------------------ aggregates
RATE_METRICS = ("precision", "accuracy", "ra_f1", "abstention_rate", "reliability")
MEAN_METRICS = ("em", "f1", "cover_em")


def ra_f1(precision: float, accuracy: float) -> float:
    """Harmonic mean of precision and accuracy; 0 when both are 0."""
    s = precision + accuracy
    return 2 * precision * accuracy / s if s > 0 else 0.0


def _rates(correct: Any, wrong: Any, abstain: Any, invalid: Any) -> dict[str, Any]:
    """P, A, RA-F1, rho, reliability from counts; works on numbers and numpy arrays alike."""
    answered = correct + wrong + invalid
    total = answered + abstain
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(answered > 0, correct / np.maximum(answered, 1), 0.0)
        accuracy = np.where(total > 0, correct / np.maximum(total, 1), 0.0)
        rho = np.where(total > 0, abstain / np.maximum(total, 1), 0.0)
        s = precision + accuracy
        f1 = np.where(s > 0, 2 * precision * accuracy / np.where(s > 0, s, 1), 0.0)
    # BAPO's reliability: precision on what is answered, accuracy-weighted by how much is refused.
    reliability = (1 - rho) * precision + rho * accuracy
    return {"precision": precision, "accuracy": accuracy, "ra_f1": f1, "abstention_rate": rho,
            "reliability": reliability}


def _check_values(name: str, values: Sequence[float] | None, n: int) -> None:
    if values is not None and len(values) != n:
        raise ValueError(f"{name}: {len(values)} values for {n} outcomes")


def aggregate(outcomes: Sequence[Outcome], em: Sequence[float] | None = None,
              f1: Sequence[float] | None = None, cover: Sequence[float] | None = None) -> dict[str, Any]:
    """Counts and rates of a list of outcomes: P = correct/answered (answered includes invalid),
    A = correct/all, RA-F1 = 2PA/(P+A), abstention rate, reliability, and the means of em/f1/cover_em
    when given (None otherwise)."""
    n = len(outcomes)
    for name, vals in (("em", em), ("f1", f1), ("cover", cover)):
        _check_values(name, vals, n)
    counts = Counter(Outcome(o) for o in outcomes)
    c, w, a, i = (counts[Outcome.CORRECT], counts[Outcome.WRONG], counts[Outcome.ABSTAIN], counts[Outcome.INVALID])
    out: dict[str, Any] = {"n": n, "correct": c, "wrong": w, "abstain": a, "invalid": i, "answered": c + w + i}
    out.update({k: float(v) for k, v in _rates(c, w, a, i).items()})
    for name, vals in (("em", em), ("f1", f1), ("cover_em", cover)):
        out[name] = float(np.mean(vals)) if vals is not None and n else (0.0 if vals is not None else None)
    return out


_CODE = {Outcome.CORRECT: 0, Outcome.WRONG: 1, Outcome.ABSTAIN: 2, Outcome.INVALID: 3}


def _bootstrap_draws(outcomes: Sequence[Outcome], metric: str | Callable[[list[Outcome]], float], n: int,
                     rng: np.random.Generator, values: Sequence[float] | None = None) -> np.ndarray:
    """`n` bootstrap replicates of a metric (resampling questions with replacement)."""
    size = len(outcomes)
    if size == 0:
        raise ValueError("bootstrap of an empty outcome list")
    return _draws_at(outcomes, metric, rng.integers(0, size, size=(n, size)), values)


def _draws_at(outcomes: Sequence[Outcome], metric: str | Callable[[list[Outcome]], float], idx: np.ndarray,
              values: Sequence[float] | None = None) -> np.ndarray:
    """The metric on each row of `idx` (resampled question indices, shape [replicates, questions])."""
    size = len(outcomes)
    if callable(metric):
        outs = list(outcomes)
        return np.array([metric([outs[j] for j in row]) for row in idx], dtype=float)
    if metric in MEAN_METRICS:
        if values is None:
            raise ValueError(f"bootstrap of {metric!r} needs its per-question values")
        _check_values(metric, values, size)
        return np.asarray(values, dtype=float)[idx].mean(axis=1)
    if metric not in RATE_METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(RATE_METRICS + MEAN_METRICS)}")
    codes = np.array([_CODE[Outcome(o)] for o in outcomes])[idx]
    c, w, a, i = ((codes == k).sum(axis=1) for k in range(4))
    return np.asarray(_rates(c, w, a, i)[metric], dtype=float)


def percentile_ci(draws: np.ndarray) -> tuple[float, float]:
    """The 95% percentile interval of bootstrap draws."""
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return float(lo), float(hi)


def bootstrap_ci(outcomes: Sequence[Outcome], metric: str | Callable[[list[Outcome]], float], n: int = 1000,
                 seed: int = 0, values: Sequence[float] | None = None) -> tuple[float, float]:
    """95% percentile bootstrap interval of `metric` (a name from aggregate(), or a function of an outcome
    list). em/f1/cover_em need their per-question `values`."""
    if n < 1:
        raise ValueError(f"bootstrap needs n >= 1 resamples, got {n}")
    return percentile_ci(_bootstrap_draws(outcomes, metric, n, np.random.default_rng(seed), values))


def bootstrap_macro_ci(per_dataset: dict[str, Sequence[Outcome]], metric: str, n: int = 1000, seed: int = 0,
                       values: dict[str, Sequence[float]] | None = None) -> tuple[float, float]:
    """95% interval of the macro average: resample within each dataset, average the per-dataset metric."""
    if n < 1:
        raise ValueError(f"bootstrap needs n >= 1 resamples, got {n}")
    if not per_dataset:
        raise ValueError("bootstrap of an empty dataset table")
    rng = np.random.default_rng(seed)
    draws = [_bootstrap_draws(outs, metric, n, rng, (values or {}).get(ds))
             for ds, outs in sorted(per_dataset.items())]
    return percentile_ci(np.mean(draws, axis=0))


def paired_bootstrap_delta(a: Mapping[str, Sequence[Outcome]], b: Mapping[str, Sequence[Outcome]], metric: str,
                           n: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Macro `metric` of run b minus run a on the same questions, with its 95% paired-bootstrap interval.

    `a[ds]` and `b[ds]` list the two runs' outcomes of the same questions in the same order. Each replicate
    resamples questions within each dataset and scores BOTH runs on that resample, so question difficulty
    cancels out and the interval is much tighter than comparing two separate intervals. `p_le_0` is the
    share of replicates where the difference is <= 0 (for a metric where higher is better, a one-sided
    bootstrap p-value of "b beats a")."""
    return paired_bootstrap_delta_pooled([(a, b)], metric, n, seed)


def paired_bootstrap_delta_pooled(pairs: Sequence[tuple[Mapping[str, Sequence[Outcome]], Mapping[str, Sequence[Outcome]]]],
                                  metric: str, n: int = 1000, seed: int = 0) -> dict[str, Any]:
    """`paired_bootstrap_delta` averaged over several pairs of runs on the SAME questions (e.g. one pair per
    training seed: AWA-RL seed s against plain GRPO seed s): each replicate resamples the questions once and
    scores every pair on that resample, so the interval treats a question, not a (question, seed) row, as the
    unit that was sampled (the seeds' runs of one question are not independent draws)."""
    if metric not in RATE_METRICS:
        raise ValueError(f"paired bootstrap supports {', '.join(RATE_METRICS)}, got {metric!r}")
    if n < 1:
        raise ValueError(f"bootstrap needs n >= 1 resamples, got {n}")
    if not pairs:
        raise ValueError("paired bootstrap of no pair of runs")
    datasets = sorted(pairs[0][0])
    for a, b in pairs:
        if sorted(a) != datasets or sorted(b) != datasets or not a:
            raise ValueError(f"every run must cover the same datasets, got {sorted(a)} and {sorted(b)}")
    rng = np.random.default_rng(seed)
    point, diffs = [], []
    for ds in datasets:
        size = len(pairs[0][0][ds])
        if not size or any(len(a[ds]) != size or len(b[ds]) != size for a, b in pairs):
            raise ValueError(f"{ds}: the runs must list the same questions ({[(len(a[ds]), len(b[ds])) for a, b in pairs]})")
        idx = rng.integers(0, size, size=(n, size))
        point.append(np.mean([aggregate(b[ds])[metric] - aggregate(a[ds])[metric] for a, b in pairs]))
        diffs.append(np.mean([_draws_at(b[ds], metric, idx) - _draws_at(a[ds], metric, idx) for a, b in pairs],
                             axis=0))
    draws = np.mean(diffs, axis=0)
    lo, hi = percentile_ci(draws)
    return {"delta": float(np.mean(point)), "ci": [lo, hi], "p_le_0": float(np.mean(draws <= 0))}


def macro_average(per_dataset: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Unweighted mean over datasets of every rate and mean metric. RA-F1 is the mean of the per-dataset
    RA-F1 (what the paper reports), not the harmonic mean of macro P and macro A."""
    out: dict[str, Any] = {"datasets": sorted(per_dataset), "n": sum(int(m.get("n", 0)) for m in per_dataset.values())}
    for key in RATE_METRICS + MEAN_METRICS:
        vals = [m[key] for m in per_dataset.values() if m.get(key) is not None]
        out[key] = float(np.mean(vals)) if vals and len(vals) == len(per_dataset) else None
    return out
