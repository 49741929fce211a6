"""A verdict is checked against the trajectory it judges before anything reads it (the critic-loop article:
the planner acts on the critic's groundedness, so that figure must be the claims', not the judge's word).

`audit_verdict(verdict, item)`:
- every `source_ids` entry must name a passage the trajectory retrieved (its corpus id, or its number in the
  trajectory as `3` / `[3]` / `id=...`, resolved to the id). A grounded or inferred claim that names a
  passage never retrieved is counted as **unsupported** (its support cannot be checked: a judge that invents
  a source must not earn grounded for it, even beside a real one) and flagged; an unsupported claim's
  unresolvable ids are dropped;
- a claim the verdict repeats (the same text once normalised like an answer: case, punctuation, articles
  and spacing aside, `awarl.metrics.normalize_answer`) is **one claim** (weak judges repeat claims until cut
  off, schema.py): the first wording is kept, with the weakest label of its copies (grounded > inferred >
  unsupported; a copy demoted above counts as unsupported), the sources of its copies with that label merged
  (first seen first) and the first such copy's confidence, and the repeat is flagged;
- a claim's evidence spans must lie in a passage the trajectory retrieved, within its text (others are
  dropped), and a conflict's `source_ids` are resolved like a claim's (an id never retrieved is dropped and
  flagged; the conflict itself stands: a judge that saw one is not overruled);
- `overall_groundedness` is **recounted**: grounded claims / all claims (0 with no claims). The judge's own
  figure is kept as `reported_groundedness`, and when it does not round to the recounted number of grounded
  claims (with no claims: when the figure itself does not round to the recount, 0), the disagreement is
  flagged.
- with `answer_claim` (a judge told to split the answer into claims, one of which states it: the LLM judge),
  a verdict none of whose claims states the answer (all of the answer's words, normalised like an answer;
  yes/no answers aside, which a comparison's claims never state) verifies something else: the answer is
  added as an **unsupported** claim and flagged, so a verdict about an unrelated claim cannot score full
  support (it did: one grounded claim "The Eiffel Tower is in Paris." gave coverage 1.0 to any answer).
Every consumer goes through it: the training reward and evaluation (`awarl.rewards.citation.safe_verify`)
and the critic loop's approvals (awarl/research/), for every judge (a no-op for the local judges, whose
figures are counts by construction and whose claims do not repeat on the shipped data).
"""

from __future__ import annotations

from awarl.critic.schema import ClaimVerification, Conflict, CriticInput, CriticOutput, Span
from awarl.metrics import normalize_answer

_STRENGTH = {"unsupported": 0, "inferred": 1, "grounded": 2}


def passage_names(item: CriticInput) -> dict[str, str]:
    """Every way a verdict may name a retrieved passage -> its corpus id."""
    names: dict[str, str] = {}
    for p in [*item.passages, *item.cited]:
        names[p.id] = p.id
    for p in [*item.passages, *item.cited]:
        for alias in (str(p.number), f"[{p.number}]", f"id={p.id}"):
            names.setdefault(alias, p.id)
    return names


def _resolve(source: str, names: dict[str, str]) -> str | None:
    s = source.strip()
    return names.get(s) or names.get(s.removeprefix("id=").strip())


def claim_key(claim: str) -> str:
    """What makes two claims the same claim: their text normalised like an answer (a claim of punctuation
    only keeps its case-folded, space-folded text)."""
    return normalize_answer(claim) or " ".join(claim.casefold().split())


def _merge(copies: list[ClaimVerification]) -> ClaimVerification:
    """One claim from its copies (module docstring): the weakest label, the sources of the copies with it."""
    weakest = min(copies, key=lambda c: _STRENGTH[c.status])
    kept = [c for c in copies if c.status == weakest.status]
    ids = list(dict.fromkeys(s for c in kept for s in c.source_ids))
    spans = list({(e.passage_id, e.start, e.end): e for c in kept for e in c.evidence}.values())
    return ClaimVerification(claim=copies[0].claim, status=weakest.status, source_ids=ids,
                             confidence=kept[0].confidence, evidence=spans)


def _spans(spans: list[Span], names: dict[str, str], lengths: dict[str, int]) -> list[Span]:
    """The spans that lie in a retrieved passage, within its text (ids resolved like sources)."""
    out = []
    for e in spans:
        pid = _resolve(e.passage_id, names)
        if pid is not None and e.start < e.end <= lengths.get(pid, -1):
            out.append(Span(passage_id=pid, start=e.start, end=e.end))
    return out


def _conflicts(conflicts: list[Conflict], names: dict[str, str], flags: list[str]) -> list[Conflict]:
    out = []
    for c in conflicts:
        resolved = [_resolve(s, names) for s in c.source_ids]
        unknown = [s for s, r in zip(c.source_ids, resolved, strict=True) if r is None]
        if unknown:
            flags.append(f"a conflict ({c.claim or ', '.join(c.values)}) names passage(s) {unknown} that were never "
                         "retrieved: those ids are dropped, the conflict stands")
        out.append(c.model_copy(update={"source_ids": list(dict.fromkeys(r for r in resolved if r is not None))}))
    return out


def _off(reported: float, grounded: int, n: int) -> bool:
    """Whether a judge's figure disagrees with its `grounded` of `n` claims: it does not round to that count
    (to the claims' half, so 0.67 of 3 is 2); with no claims, the figure itself does not round to 0."""
    return round(reported * n) != grounded if n else round(reported) != 0


def states(claim: str, answer: str) -> bool:
    """Whether `claim` states `answer`: every word of the answer, normalised like an answer, is in the claim."""
    words = normalize_answer(answer).split()
    return bool(words) and set(words) <= set(normalize_answer(claim).split())


def _answer_claim(answer: str, claims: list[ClaimVerification]) -> ClaimVerification | None:
    """The unsupported claim to add when no claim of the verdict states the answer (module docstring)."""
    norm = normalize_answer(answer)
    if not norm or norm in ("yes", "no") or any(states(c.claim, answer) for c in claims):
        return None
    return ClaimVerification(claim=answer, status="unsupported", source_ids=[], confidence=1.0)


def audit_verdict(verdict: CriticOutput, item: CriticInput, answer_claim: bool = False) -> CriticOutput:
    """The verdict with its sources resolved to retrieved ids, claims on never-retrieved passages demoted to
    unsupported, repeated claims counted once, with `answer_claim` the answer added as an unsupported claim
    when no claim states it, and its groundedness recounted (module docstring)."""
    names = passage_names(item)
    lengths = {p.id: len(p.text) for p in [*item.passages, *item.cited]}
    copies: dict[str, list[ClaimVerification]] = {}
    flags = list(verdict.flags)
    for c in verdict.verified_claims:
        resolved = [_resolve(s, names) for s in c.source_ids]
        unknown = [s for s, r in zip(c.source_ids, resolved, strict=True) if r is None]
        ids = list(dict.fromkeys(r for r in resolved if r is not None))
        if c.status != "unsupported" and unknown:
            flags.append(f"claim {c.claim!r} was labelled {c.status} in passage(s) {unknown} that were never "
                         "retrieved: counted as unsupported")
            checked = ClaimVerification(claim=c.claim, status="unsupported", source_ids=[], confidence=c.confidence)
        else:
            checked = ClaimVerification(claim=c.claim, status=c.status, source_ids=ids, confidence=c.confidence,
                                        evidence=_spans(c.evidence, names, lengths))
        copies.setdefault(claim_key(c.claim), []).append(checked)
    claims = []
    for same in copies.values():
        claims.append(_merge(same) if len(same) > 1 else same[0])
        if len(same) > 1:
            flags.append(f"claim {same[0].claim!r} was given {len(same)} times: counted once, as "
                         f"{claims[-1].status}")
    if answer_claim and claims and (missing := _answer_claim(item.answer, claims)) is not None:
        claims.append(missing)
        flags.append(f"no claim states the answer {item.answer!r}: the verdict verifies something else; the "
                     "answer counts as an unsupported claim")
    n, grounded = len(claims), sum(c.status == "grounded" for c in claims)
    recount = grounded / n if n else 0.0
    reported = float(verdict.overall_groundedness)
    if _off(reported, grounded, n):
        flags.append(f"the judge reported overall_groundedness {reported:.2f}; recounted from its claims: "
                     f"{grounded}/{n} grounded = {recount:.2f} (the recount is used)")
    conflicts = _conflicts(verdict.conflicts, names, flags)
    return CriticOutput(verified_claims=claims, overall_groundedness=recount, flags=list(dict.fromkeys(flags)),
                        reported_groundedness=reported, conflicts=conflicts)


def disagrees(verdict: CriticOutput) -> bool:
    """Whether an audited verdict's judge reported another groundedness than its claims give (`_off`)."""
    return verdict.reported_groundedness is not None and _off(
        verdict.reported_groundedness, sum(c.status == "grounded" for c in verdict.verified_claims),
        len(verdict.verified_claims))
