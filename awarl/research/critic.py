"""The critic's side of the loop: the configured judge over each attempt's summary and original passages,
once more over the final synthesis (reduce) against every passage the approved steps retrieved, and the
conflicts across sub-questions, which are flagged, never averaged."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awarl.critic.schema import CriticInput, CriticOutput, PassageRef
from awarl.data.evidence import GoldEvidence, gold_evidence
from awarl.data.types import QAExample
from awarl.metrics import normalize_answer
from awarl.rewards.citation import safe_verify


def verify(judge: Any, inputs: Sequence[CriticInput]) -> list[CriticOutput | None]:
    """One verdict per input (None where the judge failed or there is no judge): a judge never fails the loop;
    an unverified attempt is simply not approved."""
    if not inputs:
        return []
    if judge is None:
        return [None] * len(inputs)
    return safe_verify(judge, inputs, "research critic")[0]


def unsupported_claims(verdict: CriticOutput | None) -> list[str]:
    return [c.claim for c in verdict.verified_claims if c.status == "unsupported"] if verdict else []


def step_gold(example: Any, n_steps: int) -> list[GoldEvidence | None]:
    """The gold evidence each step of a plan is checked against by the gold judge: a decomposed question's hop k
    against hop k's supporting paragraph, a single-step plan against the whole question's evidence; None where
    the record has none (then the judge's fallback, if any, decides)."""
    if not isinstance(example, QAExample):
        return [None] * n_steps
    ev = gold_evidence(example)
    if not ev.paragraphs:
        return [None] * n_steps
    if n_steps == 1 or len(ev.hops) != n_steps:
        return [ev] * n_steps
    out: list[GoldEvidence | None] = []
    for hop in ev.hops:
        paras = tuple(p for p in ev.paragraphs if hop.passage_id and p.passage_id == hop.passage_id)
        out.append(GoldEvidence(paragraphs=paras) if paras else ev)
    return out


def synthesis_input(question: str, answer: str, passages: Sequence[dict], cited_ids: set[str],
                    gold: GoldEvidence | None = None) -> CriticInput:
    """The final pass: the synthesised answer against every passage of the approved steps, renumbered 1..n in
    order of first retrieval (ids kept, so a claim still maps to its original passage)."""
    seen: dict[str, PassageRef] = {}
    for d in passages:
        pid = str(d["id"])
        if pid not in seen:
            seen[pid] = PassageRef(number=len(seen) + 1, id=pid, title=str(d.get("title") or ""), text=str(d["text"]))
    refs = list(seen.values())
    return CriticInput(question=question, answer=answer, cited=[p for p in refs if p.id in cited_ids],
                       passages=refs, gold=gold)


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
