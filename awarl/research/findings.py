"""Findings with their evidence trail (the critic-loop article: every claim traceable to a source, marked as
inferred, or shown as a gap; "no silent fourth category").

Each verified claim becomes a `Finding` with, for every passage it names, the span of that passage's
ORIGINAL text that states it and the span's offsets (the report keeps the passage's text, so the chain from
claim to source can be followed without the index): the judge's own span when it gives one (the offline
judge does), else the span the offline reader (awarl/critic/support.py) finds stating the claim in that
passage: a clause or sentence that holds the claim's names, words and values, NEVER one that contradicts it.
A passage in which no span states the claim gets no quote (its text is still in the report). A finding is
marked unless it is grounded with enough confidence: `inferred` (follows from the named passages, stated in
none), `unsupported` (in no retrieved source), or low confidence (below `research.min_claim_confidence`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from awarl.config import CriticConfig
from awarl.critic.claims import facts_of, is_short
from awarl.critic.schema import ClaimVerification, PassageRef, Span
from awarl.critic.support import check_answer, check_claim, question_of, view
from awarl.research.critic import judge_label
from awarl.research.schema import Finding, Quote

_CRITIC = CriticConfig()


def locate(claim: str, question: str, passage: PassageRef) -> Span | None:
    """The span of `passage` that states the claim (module docstring), or None."""
    v = [view(passage)]
    if is_short(claim, _CRITIC.short_answer_words):
        found = check_answer(question_of(question, claim, _CRITIC.relation_overlap), claim, v).supports
    else:
        found = []
    if not found:
        found = check_claim(facts_of(claim), v, _CRITIC.support_threshold).supports
    if not found:
        return None
    rank = {"clause": 0, "sentence": 1, "window": 2}
    u = min(found, key=lambda x: (rank[x.level], x.end - x.start))
    return Span(passage_id=passage.id, start=u.start, end=u.end)


def quotes_of(c: ClaimVerification, by_id: dict[str, PassageRef], question: str) -> list[Quote]:
    """One quote per passage the claim names that has a span stating it (the judge's, else located)."""
    spans = {e.passage_id: e for e in c.evidence}
    out = []
    for pid in c.source_ids:
        p = by_id.get(pid)
        if p is None:
            continue
        span = spans.get(pid) or (locate(c.claim, question, p) if c.status != "unsupported" else None)
        if span is not None and 0 <= span.start < span.end <= len(p.text):
            out.append(Quote(passage_id=pid, text=p.text[span.start:span.end], start=span.start, end=span.end))
    return out


def mark(c: ClaimVerification, min_confidence: float) -> str | None:
    if c.status == "unsupported":
        return "unsupported: found in no retrieved source"
    if c.status == "inferred":
        named = ", ".join(c.source_ids) or "the passages together"
        return f"inferred: follows from {named}, stated in none of them"
    if c.confidence < min_confidence:
        return f"low confidence ({c.confidence:.2f} < research.min_claim_confidence {min_confidence:.2f})"
    return None


def findings_of(claims: Iterable[ClaimVerification], passages: Sequence[PassageRef], *, step: int | None,
                judge: str, question: str, min_confidence: float) -> list[Finding]:
    by_id = {p.id: p for p in passages}
    out = []
    for c in claims:
        out.append(Finding(claim=c.claim, status=c.status, source_ids=list(c.source_ids), confidence=c.confidence,
                           evidence=list(c.evidence), step=step, judge=judge_label(judge),
                           quotes=quotes_of(c, by_id, question), mark=mark(c, min_confidence)))
    return out


def dedupe(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per (claim, status, sources, step), in order."""
    seen: dict[tuple, Finding] = {}
    for f in findings:
        seen.setdefault((f.claim, f.status, tuple(f.source_ids), f.step), f)
    return list(seen.values())


def marked_in_answer(findings: Sequence[Finding]) -> list[str]:
    """Flags for the marked claims of an approved answer: what the approval let through is said, not hidden."""
    out = []
    for f in findings:
        if f.mark:
            where = "the final answer" if f.step is None else f"step {f.step + 1}"
            out.append(f"{f.mark.split(' (')[0].split(':')[0]} claim in the approved answer ({where}): {f.claim!r}")
    return out
