"""A finished `ResearchRun` -> its `ResearchReport`: findings with their evidence chain (each quote's span in
the passage text the report keeps; the index, executor, judge and planner identities), conflicts (typed:
within a step, across steps, the final pass's), coverage gaps apart from query failures and apart from the
judge's and the executor's own failures, the approval decision (awarl/research/loop.py says the rules) and
a confidence with one meaning (docs/research.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awarl.critic import is_oracle
from awarl.critic.audit import disagrees
from awarl.critic.schema import CriticOutput, PassageRef
from awarl.research.critic import claims_to_name, judge_label, own_answer, passage_refs
from awarl.research.drift import Statement, conflicts, read_statement
from awarl.research.findings import dedupe, findings_of, marked_in_answer
from awarl.research.schema import Finding, PassageText, ReportConflict, ResearchReport
from awarl.research.state import Attempt, ResearchRun, Step

_LONG_CLAIM_WORDS = 5  # a claim longer than a bare value (a name, a date) states its own subject
_CONCLUDED = ("pick", "pick_yes", "all_yes", "same", "common")
REDUCE_JUDGE = "planner (reduce)"


def _attempt_failures(s: Step) -> list[str]:
    out = []
    for k, a in enumerate(s.attempts, 1):
        if a.judge_failed:
            out.append(f"step {s.sub.index + 1}, attempt {k}: the {judge_label(a.judge)} judge gave no valid verdict "
                       f"on the answer {a.result.summary!r}")
        elif a.executor_failed:
            out.append(f"step {s.sub.index + 1}, attempt {k}: the executor's trajectory is invalid "
                       f"({a.result.invalid_reason or 'no answer'})")
    return out


def step_outcome(step: Step) -> tuple[str, str]:
    """("coverage" | "query" | "failure", the sentence) for a step still unsupported after its attempts."""
    n, last = len(step.attempts), step.attempts[-1]
    tried = "; ".join(repr(q) for q in step.tried()) or "none"
    what = "; ".join(claims_to_name(last.verdict, last.judge, own_answer(last.result)) or ["no answer was found"])
    if all(a.judge_failed or a.executor_failed for a in step.attempts):
        return "failure", (f"{step.asked}: not decided: every attempt failed in the judge or the executor "
                           f"({n} attempt(s); see the failures): neither a gap in the sources nor a failure of the query")
    if not step.tried():
        return "query", (f"{step.asked}: the executor never searched in {n} attempt(s) (answer: {what}): a query "
                         "failure, not evidence that the sources lack it")
    distinct = sum(1 for a in step.attempts if a.result.searches and not a.result.repeated)
    if n > 1 and distinct < 2:
        return "query", (f"{step.asked}: the re-queries repeated the searches already tried ({tried}) in "
                         f"{n} attempt(s), {sum(a.result.draws for a in step.attempts)} draw(s): a query failure, "
                         "not evidence that the sources lack it")
    probe = step.probe or {}
    if probe.get("error"):
        return "failure", (f"{step.asked}: the loop's own search for the sub-question failed ({probe['error']}): not "
                           "reported as a coverage gap, since the sources were never searched on its own terms")
    hit = probe.get("answering")
    if hit:
        return "query", (f"{step.asked}: the loop's own search for the sub-question itself ({step.asked!r}) retrieved "
                         f"{hit['passage_id']} “{_short(hit['text'])}”, which appears to answer it; the executor's "
                         f"searches ({tried}) and answer ({what}) missed it in {n} attempt(s): a query failure, not "
                         "a gap in the sources")
    searched = f"the executor searched for {tried}" + (
        f" and the loop searched for the sub-question itself ({step.asked!r})" if probe else "")
    return "coverage", (f"{step.asked}: {what} (unsupported after {n} attempt(s)); {searched}: no retrieved "
                        "passage answers it")


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _gaps(run: ResearchRun) -> tuple[list[str], list[str], list[str]]:
    """(coverage gaps, query failures, failures of the judge, the executor or the loop's own search)."""
    gaps: list[str] = []
    queries: list[str] = []
    failures: list[str] = [f for s in run.steps for f in _attempt_failures(s)]
    kind_of: dict[int, str] = {}
    lists = {"coverage": gaps, "query": queries, "failure": failures}
    for s in run.steps:
        if s.exhausted:
            kind, text = step_outcome(s)
            kind_of[s.sub.index] = kind
            lists[kind].append(text)
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
            # a step behind a query failure (or a failure), however many links behind, is one too
            lists[kind_of.get(root, "coverage")].append(text)
    return gaps, queries, failures


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
        claims = last.verdict.verified_claims if last.verdict is not None and not is_oracle(last.judge) else []
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
                           confidence=1.0, step=None, judge=REDUCE_JUDGE,
                           mark=f"inferred: the planner's reduce ({run.plan.reduce.kind}) concluded it from the "
                                "approved findings; no passage states it"))
    for s in run.steps:
        last = s.attempts[-1] if s.attempts else None
        if last is not None and last.verdict is not None:
            out += findings_of(last.verdict.verified_claims, passage_refs(last.passages), step=s.sub.index,
                               judge=last.judge, question=s.asked, min_confidence=run.min_confidence)
    return dedupe(out)


def _conflicts(run: ResearchRun) -> tuple[list[ReportConflict], list[str]]:
    """Every conflict (the steps' last verdicts, the final pass's, drift across steps) and a flag for each typed
    one that no flag of its verdict already states."""
    found: list[ReportConflict] = []
    flags: list[str] = []
    verdicts: list[tuple[CriticOutput, list[int]]] = [(s.attempts[-1].verdict, [s.sub.index]) for s in run.steps
                                                      if s.attempts and s.attempts[-1].verdict is not None]
    if run.final_verdict is not None:
        verdicts.append((run.final_verdict, []))
    for v, steps in verdicts:
        for c in v.conflicts:
            found.append(ReportConflict(claim=c.claim, values=list(c.values), source_ids=list(c.source_ids),
                                        steps=steps, found_by="critic", detail=c.detail))
            said = any("conflict" in f.lower() and all(x in f for x in c.values) for f in v.flags)
            if not said:
                where = f"step {steps[0] + 1}" if steps else "the final answer"
                flags.append(f"conflicting values ({where}) for {c.claim or 'one fact'!r}: "
                             f"{' vs '.join(map(repr, c.values))} (sources {', '.join(c.source_ids) or 'not named'}); "
                             "reported, not averaged")
    for flag, drift in conflicts(_statements(run), run.drift_overlap):
        found.append(drift)
        flags.append(flag)
    seen: dict[tuple, ReportConflict] = {}
    for rc in found:
        seen.setdefault((frozenset(v.lower() for v in rc.values), frozenset(rc.source_ids), tuple(rc.steps)), rc)
    return list(seen.values()), flags


def _decide(run: ResearchRun, conflicting: bool, gaps: list[str], failures: list[str]) -> tuple[str, bool]:
    """(answer, approved): approved only when every step is, the reduce decided, the final pass reaches the
    threshold and no values conflict (otherwise a gap, or a failure, says why)."""
    if run.steps and all(s.approved for s in run.steps) and run.final is None:
        gaps.append(f"the approved findings do not decide the question: {run.reduce_note or 'no answer composed'}")
        return run.abstention, False
    if run.final is None:
        return run.abstention, False
    answer = run.final[0]
    if run.final_verdict is None:
        failures.append(f"final answer {answer!r}: the {judge_label(run.final_judge or 'configured')} judge gave no "
                        "valid verdict on it (not approved)")
        return run.abstention, False
    g = float(run.final_verdict.overall_groundedness)
    if g < run.threshold:
        gaps.append(f"final answer {answer!r}: {g:.2f} of its claims grounded in the sources, below the approval "
                    f"threshold {run.threshold:.2f}")
        return run.abstention, False
    if conflicting:
        gaps.append(f"final answer {answer!r}: the sources give conflicting values (see Conflicts)")
        return run.abstention, False
    return answer, True


def _trace(s: Step) -> dict[str, Any]:
    return {"index": s.sub.index, "text": s.asked or s.sub.text, "attempts": len(s.attempts), "approved": s.approved,
            "answer": s.attempts[-1].result.summary if s.attempts else None,
            "searches": [q for a in s.attempts for q in a.result.searches],
            "discarded_draws": [list(d) for d in s.discarded],
            "probe": None if s.probe is None else {k: v for k, v in s.probe.items() if k != "passages"} | {
                "passage_ids": [p["id"] for p in s.probe.get("passages", [])]},
            "trace": [_attempt_trace(a) for a in s.attempts]}


def _attempt_trace(a: Attempt) -> dict[str, Any]:
    return {"searches": a.result.searches, "answer": a.result.summary, "judge": judge_label(a.judge),
            "groundedness": a.groundedness,
            "judge_groundedness": a.verdict.reported_groundedness if a.verdict is not None else None,
            "disagrees": bool(a.verdict is not None and disagrees(a.verdict)),
            "judge_failed": a.judge_failed, "executor_failed": a.executor_failed,
            "unknown_citations": list(a.result.unknown_citations),
            "repeated": a.result.repeated, "draws": a.result.draws}


def _citation_flags(run: ResearchRun) -> list[str]:
    """What an executor cited that names no passage it was shown: said, never dropped silently."""
    out = []
    for s in run.steps:
        for k, a in enumerate(s.attempts, 1):
            if a.result.unknown_citations:
                out.append(f"step {s.sub.index + 1}, attempt {k}: the executor cited {', '.join(a.result.unknown_citations)}"
                           f", which names no passage it was shown ({len(a.passages)} shown)")
    return out


def _passages(run: ResearchRun, findings: Sequence[Finding], found: Sequence[ReportConflict]) -> list[PassageText]:
    """The original text of every passage a finding or a conflict names."""
    refs: dict[str, PassageRef] = {}
    for s in run.steps:
        for a in s.attempts:
            for p in passage_refs(a.passages):
                refs.setdefault(p.id, p)
    if run.final is not None:
        for p in run.final[1].passages:
            refs.setdefault(p.id, p)
    named = [*(pid for f in findings for pid in f.source_ids), *(pid for c in found for pid in c.source_ids)]
    return [PassageText(id=pid, title=refs[pid].title, text=refs[pid].text) for pid in dict.fromkeys(named)
            if pid in refs]


def confidence(findings: Sequence[Finding], approved: bool) -> float:
    """The report's confidence (its field's description, docs/research.md): 0 for an abstention; else the
    grounded share of the judge's findings on the answer, the planner's own conclusion left out."""
    judged = [f for f in findings if f.judge != REDUCE_JUDGE]
    if not approved or not judged:
        return 0.0
    return sum(f.status == "grounded" for f in judged) / len(judged)


def build_report(run: ResearchRun) -> ResearchReport:
    findings = _findings(run)
    found, flags = _conflicts(run)
    flags += [f for s in run.steps for a in s.attempts[-1:] if a.verdict for f in a.verdict.flags]
    if run.final_verdict is not None:
        flags += run.final_verdict.flags  # the final pass sees every passage: its conflicts reach the report
    flags += _citation_flags(run)
    gaps, queries, failures = _gaps(run)
    answer, approved = _decide(run, bool(found), gaps, failures)
    if approved:
        flags += marked_in_answer(findings)
    judges = [a.judge for s in run.steps for a in s.attempts] + ([run.final_judge] if run.final_judge else [])
    main = max(set(judges), key=judges.count) if judges else ""
    return ResearchReport(
        question=run.question, answer=answer, approved=approved, findings=findings, coverage_gaps=gaps,
        query_failures=queries, failures=failures, conflicts=found, flags=list(dict.fromkeys(flags)),
        confidence=confidence(findings, approved),
        iterations=max((len(s.attempts) for s in run.steps), default=0),
        requeries=sum(max(len(s.attempts) - 1, 0) for s in run.steps),
        groundedness_before=_mean([s.attempts[0].groundedness for s in run.steps if s.attempts]),
        groundedness_after=_mean([s.attempts[-1].groundedness for s in run.steps if s.attempts]),
        judge=judge_label(main), oracle=any(is_oracle(j) for j in judges),
        plan={"rule": run.plan.rule, "reduce": run.plan.reduce.model_dump(mode="json"),
              "reduce_note": run.reduce_note},
        sub_questions=[_trace(s) for s in run.steps], passages=_passages(run, findings, found),
        provenance=dict(run.provenance))


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None
