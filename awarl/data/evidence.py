"""Gold supporting evidence of a question, the data side of the gold-evidence citation judge (issue 12).

`gold_evidence(ex)` reads, from a `QAExample` of any loader (or of a unified JSONL line), what the dataset
marks as the evidence for its answer:

- **paragraphs**: the gold supporting paragraphs. HotpotQA and 2WikiMultiHopQA (and FlashRAG / Search-R1
  rows built from them) name supporting *sentences* as `supporting_facts` (title, sentence index): one
  paragraph per distinct title, in order of first mention, with its sentence ids and their text. MuSiQue
  marks whole paragraphs (`Paragraph.is_supporting`): one per paragraph (two may share a title).
- **triples**: 2WikiMultiHopQA's `evidences` (subject, relation, object), each linked to the supporting
  paragraph about its subject where one matches (see `GoldEvidence.match_title`).
- **hops**: MuSiQue's `question_decomposition`, one sub-question per hop with `#k` replaced by hop k's
  answer, its answer, and its supporting paragraph.

Matching a cited passage to the gold paragraphs:

- in the closed corpus built from the datasets' contexts (`awarl.data.corpus.build_corpus`), by id:
  `GoldParagraph.passage_id` is exactly the id `build_corpus` gives that paragraph (same normalisation);
- in an open corpus such as wiki-18, whose passages are 100-word chunks of articles with the title as the
  first line of `contents` (`"Title"\\ntext`), by title: `title_key` of the passage's title. Every chunk of a
  gold article matches its gold paragraph: the best a title can tell.

`title_key` rule (conservative: it only removes differences of form, never of meaning): Unicode NFC; HTML
entities decoded (`&amp;` is `&`); curly quotes and apostrophes made straight; the double quotes at either end
removed (wiki-18 quotes its titles, and quotes a title's own quotes again: the key of `"Heroes"` is that of
`""Heroes""`; a Passage's title keeps its own, awarl.retrieval.types.unquote_title); underscores (URL form)
made spaces; whitespace collapsed; case folded. Disambiguation parentheses are kept: "Rush (band)" and "Rush" are different
articles. `base_title_key` drops one trailing parenthetical, for the loose match `match_title(...,
loose=True)` allows only when one side has no parenthetical and a single gold paragraph has that base.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import asdict, dataclass
from typing import Any

from awarl.data.corpus import paragraph_passage_id
from awarl.data.types import Paragraph, QAExample

_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201b": "'", "\u2032": "'",
                         "\u201c": '"', "\u201d": '"', "\u201f": '"', "\u2033": '"'})
_PAREN_TAIL = re.compile(r"\s*\([^()]*\)$")
_HOP_REF = re.compile(r"#(\d+)")


def title_key(title: str) -> str:
    """Normalised title for matching the same article across corpora (rule in the module docstring). Takes
    a dataset's title, a retrieved `Passage.title`, or the raw first line of a wiki-18 `contents` alike."""
    # every quote at the ends, not one pair: the key of a title and of the corpus line that quotes it again
    # (`"Heroes"` and `""Heroes""`) must be one
    t = unicodedata.normalize("NFC", html.unescape(title)).translate(_QUOTES).strip().strip('"')
    return " ".join(t.replace("_", " ").split()).casefold()


def passage_id_key(pid: object) -> str:
    """A passage id as every judge compares it: a string, surrounding whitespace stripped. Applied to the ids of
    retrieved passages (`PassageRef`), of a judge's `source_ids` and of gold paragraphs alike, so an id a
    retriever, a data file or an LLM judge wrote with a stray space or newline still names its passage."""
    return str(pid).strip()


def _opt_id(pid: object) -> str | None:
    return None if pid is None else passage_id_key(pid) or None


def base_title_key(title: str) -> str:
    """`title_key` without one trailing disambiguation parenthetical ("Rush (band)" -> "rush")."""
    key = title_key(title)
    return _PAREN_TAIL.sub("", key) or key


@dataclass(frozen=True)
class GoldParagraph:
    title: str
    passage_id: str | None  # the closed-corpus id; None when the record carries no text for it
    text: str
    sentence_ids: tuple[int, ...] = ()  # supporting sentences (HotpotQA/2Wiki); () = the whole paragraph
    sentences: tuple[str, ...] = ()  # their text, where the record keeps the sentence split

    @property
    def title_key(self) -> str:
        return title_key(self.title)


@dataclass(frozen=True)
class GoldTriple:
    subject: str
    relation: str
    object: str
    title: str | None = None  # the gold paragraph about the subject, where one matches


@dataclass(frozen=True)
class GoldHop:
    question: str  # with `#k` replaced by hop k's answer
    answer: str
    title: str | None = None  # its supporting paragraph
    passage_id: str | None = None


@dataclass(frozen=True)
class GoldEvidence:
    paragraphs: tuple[GoldParagraph, ...] = ()
    triples: tuple[GoldTriple, ...] = ()
    hops: tuple[GoldHop, ...] = ()

    @property
    def passage_ids(self) -> frozenset[str]:
        return frozenset(p.passage_id for p in self.paragraphs if p.passage_id)

    @property
    def title_keys(self) -> frozenset[str]:
        return frozenset(p.title_key for p in self.paragraphs)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (for a predictions line or a training row); `from_dict` reads it back."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GoldEvidence:
        return cls(
            paragraphs=tuple(GoldParagraph(p["title"], _opt_id(p.get("passage_id")), p.get("text", ""),
                                           tuple(p.get("sentence_ids") or ()), tuple(p.get("sentences") or ()))
                             for p in d.get("paragraphs") or ()),
            triples=tuple(GoldTriple(t["subject"], t["relation"], t["object"], t.get("title"))
                          for t in d.get("triples") or ()),
            hops=tuple(GoldHop(h["question"], h["answer"], h.get("title"), _opt_id(h.get("passage_id")))
                       for h in d.get("hops") or ()),
        )

    def match_id(self, pid: str) -> GoldParagraph | None:
        """The gold paragraph a closed-corpus passage id is, if any."""
        pid = passage_id_key(pid)
        return next((p for p in self.paragraphs if p.passage_id == pid), None)

    def match_title(self, title: str, loose: bool = False) -> tuple[GoldParagraph, ...]:
        """The gold paragraphs of the article titled `title` (an open-corpus passage's title). `loose` also
        accepts a title that differs by a disambiguation parenthetical present on one side only, when a single
        gold paragraph has that base title."""
        key = title_key(title)
        hits = tuple(p for p in self.paragraphs if p.title_key == key)
        if hits or not loose:
            return hits
        base = base_title_key(title)
        cands = tuple(p for p in self.paragraphs if base_title_key(p.title) == base
                      and (p.title_key == base or key == base))
        return cands if len({p.title_key for p in cands}) == 1 else ()


def _first_by_title(context: list[Paragraph]) -> dict[str, Paragraph]:
    out: dict[str, Paragraph] = {}
    for p in context:
        out.setdefault(p.title, p)  # 2Wiki repeats some paragraphs verbatim: the first stands for both
    return out


def _paragraphs_from_facts(ex: QAExample) -> list[GoldParagraph]:
    by_title = _first_by_title(ex.context)
    ids: dict[str, list[int]] = {}
    for title, i in ex.supporting_facts:
        ids.setdefault(title, [])
        if i not in ids[title]:
            ids[title].append(i)
    out = []
    for title, sids in ids.items():
        p = by_title.get(title)
        if p is None:  # the context was dropped (malformed) or never shipped: matchable by title only
            out.append(GoldParagraph(title, None, "", tuple(sids)))
            continue
        sentences = tuple(s for s in (p.sentence(i) for i in sids) if s)
        out.append(GoldParagraph(title, paragraph_passage_id(p), p.text, tuple(sids), sentences))
    return out


def _paragraph(p: Paragraph) -> GoldParagraph:
    return GoldParagraph(p.title, paragraph_passage_id(p), p.text)


def _resolve_refs(question: str, answers: list[str]) -> str:
    """MuSiQue's `#k` (hop k's answer, 1-based) replaced by that answer; an unknown k is left as it is."""
    def sub(m: re.Match[str]) -> str:
        k = int(m.group(1))
        return answers[k - 1] if 1 <= k <= len(answers) else m.group(0)

    return _HOP_REF.sub(sub, question)


def _hops(ex: QAExample) -> list[GoldHop]:
    hops: list[GoldHop] = []
    for h in ex.metadata.get("question_decomposition") or []:
        # paragraph_support_idx is MuSiQue's paragraph `idx`, its position: the loader keeps the order
        idx = h.get("paragraph_support_idx")
        p = ex.context[idx] if isinstance(idx, int) and 0 <= idx < len(ex.context) else None
        question = _resolve_refs(str(h["question"]), [hop.answer for hop in hops]).strip()
        hops.append(GoldHop(question, str(h["answer"]).strip(), p.title if p else None,
                            paragraph_passage_id(p) if p else None))
    return hops


def gold_evidence(ex: QAExample) -> GoldEvidence:
    """The gold supporting evidence of `ex` (empty when its dataset marks none, e.g. NQ)."""
    if ex.supporting_facts:
        paragraphs = _paragraphs_from_facts(ex)
    else:
        paragraphs, seen = [], set()
        for p in ex.context:
            if p.is_supporting and (p.title, p.text) not in seen:
                seen.add((p.title, p.text))
                paragraphs.append(_paragraph(p))
    probe = GoldEvidence(paragraphs=tuple(paragraphs))
    triples = []
    for s, r, o in ex.metadata.get("evidences") or []:
        hit = probe.match_title(s, loose=True)  # "The Zone" is about the paragraph "The Zone (2017 film)"
        triples.append(GoldTriple(s, r, o, hit[0].title if hit else None))
    return GoldEvidence(paragraphs=probe.paragraphs, triples=tuple(triples), hops=tuple(_hops(ex)))
