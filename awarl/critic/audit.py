"""A verdict is checked against the trajectory it judges before anything reads it (the critic-loop article:
the planner acts on the critic's groundedness, so that figure must be the claims', not the judge's word).

`audit_verdict(verdict, item)`:
- every `source_ids` entry must name a passage the trajectory retrieved (its corpus id, or its number in the
  trajectory as `3` / `[3]` / `id=...`, resolved to the id). A grounded or inferred claim that names a
  passage never retrieved is counted as **unsupported** (its support cannot be checked) and flagged;
- `overall_groundedness` is **recounted**: grounded claims / all claims (0 with no claims). The judge's own
  figure is kept as `reported_groundedness`, and when it does not round to the recounted number of grounded
  claims, the disagreement is flagged.
Every consumer goes through it: the training reward and evaluation (`awarl.rewards.citation.safe_verify`)
and the critic loop's approvals (awarl/research/), for every judge (a no-op for the local judges, whose
figures are counts by construction).
"""

from __future__ import annotations

from awarl.critic.schema import ClaimVerification, CriticInput, CriticOutput


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


def audit_verdict(verdict: CriticOutput, item: CriticInput) -> CriticOutput:
    """The verdict with its sources resolved to retrieved ids, claims on never-retrieved passages demoted to
    unsupported, and its groundedness recounted (module docstring)."""
    names = passage_names(item)
    claims: list[ClaimVerification] = []
    flags = list(verdict.flags)
    for c in verdict.verified_claims:
        resolved = [_resolve(s, names) for s in c.source_ids]
        unknown = [s for s, r in zip(c.source_ids, resolved, strict=True) if r is None]
        ids = list(dict.fromkeys(r for r in resolved if r is not None))
        if c.status != "unsupported" and unknown:
            flags.append(f"claim {c.claim!r} was labelled {c.status} in passage(s) {unknown} that were never "
                         "retrieved: counted as unsupported")
            claims.append(ClaimVerification(claim=c.claim, status="unsupported", source_ids=[],
                                            confidence=c.confidence))
        else:
            claims.append(ClaimVerification(claim=c.claim, status=c.status, source_ids=ids, confidence=c.confidence))
    n, grounded = len(claims), sum(c.status == "grounded" for c in claims)
    recount = grounded / n if n else 0.0
    reported = float(verdict.overall_groundedness)
    if round(reported * n) != grounded:
        flags.append(f"the judge reported overall_groundedness {reported:.2f}; recounted from its claims: "
                     f"{grounded}/{n} grounded = {recount:.2f} (the recount is used)")
    return CriticOutput(verified_claims=claims, overall_groundedness=recount, flags=list(dict.fromkeys(flags)),
                        reported_groundedness=reported)


def disagrees(verdict: CriticOutput) -> bool:
    """Whether an audited verdict's judge reported another groundedness than its claims give."""
    return verdict.reported_groundedness is not None and round(
        verdict.reported_groundedness * len(verdict.verified_claims)) != sum(
        c.status == "grounded" for c in verdict.verified_claims)
