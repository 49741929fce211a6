"""The critic loop (the critic-loop article, sections 2-6): plan -> execute (map) -> criticise -> re-queue what
is unsupported, up to a hard limit -> synthesise (reduce) -> criticise the synthesis -> report, with the
coverage gaps stated instead of filled.

One `ResearchRun` is the state of one question; `run_research` drives any number of them together, so each
round's sub-questions of every question go to the rollout engine as one batch and to the judge as one call.

Approval: an attempt is approved when the executor answered (valid, not an abstention) and at least
`approve_threshold` of its claims are grounded, counted from the audited verdict (a judge's own figure is
logged, never trusted). Re-queries are real: a re-query is sampled (`requery_temperature`) and its searches
must include one never tried by an earlier attempt; a draw that only repeats is discarded and drawn again,
up to `requery_draws` draws, after which the attempt counts as a repeat. A step is attempted at most
`max_iterations` times; a step whose dependency was never approved is not asked at all. What stays
unsupported is a coverage gap only when it was searched for with different terms; a step that never
searched, or whose re-queries only repeated, is a query failure. The final answer is approved only when
every step is, the reduce decided it, the final pass reaches the threshold and no values conflict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from awarl.agent.rollout import RolloutEngine, Trajectory
from awarl.config import ResearchConfig
from awarl.critic.schema import CriticInput, CriticOutput, Judge
from awarl.research.critic import (
    answered,
    claims_to_name,
    judge_name,
    nothing_to_verify,
    own_answer,
    passage_refs,
    step_gold,
    synthesis_input,
    verify,
)
from awarl.research.executor import critic_input, execute, to_result
from awarl.research.planner import Planner, fill
from awarl.research.report_build import build_report
from awarl.research.schema import ExecutorResult, Plan, ResearchReport, SubQuestion

_DEFAULTS = ResearchConfig()


@dataclass
class Attempt:
    result: ExecutorResult
    verdict: CriticOutput | None
    judge: str
    passages: list[dict]

    @property
    def groundedness(self) -> float:
        return float(self.verdict.overall_groundedness) if self.verdict is not None else 0.0


@dataclass
class Step:
    sub: SubQuestion
    asked: str = ""                     # the sub-question with its dependencies filled in
    attempts: list[Attempt] = field(default_factory=list)
    approved: bool = False
    exhausted: bool = False
    blocked_by: int | None = None       # the dependency that was never approved
    gold: Any = None                    # the step's gold evidence (for the gold judge only)
    pending: str | None = None          # the re-query being drawn
    discarded: list[list[str]] = field(default_factory=list)  # searches of draws that only repeated
    draws: int = 0                      # discarded draws of the pending attempt

    @property
    def done(self) -> bool:
        return self.approved or self.exhausted or self.blocked_by is not None

    def tried(self) -> list[str]:
        return list(dict.fromkeys(q for a in self.attempts for q in a.result.searches))


def _norm(query: str) -> str:
    return " ".join(query.lower().split())


class ResearchRun:
    """The loop's state for one question (validated here, so the API refuses what the CLI refuses)."""

    def __init__(self, question: str, planner: Planner, *, approve_threshold: float, max_iterations: int,
                 abstention_phrase: str, example: Any = None, requery_draws: int = _DEFAULTS.requery_draws,
                 min_claim_confidence: float = _DEFAULTS.min_claim_confidence,
                 drift_overlap: float = _DEFAULTS.drift_overlap,
                 max_question_chars: int = _DEFAULTS.max_question_chars) -> None:
        check_question(question, max_question_chars)
        if not isinstance(max_iterations, int) or max_iterations < 1:
            raise ValueError(f"max_iterations must be an integer >= 1 (research.max_iterations), got {max_iterations!r}")
        if not 0.0 <= approve_threshold <= 1.0:
            raise ValueError(f"approve_threshold must be in [0, 1] (research.approve_threshold), got {approve_threshold!r}")
        if requery_draws < 1:
            raise ValueError(f"requery_draws must be >= 1 (research.requery_draws), got {requery_draws!r}")
        self.question, self.planner = question, planner
        self.threshold, self.max_iterations, self.abstention = approve_threshold, max_iterations, abstention_phrase
        self.requery_draws, self.min_confidence, self.drift_overlap = requery_draws, min_claim_confidence, drift_overlap
        self.plan: Plan = planner.decompose(question, example)
        self.steps = [Step(s, gold=g) for s, g in zip(self.plan.steps, step_gold(example, len(self.plan.steps)),
                                                      strict=True)]
        self.gold = step_gold(example, 1)[0]
        self.final: tuple[str, CriticInput] | None = None  # (synthesised answer, the whole-answer critic input)
        self.final_inputs: list[CriticInput] = []          # what the final pass verifies (a join: each part)
        self.final_verdict: CriticOutput | None = None
        self.final_judge = ""
        self.reduce_note = ""

    def answers(self) -> dict[int, str]:
        return {s.sub.index: s.attempts[-1].result.summary for s in self.steps if s.approved}

    @property
    def finished(self) -> bool:
        return all(s.done for s in self.steps)

    def ready(self) -> list[tuple[Step, str, bool]]:
        """The steps to execute this round: (step, the text the executor gets, whether it is a re-query)."""
        out = []
        by_index = {s.sub.index: s for s in self.steps}
        for step in self.steps:
            if step.done:
                continue
            deps = [by_index[d] for d in step.sub.depends_on if d in by_index]
            failed = next((d for d in deps if d.done and not d.approved), None)
            if failed is not None:
                step.blocked_by = failed.sub.index
                continue
            if not all(d.approved for d in deps):
                continue
            if not step.attempts:
                step.asked = fill(step.sub.text, self.answers())
                out.append((step, step.asked, False))
                continue
            if step.pending is None:
                last = step.attempts[-1]
                tried = [*step.tried(), *(q for d in step.discarded for q in d)]
                step.pending = self.planner.requery(step.asked, last.result,
                                                    claims_to_name(last.verdict, last.judge, own_answer(last.result)),
                                                    list(dict.fromkeys(tried)))
            out.append((step, step.pending, True))
        return out

    def absorb(self, step: Step, traj: Trajectory, verdict: CriticOutput | None, judge: str) -> None:
        """Record one draw: a re-query draw whose searches were all tried before is discarded and drawn again
        while draws remain; otherwise it is the step's next attempt."""
        result = to_result(step.asked, traj, attempt=len(step.attempts) + 1)
        new = {_norm(q) for q in result.searches} - {_norm(q) for q in step.tried()}
        if step.attempts and not new and step.draws + 1 < self.requery_draws:
            step.draws += 1
            step.discarded.append(list(result.searches))
            return
        result = result.model_copy(update={"repeated": bool(step.attempts) and not new, "draws": step.draws + 1})
        step.attempts.append(Attempt(result, verdict, judge, [dict(d) for d in traj.passages]))
        step.pending, step.draws = None, 0
        step.approved = (result.valid and not result.abstained and bool(result.summary.strip())
                         and verdict is not None and verdict.overall_groundedness >= self.threshold)
        step.exhausted = not step.approved and len(step.attempts) >= self.max_iterations

    def synthesis(self) -> list[CriticInput]:
        """The final pass's critic inputs once every step is approved and the reduce decided an answer (else
        none: nothing to synthesise). A joined answer is checked part by part, each against every passage."""
        if not self.steps or not all(s.approved for s in self.steps):
            return []
        answers = self.answers()
        answer = self.planner.synthesize(self.question, self.plan, answers).strip()
        explain = getattr(self.planner, "explain", None)
        self.reduce_note = explain(self.plan, answers) if explain else "composed by the LLM planner"
        if not answer or answer.lower() == self.abstention.lower():
            return []
        refs = passage_refs([d for s in self.steps for d in s.attempts[-1].passages])
        cited = {pid for s in self.steps for pid in s.attempts[-1].result.cited_ids}
        whole = synthesis_input(self.question, answer, refs, cited, self.gold)
        self.final = (answer, whole)
        by_index = {s.sub.index: s for s in self.steps}
        if self.plan.reduce.kind == "join":
            self.final_inputs = [synthesis_input(by_index[p].asked, answers[p], refs, cited, self.gold)
                                 for p in self.plan.reduce.parts]
        else:
            self.final_inputs = [whole]
        return self.final_inputs

    def settle_final(self, verdicts: Sequence[tuple[CriticOutput | None, str]]) -> None:
        """The final pass's verdict: the parts' claims together, groundedness recounted over all of them."""
        if not verdicts:
            return
        self.final_judge = verdicts[0][1]
        present = [v for v, _ in verdicts if v is not None]
        if len(present) < len(verdicts):
            self.final_verdict = None
            return
        claims = [c for v in present for c in v.verified_claims]
        grounded = sum(c.status == "grounded" for c in claims)
        reported = [v.reported_groundedness for v in present if v.reported_groundedness is not None]
        self.final_verdict = CriticOutput(
            verified_claims=claims, overall_groundedness=grounded / len(claims) if claims else 0.0,
            flags=list(dict.fromkeys(f for v in present for f in v.flags)),
            reported_groundedness=sum(reported) / len(reported) if reported else None)

    def report(self) -> ResearchReport:
        return build_report(self)


def check_question(question: Any, max_chars: int) -> None:
    """A research question must be text with something to research, within research.max_question_chars."""
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the research question is empty or only whitespace: give a question to research")
    if len(question) > max_chars:
        raise ValueError(f"the research question is {len(question):,} characters, over the limit of {max_chars:,} "
                         "(research.max_question_chars)")


def _seed(seed: int | None, rnd: int, requery: bool) -> int | None:
    return None if seed is None else seed + 7919 * rnd + (104729 if requery else 0)


def run_research(runs: Sequence[ResearchRun], engine: RolloutEngine, judge: Judge | None, *, temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None,
                 requery_temperature: float = _DEFAULTS.requery_temperature) -> list[ResearchReport]:
    """Drive the runs to their reports: every round executes the ready steps of every run in one engine batch
    per temperature (first attempts at `temperature`, re-queries sampled at `requery_temperature`) and
    verifies them in one judge call; then every synthesis is verified in one more."""
    rnd = 0
    while True:
        jobs = [(run, step, text, rq) for run in runs if not run.finished for step, text, rq in run.ready()]
        if not jobs:
            break
        trajs: list[Any] = [None] * len(jobs)
        for rq, temp in ((False, temperature), (True, requery_temperature)):
            idx = [i for i, job in enumerate(jobs) if job[3] is rq]
            got = execute(engine, [jobs[i][2] for i in idx], temperature=temp, top_p=top_p, seed=_seed(seed, rnd, rq))
            for i, t in zip(idx, got, strict=True):
                trajs[i] = t
        inputs = [critic_input(step.asked, t, step.gold) for (_, step, _, _), t in zip(jobs, trajs, strict=True)]
        asked = [i for i, t in enumerate(trajs) if answered(t)]  # an abstention has no claims to check
        got_verdicts = dict(zip(asked, verify(judge, [inputs[i] for i in asked]), strict=True))
        for i, ((run, step, _, _), traj) in enumerate(zip(jobs, trajs, strict=True)):
            verdict, name = got_verdicts.get(i) or (nothing_to_verify(), judge_name(judge, inputs[i]) if judge else "none")
            run.absorb(step, traj, verdict, name)
        rnd += 1
    finals = [run.synthesis() for run in runs]
    verdicts = iter(verify(judge, [inp for f in finals for inp in f]))
    for run, f in zip(runs, finals, strict=True):
        run.settle_final([next(verdicts) for _ in f])
    return [run.report() for run in runs]
