"""The loop's own reading of the sources, whatever judge decides (issue 43): the answer's claims the judge's
verdict leaves out (each counts as unverified), the conflicts the retrieved passages themselves show (the
offline reader of awarl/critic/support.py, beside any the judge reports), and whether the passages a search
for a sub-question's own words retrieved answer it (before a step is called a coverage gap).

- Omitted claims: the answer is split like the offline judge splits it (awarl/critic/claims.py); a claim of
  the answer no verdict claim covers (a short answer: its words or its value in some verdict claim; a longer
  claim: half its content words and all its values) is added to the verdict as `unsupported` and flagged, and
  the groundedness is recounted. Not for the gold judge (an oracle: its claims are the dataset's facts).
- Conflicts: a short answer's value (a date, an amount) that another clause stating the asked relation about
  the question's subject gives differently; a longer claim's value that a span about the same thing gives
  differently. Typed (`Conflict`), with the passages that give each value.
- Answering spans: a clause of a passage that names the sub-question's subject (in it, or its passage's
  title) and states the asked relation with a value of the asked kind (a date for "when", an amount for "how
  many", else a name the question does not give).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from awarl.config import CriticConfig
from awarl.critic.claims import facts_of, is_short, split_claims
from awarl.critic.schema import ClaimVerification, Conflict, CriticInput, CriticOutput, PassageRef
from awarl.critic.support import (
    Unit,
    answer_values,
    check_answer,
    check_claim,
    clauses_of,
    question_of,
    relation_holds,
    view,
)
from awarl.critic.tokens import content_tokens, tokens

_CRITIC = CriticConfig()


def _covered(claim: str, verdict_claims: Sequence[ClaimVerification], short: bool) -> bool:
    """Whether some verdict claim covers this claim of the answer (module docstring)."""
    want = content_tokens(claim)
    values = answer_values(claim) if short else facts_of(claim).values
    for c in verdict_claims:
        have = set(tokens(c.claim))
        got_values = facts_of(c.claim).values
        if values and not all(any(a.agrees(b) for b in got_values) for a in values):
            continue
        if short and (values or want <= have):
            return True
        if not short and len(want & have) >= 0.5 * len(want):
            return True
    return False


def complete(verdict: CriticOutput, item: CriticInput, short_answer_words: int = _CRITIC.short_answer_words
             ) -> CriticOutput:
    """The verdict with every claim of the answer it omits added as unsupported (flagged), recounted."""
    claims = split_claims(item.answer, short_answer_words)
    short = is_short(item.answer, short_answer_words)
    missing = [c for c in claims if not _covered(c, verdict.verified_claims, short)]
    if not missing:
        return verdict
    added = [ClaimVerification(claim=c, status="unsupported", confidence=1.0) for c in missing]
    all_claims = [*verdict.verified_claims, *added]
    grounded = sum(c.status == "grounded" for c in all_claims)
    flags = [*verdict.flags, *(f"the judge's verdict leaves out the answer's claim {c!r}: counted as unverified "
                               "(unsupported)" for c in missing)]
    return verdict.model_copy(update={"verified_claims": all_claims, "overall_groundedness": grounded / len(all_claims),
                                      "flags": list(dict.fromkeys(flags))})


def _label(refs: dict[str, PassageRef], pid: str) -> str:
    p = refs.get(pid)
    return f"[{p.number}] {pid}" if p else pid


def source_conflicts(item: CriticInput, cfg: CriticConfig = _CRITIC) -> list[Conflict]:
    """The conflicts the passages show about the answer's claims (module docstring)."""
    passages = item.passages or item.cited
    views = [view(p) for p in passages]
    refs = {p.id: p for p in passages}
    out: list[Conflict] = []
    if is_short(item.answer, cfg.short_answer_words):
        q = question_of(item.question, item.answer, cfg.relation_overlap)
        res = check_answer(q, item.answer, views, cfg.short_support_threshold)
        for here, there, mine, theirs in res.conflicts:
            out.append(_conflict(item.answer, here, there, mine.text, theirs.text, refs))
        return out
    for claim in split_claims(item.answer, cfg.short_answer_words):
        found = check_claim(facts_of(claim), views, cfg.support_threshold)
        if not found.supports:
            continue
        best = found.supports[0]
        for u, mine, theirs in found.conflicts:
            out.append(_conflict(claim, best, u, mine.text, theirs.text, refs))
    return out


def _conflict(claim: str, here: Unit, there: Unit, mine: str, theirs: str, refs: dict[str, PassageRef]) -> Conflict:
    return Conflict(claim=claim, values=[mine, theirs], source_ids=list(dict.fromkeys([here.pid, there.pid])),
                    detail=f"{_label(refs, here.pid)} “{_short(here.text)}” vs {_label(refs, there.pid)} "
                           f"“{_short(there.text)}”")


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def merge_conflicts(*groups: Sequence[Conflict]) -> list[Conflict]:
    """One conflict per (values, passages), first wording kept."""
    seen: dict[tuple, Conflict] = {}
    for group in groups:
        for c in group:
            key = (frozenset(v.strip().lower() for v in c.values), frozenset(c.source_ids))
            seen.setdefault(key, c)
    return list(seen.values())


@dataclass
class Answering:
    """A passage span that appears to answer a sub-question (its passage id, offsets and text)."""

    passage_id: str
    start: int
    end: int
    text: str


def answering_span(question: str, passages: Sequence[PassageRef], cfg: CriticConfig = _CRITIC) -> Answering | None:
    """The first clause of the passages that answers the question (module docstring), or None."""
    asks_value = tokens(question)[:1] == ["when"] or bool({"year", "date", "many", "much", "long", "tall", "old",
                                                             "high", "big", "far"} & set(tokens(question)))
    subject = question_of(question, "", 0).facts.names
    for p in passages:
        v = view(p)
        for u in clauses_of(v):
            if u.negated or (subject and not any(set(n) <= (u.tokset | v.title) for n in subject)):
                continue
            for candidate in _candidates(question, u, asks_value):
                q = question_of(question, candidate, cfg.relation_overlap)
                if relation_holds(q, u, candidate):
                    return Answering(passage_id=p.id, start=u.start, end=u.end, text=u.text)
    return None


def _candidates(question: str, u: Unit, asks_value: bool) -> list[str]:
    """What in the clause could answer the question: its values for a "when" / "how many" question, else the
    names it gives that the question does not."""
    if asks_value:
        return [b.text for b in u.values]
    q_toks = set(tokens(question))
    return [" ".join(n) for n in u.names if not set(n) <= q_toks]
