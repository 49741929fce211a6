"""The critic's side of the loop: the configured judge over each attempt's summary and original passages,
once more over the final synthesis (reduce) against every passage the approved steps retrieved, and the
conflicts across sub-questions, which are flagged, never averaged."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from awarl.critic.schema import CriticInput, CriticOutput, PassageRef
from awarl.metrics import normalize_answer

log = logging.getLogger(__name__)


def verify(judge: Any, inputs: Sequence[CriticInput]) -> list[CriticOutput | None]:
    """One verdict per input (None where the judge failed or there is no judge): a judge never fails the loop;
    an unverified attempt is simply not approved."""
    if not inputs:
        return []
    if judge is None:
        return [None] * len(inputs)
    try:
        out = list(judge.verify(list(inputs)))
    except Exception as e:  # noqa: BLE001 - an unreachable judge leaves everything unapproved, reported as such
        log.warning("research critic: the judge failed on %d items: %s", len(inputs), e)
        return [None] * len(inputs)
    if len(out) != len(inputs):
        log.warning("research critic: %d verdicts for %d items; treating all as unverified", len(out), len(inputs))
        return [None] * len(inputs)
    return out


def unsupported_claims(verdict: CriticOutput | None) -> list[str]:
    return [c.claim for c in verdict.verified_claims if c.status == "unsupported"] if verdict else []


def synthesis_input(question: str, answer: str, passages: Sequence[dict], cited_ids: set[str]) -> CriticInput:
    """The final pass: the synthesised answer against every passage of the approved steps, renumbered 1..n in
    order of first retrieval (ids kept, so a claim still maps to its original passage)."""
    seen: dict[str, PassageRef] = {}
    for d in passages:
        pid = str(d["id"])
        if pid not in seen:
            seen[pid] = PassageRef(number=len(seen) + 1, id=pid, title=str(d.get("title") or ""), text=str(d["text"]))
    refs = list(seen.values())
    return CriticInput(question=question, answer=answer, cited=[p for p in refs if p.id in cited_ids],
                       passages=refs)


def conflicts(findings: Sequence[tuple[str, str, bool]]) -> list[str]:
    """Flags for one fact answered differently: (question asked, answer, grounded) triples whose normalised
    questions agree but whose grounded answers differ (two attempts of one step, or two steps asking the same
    thing). The loop reports them and does not approve, rather than pick or average one value."""
    by_question: dict[str, dict[str, str]] = {}
    for question, answer, grounded in findings:
        if grounded and answer.strip():
            by_question.setdefault(normalize_answer(question), {})[normalize_answer(answer)] = answer
    return [f"conflicting values for {q!r}: " + " vs ".join(repr(a) for a in answers.values())
            for q, answers in by_question.items() if len(answers) > 1]
