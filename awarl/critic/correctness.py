"""`metrics.correctness: judge`: answers graded by an LLM against the gold answers (eval, estimate, train).

Only answers that need a verdict are sent: a valid, non-abstaining answer to a question with gold answers
whose normalised exact match failed (an exact match is the same answer, so it costs no call). The grader
is the OpenAI-compatible endpoint of the `critic:` section (`base_url`, `model`, cache, retries), whatever
`critic.judge` is set to for citations. When it fails on an item (transport, schema), exact match's False
stands and the item is flagged: a run never stops on a flaky endpoint, and the failures are counted.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from awarl.config import CriticConfig, MetricsConfig
from awarl.critic.openai_judge import OpenAIJudge
from awarl.critic.schema import AnswerCheck
from awarl.metrics import Outcome, classify_outcome, exact_match, is_abstention

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Grade:
    correct: bool | None  # None: no verdict needed (invalid, abstention, no gold answer) or no grader
    failed: bool = False  # the grader gave no verdict; `correct` is exact match's


class Answered(Protocol):
    """What the outcome rule reads of a parsed trajectory (agent.parser.ParsedTrajectory is one)."""

    @property
    def answer(self) -> str | None: ...

    @property
    def valid(self) -> bool: ...


class Rollout(Protocol):
    """A rollout trajectory, as far as grading goes (agent.rollout.Trajectory is one)."""

    @property
    def parsed(self) -> Answered: ...


class AnswerGrader(Protocol):
    """What grades answers against gold ones (`OpenAIJudge`; tests may stand in their own)."""

    failures: int
    failure_reasons: Counter[str]

    def grade_answers(self, items: list[AnswerCheck]) -> list[bool | None]:
        """Whether each prediction is the same answer as a gold one; None where no verdict came."""
        ...

    def close(self) -> None: ...


def make_answer_grader(metrics: MetricsConfig, critic: CriticConfig,
                       cache_dir: str | os.PathLike[str] | None) -> AnswerGrader | None:
    """The LLM grader (the endpoint of `critic`) when `metrics.correctness` is `judge`, else None."""
    if metrics.correctness != "judge":
        return None

    return OpenAIJudge(critic, cache_dir=critic.cache_dir or cache_dir)


def grade_answers(grader: AnswerGrader | None, items: Sequence[tuple[str, str | None, bool, Sequence[str]]],
                  phrases: Sequence[str]) -> list[Grade]:
    """One Grade per (question, answer, valid, golds), asking the grader (concurrently) only for the
    distinct answers that need it."""
    grades = [Grade(None)] * len(items)
    if grader is None:
        return grades
    ask: list[int] = []
    for i, (_, answer, valid, golds) in enumerate(items):
        if not valid or answer is None or not answer.strip() or not golds or is_abstention(answer, phrases):
            continue
        if exact_match(answer, golds):
            grades[i] = Grade(True)
        else:
            ask.append(i)
    # One call per distinct (question, answer, golds): the K samples of a question often agree.
    distinct = list(dict.fromkeys((items[i][0], items[i][1] or "", tuple(items[i][3])) for i in ask))
    verdicts = dict(zip(distinct, grader.grade_answers([AnswerCheck(question=q, prediction=a, answers=list(g))
                                                        for q, a, g in distinct]), strict=True))
    for i in ask:
        v = verdicts[(items[i][0], items[i][1] or "", tuple(items[i][3]))]
        grades[i] = Grade(False, failed=True) if v is None else Grade(bool(v))
    return grades


def grade_trajectories(grader: AnswerGrader | None, questions: list[str], trajs: Sequence[Rollout], golds: list[list[str]],
                       phrases: list[str]) -> list[Grade]:
    """The grader's verdicts for a batch of rollout trajectories (all `Grade(None)` without a grader)."""
    return grade_answers(grader, [(q, t.parsed.answer, t.parsed.valid, g)
                                  for q, t, g in zip(questions, trajs, golds, strict=True)], phrases)


def answer_outcome(answer: str | None, golds: list[str], metrics: MetricsConfig, phrases: Sequence[str], *,
                   valid: bool, grade: Grade | None = None) -> Outcome:
    """The outcome of an answer under the run's correctness rule (`metrics.correctness`; `grade`: the LLM
    grader's verdict under `judge`): the one rule for trajectories and the critic loop's reports."""
    return classify_outcome(answer, golds, valid=valid, phrases=phrases, correctness=metrics.correctness,
                            f1_threshold=metrics.f1_threshold, judge_correct=grade.correct if grade else None)


def trajectory_outcome(parsed: Answered, golds: list[str], metrics: MetricsConfig, phrases: Sequence[str],
                       grade: Grade | None = None) -> Outcome:
    """The outcome of a parsed trajectory under the run's correctness rule, the same in evaluation,
    estimation and training. `phrases`: the engine's abstention phrases (template + config), so the outcome
    and the parser's `abstained` flag agree; `grade`: the LLM grader's verdict (`metrics.correctness: judge`)."""
    return answer_outcome(parsed.answer, golds, metrics, phrases, valid=parsed.valid, grade=grade)


def graded_fields(grade: Grade | None) -> dict[str, bool]:
    """What a predictions line records of the grader's verdict: `judge_correct` (and `judge_failed` when the
    grader gave none and exact match decided), nothing when no verdict was needed."""
    if grade is None or grade.correct is None:
        return {}
    return {"judge_correct": grade.correct, **({"judge_failed": True} if grade.failed else {})}


def close_grader(grader: AnswerGrader | None, flagged_in: str | None = None) -> None:
    """Close the grader's HTTP client and warn once about its failures (`flagged_in`: where the failed
    lines are marked `judge_failed`)."""
    if grader is None:
        return
    grader.close()
    if grader.failures:
        log.warning("answer grader: %d failure(s) (%s); those answers kept exact match's verdict%s",
                    grader.failures, dict(grader.failure_reasons),
                    f" and are flagged judge_failed in {flagged_in}" if flagged_in else "")
