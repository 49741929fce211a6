"""Citation reward (SPEC section 4, step 10): coverage − redundancy from a critic verdict.

coverage   = mean over the answer's claims of their credit. A claim names the passages it rests on
             (`source_ids`, jointly): a grounded claim earns the share of them that is CITED (a two-hop
             claim whose bridge passage is not cited earns half); an `inferred` claim earns
             `inferred_weight` times that share, or, naming no source, `inferred_weight` when the answer
             cites at least one retrieved passage (an answer that cites nothing covers nothing);
redundancy = share of cited passages that support no claim, alone or jointly (a citation of a number that
             was never retrieved supports nothing).
A passage can be named by the critic either by its corpus id or by its number in the trajectory; both are
resolved to the id, so an LLM judge that copies `[3]` instead of a long id is not penalised.

:func:`judge_citations` is the one path from trajectories to citation scores, used by training (the reward)
and evaluation (the report), so the two can never score citations differently.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from awarl.critic.audit import audit_verdict, disagrees
from awarl.critic.schema import CriticInput, CriticOutput, Judge, PassageRef
from awarl.data.evidence import GoldEvidence
from awarl.metrics import Outcome

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CitationScore:
    coverage: float
    redundancy: float
    reward: float
    supporting: tuple[int, ...] = ()  # cited passage numbers that support a claim (the others are redundant)


def passages_from_rollout(passages: Iterable[Mapping[str, Any]] | None, where: str = "passages") -> list[PassageRef]:
    """Validate the rollout's `passages` entries ({number, id, title, text}); errors name the entry."""
    out: list[PassageRef] = []
    for j, p in enumerate(passages or []):
        if not isinstance(p, Mapping):
            raise ValueError(f"{where}[{j}]: expected a mapping with number/id/title/text, got {type(p).__name__}")
        missing = [k for k in ("number", "id", "text") if k not in p]
        if missing:
            raise ValueError(f"{where}[{j}]: missing key(s) {missing}")
        if not str(p["id"]).strip():  # the judges name passages by id: a blank one would name them all at once
            raise ValueError(f"{where}[{j}]: blank passage id (a retriever must give every passage an id)")
        try:
            number = int(p["number"])
        except (TypeError, ValueError):
            raise ValueError(f"{where}[{j}]: number must be an integer, got {p['number']!r}") from None
        out.append(PassageRef(number=number, id=str(p["id"]), title=str(p.get("title") or ""), text=str(p["text"])))
    return out


def build_critic_input(question: str, answer: str, citations: Iterable[int] | None,
                       passages: list[PassageRef], gold: GoldEvidence | None = None) -> CriticInput:
    """The judge's view of one trajectory: cited passages resolved by number (unknown numbers dropped here;
    they still count as redundant in `citation_reward`); `gold` for the gold judge only."""
    by_number = {p.number: p for p in passages}
    cited: list[PassageRef] = []
    for n in dict.fromkeys(int(c) for c in citations or []):
        if n in by_number:
            cited.append(by_number[n])
    return CriticInput(question=question, answer=answer, cited=cited, passages=passages, gold=gold)


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
        # The audit made a claim on a never-retrieved source unsupported; an id left unresolved is skipped.
        srcs = list(dict.fromkeys(names[s] for s in c.source_ids if s in names))
        share = sum(s in cited_set for s in srcs) / len(srcs) if srcs else 0.0
        if c.status == "grounded":
            credit += share
        elif c.status == "inferred":
            credit += inferred_weight * (share if srcs else float(cites_evidence))
        if c.status != "unsupported":
            supporting.update(srcs)
    n_claims = len(verdict.verified_claims)
    coverage = credit / n_claims if n_claims else 0.0
    redundancy = (sum(cid not in supporting for cid in cited_ids) / len(cited_ids)) if cited_ids else 0.0
    support = tuple(n for n, cid in zip(cited_numbers, cited_ids, strict=True) if cid in supporting)
    return CitationScore(coverage=coverage, redundancy=redundancy, reward=coverage - redundancy, supporting=support)


# ----------------------------------------------------------------------------- judging trajectories
@dataclass(frozen=True)
class CitationItem:
    """One trajectory to judge: its question, answer, cited passage numbers, every passage it retrieved
    (rollout entries {number, id, title, text}), its outcome, and the question's gold evidence (None when the
    data marks none; only the gold judge reads it)."""

    question: str
    answer: str | None
    citations: Sequence[int]
    passages: Sequence[Mapping[str, Any]] | None
    outcome: Outcome | str
    gold: GoldEvidence | None = None


@dataclass(frozen=True)
class CitationJudgement:
    """The judge's verdict on one item and its score, or the reason there is none: `error` (the judge failed)
    or `skipped` (deliberately not judged, e.g. no gold evidence under `critic.gold_fallback: none`).
    `judge` names the judge that gave the verdict when it is not the configured one's label (`fallback`)."""

    verdict: CriticOutput | None = None
    score: CitationScore | None = None
    error: str | None = None
    skipped: str | None = None
    judge: str | None = None
    fallback: bool = False

    @property
    def failed(self) -> bool:
        return self.error is not None

    def summary(self, label: str) -> dict[str, Any]:
        """The verdict summary stored on a predictions line (docs/formats.md)."""
        label = self.judge or label
        if self.skipped is not None:
            return {"judge": label, "skipped": self.skipped}
        if self.failed or self.verdict is None or self.score is None:
            return {"judge": label, "failed": True, "error": self.error or "no valid verdict"}
        return {"judge": label, **({"fallback": True} if self.fallback else {}),
                "coverage": self.score.coverage, "redundancy": self.score.redundancy,
                "reward": self.score.reward, "groundedness": float(self.verdict.overall_groundedness),
                **({"judge_groundedness": self.verdict.reported_groundedness} if disagrees(self.verdict) else {}),
                "claims": len(self.verdict.verified_claims), "supporting": list(self.score.supporting),
                "flags": list(self.verdict.flags)}


def judged(outcome: Outcome | str) -> bool:
    """SPEC section 4 step 10: only answered, valid trajectories (correct or wrong) are judged."""
    return Outcome(outcome) in (Outcome.CORRECT, Outcome.WRONG)


def _inputs(judge: Judge, items: Sequence[CitationItem], out: list[CitationJudgement | None]
            ) -> tuple[list[int], list[CriticInput], dict[int, str]]:
    """The items to send to the judge (index, input) and their route (`judge.route`, when the judge has one:
    the gold judge's fallback); malformed and skipped items are settled in `out`."""
    idx, inputs, routes = [], [], {}
    route = getattr(judge, "route", None)
    for j, item in enumerate(items):
        if not judged(item.outcome):
            continue
        try:
            refs_j = passages_from_rollout(item.passages, where=f"passages of item {j}")
        except ValueError as e:
            out[j] = CitationJudgement(error=str(e))
            continue
        inp = build_critic_input(item.question, item.answer or "", item.citations, refs_j, item.gold)
        if route is not None:
            r = route(inp)
            if r is None:
                out[j] = CitationJudgement(skipped="no gold evidence (critic.gold_fallback: none)")
                continue
            routes[j] = r
        inputs.append(inp)
        idx.append(j)
    return idx, inputs, routes


def _audited(verdict: CriticOutput, inp: CriticInput, who: str, answer_claim: bool) -> CriticOutput | None:
    """`audit_verdict`, or None (that verdict failed) where the audit cannot rebuild it: one odd verdict costs
    its own item, never the batch or the caller."""
    try:
        return audit_verdict(verdict, inp, answer_claim=answer_claim)
    except Exception as e:  # noqa: BLE001 - see safe_verify
        log.warning("%s: a verdict failed its audit and counts as a judge failure: %s", who, str(e)[:300])
        return None


def safe_verify(judge: Judge, inputs: Sequence[CriticInput], who: str, answer_claim: bool = False
                ) -> tuple[list[CriticOutput | None], str | None]:
    """`judge.verify(inputs)` that never raises: (one verdict per input, None), or ([None] * n, why) when the
    judge raised or returned another number of verdicts (logged once, as `who`). A judge must never fail
    training, evaluation or the critic loop; its failures are returned for the caller to count. Every verdict
    is audited against its input (`awarl.critic.audit`: sources must be retrieved passages, groundedness
    recounted from the claims, the judge's own figure kept beside it; with `answer_claim`, an answer no claim
    states counted as an unsupported claim)."""
    try:
        verdicts = list(judge.verify(list(inputs)))
        if len(verdicts) != len(inputs):
            raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(inputs)} inputs")
    except Exception as e:  # noqa: BLE001 - see the docstring
        log.warning("%s: the judge failed on a batch of %d: %s", who, len(inputs), e)
        return [None] * len(inputs), str(e)
    audited = [None if v is None else _audited(v, inp, who, answer_claim)
               for v, inp in zip(verdicts, inputs, strict=True)]
    off = sum(1 for v in audited if v is not None and disagrees(v))
    if off:
        log.info("%s: %d of %d verdicts reported another groundedness than their claims give (recount used)",
                 who, off, len(audited))
    return audited, None


def judge_citations(judge: Judge | None, items: Sequence[CitationItem],
                    inferred_weight: float) -> list[CitationJudgement | None]:
    """One entry per item: None where it is not judged (no judge, or not correct/wrong), else the verdict and
    its score, a skip, or a failure (a malformed passage list, a judge exception or a missing verdict). A judge
    never fails the caller: its failures are returned, for the caller to count."""
    out: list[CitationJudgement | None] = [None] * len(items)
    if judge is None:
        return out
    idx, inputs, routes = _inputs(judge, items, out)
    if not inputs:
        return out
    # a judge told to state the answer as one of its claims (the LLM judge) must have done so: a verdict about
    # something else must not score the answer's citations
    verdicts, failed = safe_verify(judge, inputs, "citation judge",
                                   answer_claim=bool(getattr(judge, "claims_state_the_answer", False)))
    if failed is not None:
        for j in idx:
            out[j] = CitationJudgement(error=failed[:500])
        return out
    own = getattr(judge, "name", None)
    for j, v, inp in zip(idx, verdicts, inputs, strict=True):
        via = routes.get(j)
        tag: dict[str, Any] = {"judge": via, "fallback": True} if via is not None and via != own else {}
        out[j] = CitationJudgement(error="no valid verdict", **tag) if v is None else CitationJudgement(
            verdict=v, score=citation_reward(v, items[j].citations, inp.passages, inferred_weight), **tag)
    return out
