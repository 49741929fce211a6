"""Deterministic citation judge for CPU runs and tests: lexical overlap with the original passages.

Claims: an answer of at most `short_answer_words` words is one claim; a longer one is split into sentences,
then on commas and `and`. A claim is
- grounded   in a passage when the share of its content tokens found in that passage (normalised token
             recall) is >= `support_threshold`; source_id = that passage (a cited one is preferred);
- inferred   when no single passage reaches the threshold but the passages together do;
- unsupported otherwise.
Flags: a grounded claim whose supporting passage is not cited; a cited passage that supports no claim;
conflicting values (a claim's number appears in one passage about the same thing while another such
passage gives a different number).
It is a heuristic: it cannot see paraphrase or negation. Use the OpenAI-compatible judge for real runs.
"""

from __future__ import annotations

import re
import string

from awarl.config import CriticConfig
from awarl.critic.schema import ClaimVerification, CriticInput, CriticOutput, PassageRef

_STOP = frozenset({
    "a", "an", "the", "and", "or", "of", "in", "on", "at", "to", "for", "from", "by", "with", "as", "is",
    "was", "were", "are", "be", "been", "being", "it", "its", "this", "that", "these", "those", "he",
    "she", "they", "his", "her", "their", "him", "them", "who", "whom", "which", "what", "when", "where",
    "why", "how", "than", "then", "there", "also", "not", "no", "but", "into", "over", "under", "after",
    "before", "about",
})
_PUNCT = re.compile(f"[{re.escape(string.punctuation)}‘’“”–—]")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+")
_SPLIT = re.compile(r",|\band\b", flags=re.IGNORECASE)


def tokens(text: str) -> list[str]:
    """Lower-case, punctuation to spaces, articles dropped (SQuAD-style normalisation, token level)."""
    return [t for t in _PUNCT.sub(" ", text.lower()).split() if t not in ("a", "an", "the")]


def content_tokens(text: str) -> set[str]:
    toks = tokens(text)
    content = {t for t in toks if t not in _STOP}
    return content or set(toks)


def split_claims(answer: str, short_answer_words: int = 5) -> list[str]:
    answer = answer.strip()
    if not answer:
        return []
    if len(answer.split()) <= short_answer_words:
        return [answer]
    claims: list[str] = []
    for sentence in _SENTENCE.split(answer):
        for piece in _SPLIT.split(sentence):
            piece = piece.strip(" .;!?")
            if tokens(piece):
                claims.append(piece)
    return claims


def _recall(claim: set[str], passage: set[str]) -> float:
    return len(claim & passage) / len(claim) if claim else 0.0


def _is_number(tok: str) -> bool:
    return any(ch.isdigit() for ch in tok)


class LexicalJudge:
    def __init__(self, cfg: CriticConfig | None = None) -> None:
        self.cfg = cfg or CriticConfig()
        self.failures = 0

    def verify(self, items: list[CriticInput]) -> list[CriticOutput | None]:
        return [self.verify_one(item) for item in items]

    def verify_one(self, item: CriticInput) -> CriticOutput:
        th = self.cfg.support_threshold
        passages = item.passages or item.cited
        ptoks = {p.id: set(tokens(f"{p.title} {p.text}")) for p in passages}
        cited_ids = [p.id for p in item.cited]
        label = {p.id: f"[{p.number}] {p.id}" for p in passages}
        claims = split_claims(item.answer, self.cfg.short_answer_words)
        verdicts: list[ClaimVerification] = []
        flags: list[str] = []
        supporting: set[str] = set()
        for claim in claims:
            ct = content_tokens(claim)
            recalls = {p.id: _recall(ct, ptoks[p.id]) for p in passages}
            above = [pid for pid, r in recalls.items() if r >= th]
            if above:
                # Prefer a cited passage, then the best overlap; ties keep retrieval order (deterministic).
                best = max(above, key=lambda pid: (pid in cited_ids, recalls[pid]))
                verdicts.append(ClaimVerification(claim=claim, status="grounded", source_id=best,
                                                  confidence=round(recalls[best], 4)))
                supporting.add(best)
                if best not in cited_ids:
                    flags.append(f"uncited supporting passage {label[best]} for claim {claim!r}")
            else:
                union = set().union(*ptoks.values()) if ptoks else set()
                u = _recall(ct, union)
                contributors = [pid for pid, r in recalls.items() if r > 0]
                if u >= th and len(contributors) >= 2:
                    best = max(contributors, key=lambda pid: recalls[pid])
                    verdicts.append(ClaimVerification(claim=claim, status="inferred", source_id=best,
                                                      confidence=round(u, 4)))
                    supporting.update(contributors)
                else:
                    verdicts.append(ClaimVerification(claim=claim, status="unsupported", source_id=None,
                                                      confidence=round(1.0 - u, 4)))
            flags.extend(self._conflicts(claim, ct, passages, ptoks, label))
        for p in item.cited:
            if p.id not in supporting:
                flags.append(f"cited passage {label.get(p.id, p.id)} supports no claim")
        grounded = sum(v.status == "grounded" for v in verdicts)
        return CriticOutput(verified_claims=verdicts,
                            overall_groundedness=grounded / len(verdicts) if verdicts else 0.0,
                            flags=list(dict.fromkeys(flags)))

    def _conflicts(self, claim: str, ct: set[str], passages: list[PassageRef], ptoks: dict[str, set[str]],
                   label: dict[str, str]) -> list[str]:
        numbers = {t for t in ct if _is_number(t)}
        context = ct - numbers
        if not numbers or not context:
            return []
        related = [p.id for p in passages if _recall(context, ptoks[p.id]) >= self.cfg.support_threshold]
        agree = [pid for pid in related if numbers <= ptoks[pid]]
        disagree = [pid for pid in related
                    if not (numbers & ptoks[pid]) and any(_is_number(t) for t in ptoks[pid])]
        if agree and disagree:
            return [f"conflicting values for claim {claim!r}: {label[agree[0]]} vs {label[disagree[0]]}"]
        return []
