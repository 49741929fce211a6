"""Citation reward (SPEC section 4, step 10): coverage − redundancy from a critic verdict.

coverage   = share of the answer's claims grounded in a CITED passage (an `inferred` claim earns
             `inferred_weight` when its source, if named, is cited; one with no named source earns it
             only when the answer cites at least one retrieved passage: an answer that cites nothing
             covers nothing);
redundancy = share of cited passages that support no claim (a citation of a number that was never
             retrieved supports nothing).
A passage can be named by the critic either by its corpus id or by its number in the trajectory; both are
resolved to the id, so an LLM judge that copies `[3]` instead of a long id is not penalised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from awarl.critic.schema import CriticInput, CriticOutput, PassageRef


@dataclass(frozen=True)
class CitationScore:
    coverage: float
    redundancy: float
    reward: float


def passages_from_rollout(passages: Iterable[Mapping[str, Any]] | None, where: str = "passages") -> list[PassageRef]:
    """Validate the rollout's `passages` entries ({number, id, title, text}); errors name the entry."""
    out: list[PassageRef] = []
    for j, p in enumerate(passages or []):
        if not isinstance(p, Mapping):
            raise ValueError(f"{where}[{j}]: expected a mapping with number/id/title/text, got {type(p).__name__}")
        missing = [k for k in ("number", "id", "text") if k not in p]
        if missing:
            raise ValueError(f"{where}[{j}]: missing key(s) {missing}")
        out.append(PassageRef(number=int(p["number"]), id=str(p["id"]), title=str(p.get("title") or ""),
                              text=str(p["text"])))
    return out


def build_critic_input(question: str, answer: str, citations: Iterable[int] | None,
                       passages: list[PassageRef]) -> CriticInput:
    """The judge's view of one trajectory: cited passages resolved by number (unknown numbers dropped here;
    they still count as redundant in `citation_reward`)."""
    by_number = {p.number: p for p in passages}
    cited: list[PassageRef] = []
    for n in dict.fromkeys(int(c) for c in citations or []):
        if n in by_number:
            cited.append(by_number[n])
    return CriticInput(question=question, answer=answer, cited=cited, passages=passages)


def _resolver(passages: list[PassageRef]) -> dict[str, str]:
    names: dict[str, str] = {}
    for p in passages:
        names[p.id] = p.id
        names.setdefault(str(p.number), p.id)
        names.setdefault(f"[{p.number}]", p.id)
    return names


def citation_reward(verdict: CriticOutput, citations: Iterable[int] | None, passages: list[PassageRef],
                    inferred_weight: float = 0.5) -> CitationScore:
    """r_cite = coverage − redundancy, in [−1, 1]. No claims, or no cited passage that was retrieved ⇒
    coverage 0; no citations ⇒ redundancy 0."""
    names = _resolver(passages)
    by_number = {p.number: p.id for p in passages}
    cited_numbers = list(dict.fromkeys(int(c) for c in citations or []))
    # A citation of a number that was never retrieved gets a unique placeholder: it can support nothing.
    cited_ids = [by_number.get(n, f"<missing:{n}>") for n in cited_numbers]
    cited_set = set(cited_ids)
    # Only passages that were actually retrieved can ground anything.
    cites_evidence = any(n in by_number for n in cited_numbers)

    credit = 0.0
    supporting: set[str] = set()
    for c in verdict.verified_claims:
        src = names.get(c.source_id.strip(), c.source_id.strip()) if c.source_id else None
        if c.status == "grounded":
            if src in cited_set:
                credit += 1.0
                supporting.add(src)
        elif c.status == "inferred":
            if (src is None and cites_evidence) or (src is not None and src in cited_set):
                credit += inferred_weight
            if src is not None:
                supporting.add(src)
    n_claims = len(verdict.verified_claims)
    coverage = credit / n_claims if n_claims else 0.0
    redundancy = (sum(cid not in supporting for cid in cited_ids) / len(cited_ids)) if cited_ids else 0.0
    return CitationScore(coverage=coverage, redundancy=redundancy, reward=coverage - redundancy)
