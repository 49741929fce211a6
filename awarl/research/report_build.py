"""A finished `ResearchRun` -> its `ResearchReport`: findings with their evidence trail and marks, flags
(cross-question drift, every critic flag including the final pass's, what an approved answer let through),
coverage gaps apart from query failures, and the approval decision (awarl/research/loop.py says the rules).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awarl.critic.audit import disagrees
from awarl.research.critic import ORACLE, claims_to_name, judge_label, own_answer, passage_refs
from awarl.research.drift import Statement, conflicts, read_statement
from awarl.research.findings import dedupe, findings_of, marked_in_answer
from awarl.research.schema import Finding, ResearchReport
from awarl.research.state import ResearchRun, Step

_LONG_CLAIM_WORDS = 5  # a claim longer than a bare value (a name, a date) states its own subject
_CONCLUDED = ("pick", "pick_yes", "all_yes", "same", "common")


def step_outcome(step: Step) -> tuple[str, str]:
    """("coverage" | "query", the sentence) for a step still unsupported after its attempts."""
    n, last = len(step.attempts), step.attempts[-1]
    tried = "; ".join(step.tried()) or "none"
    what = "; ".join(claims_to_name(last.verdict, last.judge, own_answer(last.result)) or ["no answer was found"])
    if not step.tried():
        return "query", (f"{step.asked}: the executor never searched in {n} attempt(s) (answer: {what}): a query "
                         "failure, not evidence that the sources lack it")
    distinct = sum(1 for a in step.attempts if a.result.searches and not a.result.repeated)
    if n > 1 and distinct < 2:
        return "query", (f"{step.asked}: the re-queries repeated the searches already tried ({tried}) in "
                         f"{n} attempt(s), {sum(a.result.draws for a in step.attempts)} draw(s): a query failure, "
                         "not evidence that the sources lack it")
    return "coverage", f"{step.asked}: {what} (unsupported after {n} attempt(s); searches tried: {tried})"


def _gaps(run: ResearchRun) -> tuple[list[str], list[str]]:
    gaps: list[str] = []
    failures: list[str] = []
    kind_of: dict[int, str] = {}
    for s in run.steps:
        if s.exhausted:
            kind, text = step_outcome(s)
            kind_of[s.sub.index] = kind
            (failures if kind == "query" else gaps).append(text)
    by_index = {s.sub.index: s for s in run.steps}
    for s in run.steps:
        if not s.done:  # cannot happen with a planner whose dependencies point backwards; said if it does
            gaps.append(f"{s.sub.text}: not researched (its dependencies never resolved)")
        elif s.blocked_by is not None:
            root = _blocking_root(s, by_index)
            text = (f"{s.sub.text}: not researched, it needs the answer of step {s.blocked_by + 1}, which the sources "
                    "did not support" if root == s.blocked_by else
                    f"{s.sub.text}: not researched, it needs the answer of step {s.blocked_by + 1}, which waited in "
                    f"turn on step {root + 1}, which the sources did not support")
            # a step behind a query failure, however many links behind, is a query failure too
            (failures if kind_of.get(root) == "query" else gaps).append(text)
    return gaps, failures


def _blocking_root(step: Step, by_index: dict[int, Step]) -> int:
    """The exhausted step at the end of `step`'s chain of blocked dependencies (step 3 blocked by step 2,
    itself blocked by step 1: step 1)."""
    root, seen = step.blocked_by, {step.sub.index}
    while root is not None and root not in seen and (nxt := by_index.get(root)) is not None \
            and nxt.blocked_by is not None:
        seen.add(root)
        root = nxt.blocked_by
    return root if root is not None else step.sub.index


def _statements(run: ResearchRun) -> list[Statement]:
    """Each step's answer and its longer claims (the oracle's claims are gold facts, not the step's)."""
    out = []
    for s in run.steps:
        if not s.attempts or not own_answer(s.attempts[-1].result).strip():
            continue
        last = s.attempts[-1]
        answer = last.result.summary
        claims = last.verdict.verified_claims if last.verdict is not None and last.judge != ORACLE else []
        support = [pid for c in claims if c.status != "unsupported" for pid in c.source_ids] or last.result.cited_ids
        out.append(read_statement(s.sub.index, answer, list(dict.fromkeys(support)), s.asked))
        for c in claims:
            if len(c.claim.split()) > _LONG_CLAIM_WORDS and c.claim.strip() != answer.strip():
                out.append(read_statement(s.sub.index, c.claim, c.source_ids, s.asked))
    return out


def _findings(run: ResearchRun) -> list[Finding]:
    out: list[Finding] = []
    if run.final is not None and run.final_verdict is not None:
        out += findings_of(run.final_verdict.verified_claims, run.final[1].passages, step=None,
                           judge=run.final_judge, question=run.question, min_confidence=run.min_confidence)
    if run.final is not None and run.plan.reduce.kind in _CONCLUDED:
        parts = [s for s in run.steps if s.sub.index in (run.plan.reduce.parts or [])]
        out.append(Finding(claim=f"{run.final[0]}: {run.reduce_note}", status="inferred",
                           source_ids=list(dict.fromkeys(pid for s in parts for pid in s.attempts[-1].result.cited_ids)),
                           confidence=1.0, step=None, judge="planner (reduce)",
                           mark=f"inferred: the planner's reduce ({run.plan.reduce.kind}) concluded it from the "
                                "approved findings; no passage states it"))
    for s in run.steps:
        last = s.attempts[-1] if s.attempts else None
        if last is not None and last.verdict is not None:
            out += findings_of(last.verdict.verified_claims, passage_refs(last.passages), step=s.sub.index,
                               judge=last.judge, question=s.asked, min_confidence=run.min_confidence)
    return dedupe(out)


def _decide(run: ResearchRun, flags: list[str], gaps: list[str]) -> tuple[str, bool]:
    """(answer, approved): approved only when every step is, the reduce decided, the final pass reaches the
    threshold and no values conflict (otherwise a gap says why)."""
    if run.steps and all(s.approved for s in run.steps) and run.final is None:
        gaps.append(f"the approved findings do not decide the question: {run.reduce_note or 'no answer composed'}")
        return run.abstention, False
    if run.final is None:
        return run.abstention, False
    answer = run.final[0]
    if run.final_verdict is None:
        gaps.append(f"final answer {answer!r}: the critic gave no valid verdict on it")
        return run.abstention, False
    g = float(run.final_verdict.overall_groundedness)
    if g < run.threshold:
        gaps.append(f"final answer {answer!r}: {g:.2f} of its claims grounded in the sources, below the approval "
                    f"threshold {run.threshold:.2f}")
        return run.abstention, False
    # the drift check writes "conflicting values ..."; an LLM judge words its flags freely ("Passages 2 and 3 give
    # conflicting values for ...")
    if any("conflicting values" in f.lower() for f in flags):
        gaps.append(f"final answer {answer!r}: the sources give conflicting values (see flags)")
        return run.abstention, False
    return answer, True


def _trace(s: Step) -> dict[str, Any]:
    return {"index": s.sub.index, "text": s.asked or s.sub.text, "attempts": len(s.attempts), "approved": s.approved,
            "answer": s.attempts[-1].result.summary if s.attempts else None,
            "searches": [q for a in s.attempts for q in a.result.searches],
            "discarded_draws": [list(d) for d in s.discarded],
            "trace": [{"searches": a.result.searches, "answer": a.result.summary, "judge": judge_label(a.judge),
                       "groundedness": a.groundedness,
                       "judge_groundedness": a.verdict.reported_groundedness if a.verdict is not None else None,
                       "disagrees": bool(a.verdict is not None and disagrees(a.verdict)),
                       "repeated": a.result.repeated, "draws": a.result.draws} for a in s.attempts]}


def build_report(run: ResearchRun) -> ResearchReport:
    findings = _findings(run)
    flags = conflicts(_statements(run), run.drift_overlap)
    flags += [f for s in run.steps for a in s.attempts[-1:] if a.verdict for f in a.verdict.flags]
    if run.final_verdict is not None:
        flags += run.final_verdict.flags  # the final pass sees every passage: its conflicts reach the report
    gaps, failures = _gaps(run)
    answer, approved = _decide(run, flags, gaps)
    if approved:
        flags += marked_in_answer(findings)
    judges = [a.judge for s in run.steps for a in s.attempts] + ([run.final_judge] if run.final_judge else [])
    main = max(set(judges), key=judges.count) if judges else ""
    return ResearchReport(
        question=run.question, answer=answer, approved=approved, findings=findings, coverage_gaps=gaps,
        query_failures=failures, flags=list(dict.fromkeys(flags)), confidence=_confidence(findings),
        iterations=max((len(s.attempts) for s in run.steps), default=0),
        requeries=sum(max(len(s.attempts) - 1, 0) for s in run.steps),
        groundedness_before=_mean([s.attempts[0].groundedness for s in run.steps if s.attempts]),
        groundedness_after=_mean([s.attempts[-1].groundedness for s in run.steps if s.attempts]),
        judge=judge_label(main), oracle=ORACLE in judges,
        plan={"rule": run.plan.rule, "reduce": run.plan.reduce.model_dump(mode="json"),
              "reduce_note": run.reduce_note},
        sub_questions=[_trace(s) for s in run.steps])


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _confidence(findings: Sequence[Finding]) -> float:
    return sum(c.status == "grounded" for c in findings) / len(findings) if findings else 0.0
