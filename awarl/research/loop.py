"""The critic loop (the critic-loop article, sections 2-6): plan -> execute (map) -> criticise -> re-queue what
is unsupported, up to a hard limit -> synthesise (reduce) -> criticise the synthesis -> report, with the
coverage gaps stated instead of filled.

One `ResearchRun` is the state of one question; `run_research` drives any number of them together, so each
round's sub-questions of every question go to the rollout engine as one batch and to the judge as one call.
Approval: an attempt is approved when the executor answered (valid, not an abstention) and the critic found
at least `research.approve_threshold` of its claims grounded. A step is attempted at most
`research.max_iterations` times; a step whose dependency was never approved is not asked at all (its
question would carry an unsupported value). The final answer is approved only when every step is, the final
pass over the synthesis reaches the threshold too, and no conflicting values were found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from awarl.critic.schema import ClaimVerification, CriticOutput
from awarl.research.critic import conflicts, step_gold, synthesis_input, unsupported_claims, verify
from awarl.research.executor import critic_input, execute, to_result
from awarl.research.planner import Planner, fill
from awarl.research.schema import ExecutorResult, ResearchReport, SubQuestion


@dataclass
class Step:
    sub: SubQuestion
    asked: str = ""                     # the sub-question with its dependencies filled in
    results: list[ExecutorResult] = field(default_factory=list)
    verdicts: list[CriticOutput | None] = field(default_factory=list)
    passages: list[list[dict]] = field(default_factory=list)
    approved: bool = False
    exhausted: bool = False
    blocked_by: int | None = None       # the dependency that was never approved
    gold: Any = None                    # the step's gold evidence (for the gold judge only)

    @property
    def done(self) -> bool:
        return self.approved or self.exhausted or self.blocked_by is not None

    def groundedness(self, i: int) -> float:
        v = self.verdicts[i]
        return float(v.overall_groundedness) if v is not None else 0.0


class ResearchRun:
    """The loop's state for one question."""

    def __init__(self, question: str, planner: Planner, *, approve_threshold: float, max_iterations: int,
                 abstention_phrase: str, example: Any = None) -> None:
        self.question, self.planner = question, planner
        self.threshold, self.max_iterations, self.abstention = approve_threshold, max_iterations, abstention_phrase
        plan = planner.decompose(question, example)
        self.steps = [Step(s, gold=g) for s, g in zip(plan, step_gold(example, len(plan)), strict=True)]
        self.gold = step_gold(example, 1)[0]
        self.final: tuple[str, Any] | None = None  # (synthesised answer, critic input of the final pass)
        self.final_verdict: CriticOutput | None = None

    def answers(self) -> dict[int, str]:
        return {s.sub.index: s.results[-1].summary for s in self.steps if s.approved}

    @property
    def finished(self) -> bool:
        return all(s.done for s in self.steps)

    def ready(self) -> list[tuple[Step, str]]:
        """The steps to execute this round, with the text the executor gets."""
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
            if not step.results:
                step.asked = fill(step.sub.text, self.answers())
                out.append((step, step.asked))
            else:
                out.append((step, self.planner.requery(step.asked, step.results[-1],
                                                        unsupported_claims(step.verdicts[-1]))))
        return out

    def absorb(self, step: Step, traj: Any, verdict: CriticOutput | None) -> None:
        result = to_result(step.asked, traj, attempt=len(step.results) + 1)
        step.results.append(result)
        step.verdicts.append(verdict)
        step.passages.append([dict(d) for d in traj.passages])
        step.approved = (result.valid and not result.abstained and bool(result.summary.strip())
                         and verdict is not None and verdict.overall_groundedness >= self.threshold)
        step.exhausted = not step.approved and len(step.results) >= self.max_iterations

    def synthesis(self) -> Any:
        """The final pass's critic input, once every step is approved (else None: nothing to synthesise)."""
        if not self.steps or not all(s.approved for s in self.steps):
            return None
        answer = self.planner.synthesize(self.question, [s.sub for s in self.steps], self.answers())
        passages = [d for s in self.steps for d in s.passages[-1]]
        cited = {pid for s in self.steps for pid in s.results[-1].cited_ids}
        self.final = (answer, synthesis_input(self.question, answer, passages, cited, self.gold))
        return self.final[1]

    def report(self, final_verdict: CriticOutput | None) -> ResearchReport:
        self.final_verdict = final_verdict
        findings = [c for s in self.steps for v in s.verdicts[-1:] if v for c in v.verified_claims]
        flags = conflicts([(s.asked, r.summary, v is not None and v.overall_groundedness >= self.threshold)
                           for s in self.steps for r, v in zip(s.results, s.verdicts, strict=True)])
        flags += [f for s in self.steps for v in s.verdicts[-1:] if v for f in v.flags]
        gaps = self._gaps()
        answer, approved = self.abstention, False
        if self.final is not None:
            findings = list(final_verdict.verified_claims if final_verdict else []) + findings
            g = float(final_verdict.overall_groundedness) if final_verdict else 0.0
            if g >= self.threshold and not any(f.startswith("conflicting values") for f in flags):
                answer, approved = self.final[0], True
            elif g < self.threshold:
                gaps.append(f"final answer {self.final[0]!r}: {g:.2f} of its claims grounded in the sources, "
                            f"below the approval threshold {self.threshold:.2f}")
            else:
                gaps.append(f"final answer {self.final[0]!r}: the sources give conflicting values (see flags)")
        unique = list({(c.claim, c.status, tuple(c.source_ids)): c for c in findings}.values())
        return ResearchReport(
            question=self.question, answer=answer, approved=approved, findings=unique, coverage_gaps=gaps,
            flags=list(dict.fromkeys(flags)), confidence=_confidence(unique),
            iterations=max((len(s.results) for s in self.steps), default=0),
            requeries=sum(max(len(s.results) - 1, 0) for s in self.steps),
            groundedness_before=_mean([s.groundedness(0) for s in self.steps if s.results]),
            groundedness_after=_mean([s.groundedness(-1) for s in self.steps if s.results]),
            sub_questions=[{"index": s.sub.index, "text": s.asked or s.sub.text, "attempts": len(s.results),
                            "approved": s.approved, "answer": s.results[-1].summary if s.results else None,
                            "searches": [q for r in s.results for q in r.searches]} for s in self.steps])

    def _gaps(self) -> list[str]:
        gaps = []
        for s in self.steps:
            if not s.done:  # cannot happen with a planner whose dependencies point backwards; said if it does
                gaps.append(f"{s.sub.text}: not researched (its dependencies never resolved)")
            elif s.blocked_by is not None:
                gaps.append(f"{s.sub.text}: not researched, it needs the answer of step {s.blocked_by + 1}, "
                            "which the sources did not support")
            elif s.exhausted:
                claims = unsupported_claims(s.verdicts[-1]) or ["no answer was found"]
                tried = "; ".join(q for r in s.results for q in r.searches) or "none"
                gaps.append(f"{s.asked}: {'; '.join(claims)} (unsupported after {len(s.results)} attempt(s); "
                            f"searches tried: {tried})")
        return gaps


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _confidence(findings: Sequence[ClaimVerification]) -> float:
    return sum(c.status == "grounded" for c in findings) / len(findings) if findings else 0.0


def run_research(runs: Sequence[ResearchRun], engine: Any, judge: Any, *, temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None) -> list[ResearchReport]:
    """Drive the runs to their reports: every round executes the ready steps of every run in one engine batch
    and verifies them in one judge call; then every synthesis is verified in one more."""
    rnd = 0
    while True:
        jobs = [(run, step, text) for run in runs if not run.finished for step, text in run.ready()]
        if not jobs:
            break
        trajs = execute(engine, [text for *_, text in jobs], temperature=temperature, top_p=top_p,
                        seed=None if seed is None else seed + 7919 * rnd)
        verdicts = verify(judge, [critic_input(step.asked, t, step.gold)
                                  for (_, step, _), t in zip(jobs, trajs, strict=True)])
        for (run, step, _), traj, verdict in zip(jobs, trajs, verdicts, strict=True):
            run.absorb(step, traj, verdict)
        rnd += 1
    finals = [run.synthesis() for run in runs]
    verdicts = iter(verify(judge, [f for f in finals if f is not None]))
    return [run.report(next(verdicts) if f is not None else None) for run, f in zip(runs, finals, strict=True)]
