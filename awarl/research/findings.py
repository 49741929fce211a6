"""Findings with their evidence trail (the critic-loop article: every claim traceable to a source, marked as
inferred, or shown as a gap; "no silent fourth category").

Each verified claim becomes a `Finding` with the quoted span of every passage it names (the sentence of the
passage's ORIGINAL text that best holds the claim's words), and a mark unless it is grounded with enough
confidence: `inferred` (follows from the named passages, stated in none), `unsupported` (in no retrieved
source), or low confidence (below `research.min_claim_confidence`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from awarl.critic.lexical_judge import content_tokens
from awarl.critic.schema import ClaimVerification, PassageRef
from awarl.research.critic import judge_label
from awarl.research.schema import Finding, Quote

QUOTE_CHARS = 300  # display cap of one quoted span (the passage itself stays in the trace)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def quote(claim: str, text: str, question: str = "") -> str:
    """The sentence of `text` holding most of the claim's content words (ties: the one most about the
    question, then the first), cut to QUOTE_CHARS."""
    want, about = content_tokens(claim), content_tokens(question)
    best, key = "", (-1.0, -1.0)
    for s in _SENTENCE.split(text.strip()):
        toks = content_tokens(s)
        k = (len(want & toks) / max(len(want), 1), len(about & toks) / max(len(about), 1))
        if k > key:
            best, key = s, k
    return best if len(best) <= QUOTE_CHARS else best[:QUOTE_CHARS - 1] + "…"


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
        quotes = [Quote(passage_id=pid, text=quote(c.claim, by_id[pid].text, question))
                  for pid in c.source_ids if pid in by_id]
        out.append(Finding(claim=c.claim, status=c.status, source_ids=list(c.source_ids), confidence=c.confidence,
                           step=step, judge=judge_label(judge), quotes=quotes, mark=mark(c, min_confidence)))
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
