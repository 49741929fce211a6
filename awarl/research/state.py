"""The critic loop's state: one `ResearchRun` per question, its `Step`s (sub-questions) and their `Attempt`s,
and the rules that move them (what is ready to ask, when an attempt is approved, a re-query discarded, a step
exhausted or blocked; the synthesis and its final verdict). `awarl.research.loop.run_research` drives runs with
the rollout engine and the judge; `awarl.research.report_build.build_report` turns a finished run into its
report. See loop.py's docstring for the rules in words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from awarl.agent.rollout import Trajectory
from awarl.config import ResearchConfig
from awarl.critic.schema import CriticInput, CriticOutput
from awarl.data.evidence import GoldEvidence
from awarl.data.types import QAExample
from awarl.research.critic import claims_to_name, own_answer, passage_refs, step_gold, synthesis_input
from awarl.research.executor import to_result
from awarl.research.planner import Planner, fill
from awarl.research.schema import ExecutorResult, Plan, SubQuestion

RESEARCH_DEFAULTS = ResearchConfig()


@dataclass
class Attempt:
    result: ExecutorResult
    verdict: CriticOutput | None
    judge: str
    passages: list[dict]

    @property
    def groundedness(self) -> float:
        return float(self.verdict.overall_groundedness) if self.verdict is not None else 0.0

    @property
    def answered(self) -> bool:
        r = self.result
        return r.valid and not r.abstained and bool(r.summary.strip())

    @property
    def judge_failed(self) -> bool:
        """The executor answered and the judge gave no valid verdict on it (an outage, a reply off schema)."""
        return self.answered and self.verdict is None

    @property
    def executor_failed(self) -> bool:
        """The executor's trajectory is invalid (no answer it could be held to)."""
        return not self.result.valid


@dataclass
class Step:
    sub: SubQuestion
    asked: str = ""                     # the sub-question with its dependencies filled in
    attempts: list[Attempt] = field(default_factory=list)
    approved: bool = False
    exhausted: bool = False
    blocked_by: int | None = None       # the dependency that was never approved
    gold: GoldEvidence | None = None                  # the step's gold evidence (for the gold judge only)
    pending: str | None = None          # the re-query being drawn
    discarded: list[list[str]] = field(default_factory=list)  # searches of draws that only repeated
    draws: int = 0                      # discarded draws of the pending attempt
    probe: dict | None = None           # the loop's own search for the sub-question, before a gap is stated

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
                 abstention_phrase: str, example: QAExample | None = None, requery_draws: int = RESEARCH_DEFAULTS.requery_draws,
                 min_claim_confidence: float = RESEARCH_DEFAULTS.min_claim_confidence,
                 drift_overlap: float = RESEARCH_DEFAULTS.drift_overlap,
                 max_question_chars: int = RESEARCH_DEFAULTS.max_question_chars) -> None:
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
        # The question's own sampling seed (set by the caller, e.g. `question_seed` of its dataset and id): every
        # draw of this run is seeded from it alone, so it samples the same whatever other runs share its batches.
        self.seed: int | None = None
        # What the report was made with: the index, the executor, the judge, the planner (run_research sets it).
        self.provenance: dict[str, Any] = {}

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

    def to_probe(self) -> list[Step]:
        """The exhausted steps that searched and stayed unsupported, whose sub-question the loop searches itself
        before it may call them a coverage gap (report_build: a failure of the query when that search finds an
        answering passage)."""
        return [s for s in self.steps if s.exhausted and s.probe is None and s.tried()
                and not all(a.judge_failed or a.executor_failed for a in s.attempts)]

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
        if self.plan.reduce.kind == "join":  # each part with its own step's citations: the others cite other parts
            self.final_inputs = [synthesis_input(by_index[p].asked, answers[p], refs,
                                                 set(by_index[p].attempts[-1].result.cited_ids), self.gold)
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
            conflicts=[c for v in present for c in v.conflicts],
            reported_groundedness=sum(reported) / len(reported) if reported else None)

def check_question(question: Any, max_chars: int) -> None:
    """A research question must be UTF-8 text with something to research, within research.max_question_chars."""
    if not isinstance(question, str) or not question.strip():
        raise ValueError("the research question is empty or only whitespace: give a question to research")
    bad = next((i for i, ch in enumerate(question) if 0xD800 <= ord(ch) <= 0xDFFF), None)
    if bad is not None:  # bytes that were not UTF-8 (the command line keeps them as lone surrogates)
        byte = f"0x{ord(question[bad]) - 0xDC00:02x}" if ord(question[bad]) >= 0xDC80 else repr(question[bad])
        raise ValueError(f"the research question is not valid UTF-8 (undecodable byte {byte} at character {bad + 1}): "
                         "give the question as UTF-8 text")
    if len(question) > max_chars:
        raise ValueError(f"the research question is {len(question):,} characters, over the limit of {max_chars:,} "
                         "(research.max_question_chars)")
