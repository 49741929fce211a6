"""Gold-evidence judge (`critic.judge: gold`): citations checked against the dataset's supporting evidence.

Deterministic and offline. Its claims are the gold facts, one per gold supporting paragraph of the question
(`awarl.data.evidence.gold_evidence`: HotpotQA/2Wiki supporting facts, MuSiQue supporting paragraphs), not
the answer's wording; each is
- grounded   in the CITED passages that match its paragraph (source_ids = those), or, when none is cited,
             in the retrieved ones that match (so `overall_groundedness` is the share of the gold evidence the
             trajectory retrieved, as with the other judges, and the fact earns no coverage: flagged uncited);
- unsupported when no retrieved passage matches its paragraph (the evidence was never retrieved).
A cited passage that matches no gold paragraph is flagged. Under `citation_reward` that makes coverage the
citations' recall of the gold paragraphs and 1 − redundancy their precision (citations of numbers never
shown count as wrong), whatever the answer says: the gold judge grades the citations, not the answer.

Matching a passage to a gold paragraph (`gold_matches`): a closed-corpus id (`p-` + 16 hex, from
`awarl data corpus`) matches by id only (two paragraphs of one article are different evidence there); any
other id (wiki-18's numbers, another corpus) matches by normalised title (`title_key`), so every chunk of a
gold article matches. A gold paragraph the record has no text for (no closed-corpus id) matches by title.

Questions without gold evidence (NQ-style data) go to `critic.gold_fallback`: the lexical judge (counted as
fallbacks, and their verdicts are labelled `lexical`), or `none` (not judged: no citation reward, counted).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeGuard

from awarl.config import CriticConfig
from awarl.critic.lexical_judge import LexicalJudge
from awarl.critic.schema import ClaimVerification, CriticInput, CriticOutput, Judge, JudgeKind, PassageRef
from awarl.data.evidence import GoldEvidence, GoldParagraph, passage_id_key, title_key
from awarl.io import loads_json

CLOSED_ID = re.compile(r"p-[0-9a-f]{16}")
_CLAIM_CHARS = 300


def has_evidence(ev: GoldEvidence | None) -> TypeGuard[GoldEvidence]:
    return ev is not None and bool(ev.paragraphs)


def evidence_from(value: Any, where: str = "gold_evidence") -> GoldEvidence | None:
    """A GoldEvidence from what a row, a rollout column or a predictions line carries: None, a GoldEvidence, its
    `to_dict()`, or that dict as a JSON string. Empty evidence is None."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = loads_json(value)
        except ValueError as e:
            raise ValueError(f"{where}: not JSON: {e}") from None
    if isinstance(value, dict):
        try:
            value = GoldEvidence.from_dict(value)
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{where}: not a gold evidence object ({type(e).__name__}: {e})") from None
    if not isinstance(value, GoldEvidence):
        raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
    return value if has_evidence(value) else None


def compact_evidence(ev: GoldEvidence | None) -> dict[str, Any] | None:
    """`ev.to_dict()` without the paragraphs' full text (the judge matches by id and title, and words its
    claims from the supporting sentences, hops and triples): small enough for every training row and
    predictions line. None when there is no evidence."""
    if not has_evidence(ev):
        return None
    return replace(ev, paragraphs=tuple(replace(p, text="") for p in ev.paragraphs)).to_dict()


def gold_matches(ev: GoldEvidence, pid: str, title: str) -> tuple[int, ...]:
    """Indices of the gold paragraphs a retrieved passage (id, title) is (rule in the module docstring)."""
    key = title_key(title) if title else ""
    pid = passage_id_key(pid)
    if CLOSED_ID.fullmatch(pid):
        hits = tuple(k for k, p in enumerate(ev.paragraphs) if p.passage_id == pid)
        return hits or tuple(k for k, p in enumerate(ev.paragraphs)
                             if p.passage_id is None and key and p.title_key == key)
    return tuple(k for k, p in enumerate(ev.paragraphs) if key and p.title_key == key)


def fact_text(ev: GoldEvidence, k: int) -> str:
    """The gold fact of paragraph k, worded from what the dataset gives: MuSiQue's hop (sub-question and
    answer), 2Wiki's triples about its subject, HotpotQA's supporting sentences, else the title."""
    p: GoldParagraph = ev.paragraphs[k]
    hops = [f"{h.question} {h.answer}" for h in ev.hops
            if (p.passage_id and h.passage_id == p.passage_id) or (not p.passage_id and h.title == p.title)]
    triples = [f"{t.subject} {t.relation.replace('_', ' ')} {t.object}" for t in ev.triples if t.title == p.title]
    body = "; ".join(hops or triples) or " ".join(p.sentences)
    text = f"{p.title}: {body}" if body else p.title
    return text if len(text) <= _CLAIM_CHARS else text[: _CLAIM_CHARS - 1] + "…"


def _label(p: PassageRef) -> str:
    return f"[{p.number}] {p.id}"


def gold_verdict(ev: GoldEvidence, passages: Sequence[PassageRef], cited: Sequence[PassageRef]) -> CriticOutput:
    """The gold judge's verdict on one trajectory (module docstring)."""
    matches = {p.id: gold_matches(ev, p.id, p.title) for p in [*passages, *cited]}
    claims: list[ClaimVerification] = []
    flags: list[str] = []
    for k in range(len(ev.paragraphs)):
        fact = fact_text(ev, k)
        in_cited = [p.id for p in cited if k in matches[p.id]]
        in_retrieved = [p.id for p in passages if k in matches[p.id]]
        if in_cited or in_retrieved:
            claims.append(ClaimVerification(claim=fact, status="grounded", source_ids=in_cited or in_retrieved,
                                            confidence=1.0))
            if not in_cited:
                shown = next(p for p in passages if p.id == in_retrieved[0])
                flags.append(f"uncited gold passage {_label(shown)} for {ev.paragraphs[k].title!r}")
        else:
            claims.append(ClaimVerification(claim=fact, status="unsupported", source_ids=[], confidence=1.0))
            flags.append(f"gold evidence not retrieved: {ev.paragraphs[k].title!r}")
    for p in cited:
        if not matches[p.id]:
            flags.append(f"cited passage {_label(p)} is not gold evidence")
    grounded = sum(c.status == "grounded" for c in claims)
    return CriticOutput(verified_claims=claims, overall_groundedness=grounded / len(claims) if claims else 0.0,
                        flags=list(dict.fromkeys(flags)))


def build(cfg: CriticConfig, cache_dir: str | os.PathLike[str] | None = None) -> GoldJudge:
    """The factory of the registered judge (GOLD): with the lexical judge for the questions without evidence
    unless `critic.gold_fallback: none`."""
    return GoldJudge(cfg, fallback=LexicalJudge(cfg) if cfg.gold_fallback == "lexical" else None)


GOLD = JudgeKind(build, oracle=True)  # awarl.choices.JUDGES `gold`: it reads the gold evidence


class GoldJudge:
    """`verify(items)` against each item's `gold` evidence; items without it go to `fallback` (a judge, or None:
    not judged). `route(item)` says which beforehand (`awarl.rewards.citation.judge_citations` asks)."""

    name = "gold"

    def __init__(self, cfg: CriticConfig | None = None, fallback: Judge | None = None) -> None:
        self.cfg = cfg or CriticConfig(judge="gold")
        self.fallback = fallback
        self.failures = 0
        self.fallbacks = 0  # items judged by the fallback (no gold evidence)

    def route(self, item: CriticInput) -> str | None:
        """`gold`, the fallback's name, or None when the item will not be judged."""
        if has_evidence(item.gold):
            return self.name
        return None if self.fallback is None else getattr(self.fallback, "name", type(self.fallback).__name__)

    def verify(self, items: list[CriticInput]) -> list[CriticOutput | None]:
        out: list[CriticOutput | None] = [None] * len(items)
        rest: list[int] = []
        for j, item in enumerate(items):
            if has_evidence(item.gold):
                out[j] = gold_verdict(item.gold, item.passages or item.cited, item.cited)
            else:
                rest.append(j)
        if rest and self.fallback is not None:
            self.fallbacks += len(rest)
            for j, v in zip(rest, self.fallback.verify([items[j] for j in rest]), strict=True):
                out[j] = v
            self.failures = getattr(self.fallback, "failures", 0)
        return out

    def close(self) -> None:
        close = getattr(self.fallback, "close", None)
        if close is not None:
            close()


def refs_from_line(passages: Iterable[Any]) -> list[PassageRef]:
    """PassageRefs (no text) from a predictions line's `trajectory.passages` ({number, id, title}); entries
    that are not such objects are left out."""
    out = []
    for p in passages or []:
        if isinstance(p, dict) and isinstance(p.get("number"), int) and p.get("id") is not None:
            out.append(PassageRef(number=p["number"], id=str(p["id"]), title=str(p.get("title") or ""), text=""))
    return out
