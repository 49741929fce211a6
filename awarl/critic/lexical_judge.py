"""Deterministic citation judge for CPU runs and data without gold evidence: lexical overlap with the passages.

Tokens: lower-case, punctuation to spaces (Unicode punctuation, as EM's normalisation reads it:
`Paris…`, `«Paris»`, `Paris。` are `paris`), articles dropped, and the possessive `'s` removed first
("Arthur's Magazine" is {arthur, magazine}, not a stray `s` that every passage with an apostrophe contains).

Claims: an answer of at most `short_answer_words` words is one claim; a longer one is split into sentences,
then on commas and `and`.

A short answer (a name, a date) is grounded jointly by
- its **answer passage**: one containing at least `short_support_threshold` of the answer's content tokens
  (all of them by default: an entity name is not half supported), a cited one preferred, then the one most
  about the question; and
- the **question's entity passages**: retrieved passages whose title the question names (a comparison's two
  entities, a bridge question's first hop); their text is evidence the answer rests on. One passage per
  entity (`entity_groups`): the question must name it as a name (with a capital or a number where the question
  has capitals: "rock band" does not name "Band (rock and pop)"); a title matching only inside a longer
  matched title is part of that name ("Berlioz (disambiguation)" in "Hector Berlioz"); of several passages
  whose titles match the same words ("Manon", "Manon (disambiguation)") the cited one stands for it, else the
  one most about the question. So a distractor that merely shares a name or a common noun with the question
  is not a required source, and citing it beside the right one is redundant, never a gain.
A cited passage that also contains the answer and at least `bridge_overlap` of the question's content words
supports it too (a bridge passage that repeats the answer). With no answer passage, a short answer is
inferred when several passages together hold `support_threshold` of its tokens. A yes/no answer is grounded in the compared
entities' passages (two or more named by the question; one: inferred, none: unsupported); the heuristic
cannot tell yes from no, so its confidence is 0.5.

A longer claim is grounded in a passage holding at least `support_threshold` of its content tokens (a cited
one preferred), inferred when only several passages together do (source_ids: the fewest that do, picked
greedily), unsupported otherwise.

Flags: a supporting passage that is not cited; a cited passage that supports no claim; conflicting values (a
claim's number appears in one passage about the same thing while another such passage gives a different
number). It is a heuristic: it cannot see paraphrase, negation or which way a comparison goes. Its agreement
with the gold judge is measured in docs/benchmarks.md; use the gold judge where the data has evidence and the
OpenAI-compatible judge for real runs.
"""

from __future__ import annotations

import os
import re
import string

from awarl.config import CriticConfig
from awarl.critic.schema import ClaimVerification, CriticInput, CriticOutput, PassageRef
from awarl.metrics import is_punct

_STOP = frozenset({
    "a", "an", "the", "and", "or", "of", "in", "on", "at", "to", "for", "from", "by", "with", "as", "is",
    "was", "were", "are", "be", "been", "being", "it", "its", "this", "that", "these", "those", "he",
    "she", "they", "his", "her", "their", "him", "them", "who", "whom", "which", "what", "when", "where",
    "why", "how", "than", "then", "there", "also", "not", "no", "but", "into", "over", "under", "after",
    "before", "about",
})
# Words a question is made of that say nothing about where its answer is.
_QUESTION_WORDS = frozenset({"did", "does", "do", "both", "same", "whose", "name", "called", "either", "one",
                             "many", "much", "has", "have", "had"})
_YES_NO = frozenset({"yes", "no"})
_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b", flags=re.IGNORECASE)
_ASCII_PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+")
_SPLIT = re.compile(r",|\band\b", flags=re.IGNORECASE)
_PAREN_TAIL = re.compile(r"\s*\([^()]*\)\s*$")


def _punct_to_spaces(text: str) -> str:
    """ASCII punctuation and every Unicode punctuation character (category P) to a space: the rule of
    `awarl.metrics.normalize_answer`, so an answer EM accepts tokenises as its gold would."""
    text = _ASCII_PUNCT.sub(" ", text)
    return text if text.isascii() else "".join(" " if is_punct(ch) else ch for ch in text)


def cased_tokens(text: str) -> list[str]:
    """`tokens(text)` before lower-casing (the same tokens, one for one): the question's capitals say which
    of its words are names."""
    text = _POSSESSIVE.sub("", text)
    return [t for t in _punct_to_spaces(text).split() if t.lower() not in ("a", "an", "the")]


def tokens(text: str) -> list[str]:
    """Lower-case, possessive `'s` dropped, punctuation to spaces, articles dropped (SQuAD-style
    normalisation, token level)."""
    return [t.lower() for t in cased_tokens(text)]


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


def _title_forms(title: str) -> list[list[str]]:
    """A title as the question may name it: whole, without a disambiguation parenthetical, before a comma
    ("Van Hook Township, Mountrail County, North Dakota" -> "Van Hook Township")."""
    forms: list[list[str]] = []
    for t in (title, _PAREN_TAIL.sub("", title), title.split(",", 1)[0]):
        toks = tokens(t)
        if toks and any(x not in _STOP for x in toks) and toks not in forms:
            forms.append(toks)
    return forms


def mentions(question: list[str], title: str) -> bool:
    """Whether the question's tokens contain one of the title's forms as a contiguous run."""
    return bool(_named_spans(question, title))


def _named_spans(question: list[str], title: str, cased: list[str] | None = None) -> list[tuple[int, int]]:
    """The runs [i, j) of the question's tokens that are one of the title's forms; with the question's
    `cased` tokens, only runs with a capitalised word or a number (a name, not "rock band" for the title
    "Band (rock and pop)")."""
    spans = []
    for form in _title_forms(title):
        n = len(form)
        for i in range(len(question) - n + 1):
            if question[i:i + n] == form and (cased is None or any(t[:1].isupper() or t[:1].isdigit()
                                                                   for t in cased[i:i + n])):
                spans.append((i, i + n))
    return spans


def entity_groups(question: str, passages: list[PassageRef]) -> list[list[str]]:
    """The entities the question names by a retrieved passage's title, each as the ids of the passages that
    name it (retrieval order). A passage stands for the longest run of the question its title matches; a run
    inside another passage's longer run is part of that name ("Berlioz" in "Hector Berlioz"), and passages
    whose titles match the same run are one entity ("Manon" and "Manon (disambiguation)"). In a question with
    no capitals after its first word (lower-cased data) every match counts; otherwise only names do."""
    cased = cased_tokens(question)
    qseq = [t.lower() for t in cased]
    has_case = any(t[:1].isupper() for t in cased[1:])
    span: dict[str, tuple[int, int]] = {}
    for p in passages:
        found = _named_spans(qseq, p.title, cased if has_case else None)
        if found and p.id not in span:
            span[p.id] = max(found, key=lambda s: s[1] - s[0])
    groups: dict[tuple[int, int], list[str]] = {}
    for pid, (i, j) in span.items():
        if not any(a <= i and j <= b and (a, b) != (i, j) for a, b in span.values()):
            groups.setdefault((i, j), []).append(pid)
    return list(groups.values())


def build(cfg: CriticConfig, cache_dir: str | os.PathLike | None = None) -> LexicalJudge:
    """The registered factory (awarl.choices.JUDGES `lexical`); nothing to cache."""
    return LexicalJudge(cfg)


class LexicalJudge:
    name = "lexical"

    def __init__(self, cfg: CriticConfig | None = None) -> None:
        self.cfg = cfg or CriticConfig()
        self.failures = 0

    def verify(self, items: list[CriticInput]) -> list[CriticOutput | None]:
        return [self.verify_one(item) for item in items]

    def verify_one(self, item: CriticInput) -> CriticOutput:
        passages = item.passages or item.cited
        ptoks = {p.id: set(tokens(f"{p.title} {p.text}")) for p in passages}
        cited = [p.id for p in item.cited]
        label = {p.id: f"[{p.number}] {p.id}" for p in passages}
        claims = split_claims(item.answer, self.cfg.short_answer_words)
        short = len(item.answer.split()) <= self.cfg.short_answer_words
        verdicts: list[ClaimVerification] = []
        flags: list[str] = []
        for claim in claims:
            v = (self._short_claim(claim, item.question, passages, ptoks, cited) if short
                 else self._long_claim(claim, passages, ptoks, cited))
            verdicts.append(v)
            for pid in v.source_ids:
                if v.status == "grounded" and pid not in cited:
                    flags.append(f"uncited supporting passage {label[pid]} for claim {claim!r}")
            flags.extend(self._conflicts(claim, content_tokens(claim), passages, ptoks, label))
        supporting = {pid for v in verdicts if v.status != "unsupported" for pid in v.source_ids}
        for p in item.cited:
            if p.id not in supporting:
                flags.append(f"cited passage {label.get(p.id, p.id)} supports no claim")
        grounded = sum(v.status == "grounded" for v in verdicts)
        return CriticOutput(verified_claims=verdicts,
                            overall_groundedness=grounded / len(verdicts) if verdicts else 0.0,
                            flags=list(dict.fromkeys(flags)))

    def _short_claim(self, claim: str, question: str, passages: list[PassageRef], ptoks: dict[str, set[str]],
                     cited: list[str]) -> ClaimVerification:
        """One short answer: answer passage + the question's entity passages (+ cited bridges); yes/no through
        the entities alone (module docstring)."""
        qseq = tokens(question)
        qc = {t for t in qseq if t not in _STOP and t not in _QUESTION_WORDS}
        # One passage per named entity: a cited one, then the one most about the question. A same-named
        # passage that is not cited is then not required, and citing it too makes one of the two redundant.
        entities = [max(g, key=lambda pid: (pid in cited, _recall(qc, ptoks[pid])))
                    for g in entity_groups(question, passages)]
        if " ".join(tokens(claim)) in _YES_NO:
            if not entities:
                return ClaimVerification(claim=claim, status="unsupported", confidence=0.5)
            return ClaimVerification(claim=claim, status="grounded" if len(entities) >= 2 else "inferred",
                                     source_ids=entities, confidence=0.5)
        ct = content_tokens(claim)
        qc -= ct
        recalls = {p.id: _recall(ct, ptoks[p.id]) for p in passages}
        answer_ps = [pid for pid, r in recalls.items() if r >= self.cfg.short_support_threshold]
        if not answer_ps:  # no passage names it whole: maybe several do together
            return self._joint(claim, ct, ptoks, cited)
        about = {pid: _recall(qc, ptoks[pid]) for pid in answer_ps}
        # A cited passage first, then the one most about the question; ties keep retrieval order.
        best = max(answer_ps, key=lambda pid: (pid in cited, about[pid]))
        bridges = [pid for pid in answer_ps if pid in cited and about[pid] >= self.cfg.bridge_overlap]
        sources = list(dict.fromkeys([best, *entities, *bridges]))
        return ClaimVerification(claim=claim, status="grounded", source_ids=sources,
                                 confidence=round(recalls[best], 4))

    def _long_claim(self, claim: str, passages: list[PassageRef], ptoks: dict[str, set[str]],
                    cited: list[str]) -> ClaimVerification:
        th = self.cfg.support_threshold
        ct = content_tokens(claim)
        recalls = {p.id: _recall(ct, ptoks[p.id]) for p in passages}
        above = [pid for pid, r in recalls.items() if r >= th]
        if above:
            best = max(above, key=lambda pid: (pid in cited, recalls[pid]))
            return ClaimVerification(claim=claim, status="grounded", source_ids=[best],
                                     confidence=round(recalls[best], 4))
        return self._joint(claim, ct, ptoks, cited)

    def _joint(self, claim: str, ct: set[str], ptoks: dict[str, set[str]], cited: list[str]) -> ClaimVerification:
        """Inferred when two or more passages together hold `support_threshold` of the claim's tokens (the
        fewest that do, picked greedily), else unsupported."""
        th = self.cfg.support_threshold
        covered: set[str] = set()
        chosen: list[str] = []
        while _recall(ct, covered) < th:
            gain = {pid: len((ct & ptoks[pid]) - covered) for pid in ptoks if pid not in chosen}
            pid = max(gain, key=lambda k: (gain[k], k in cited), default=None)
            if pid is None or gain[pid] == 0:
                break
            chosen.append(pid)
            covered |= ct & ptoks[pid]
        u = _recall(ct, covered)
        if u >= th and len(chosen) >= 2:
            return ClaimVerification(claim=claim, status="inferred", source_ids=chosen, confidence=round(u, 4))
        return ClaimVerification(claim=claim, status="unsupported", confidence=round(1.0 - u, 4))

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
