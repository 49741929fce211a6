"""Record converters: one function per source format, each turning one raw record into a `QAExample`.

They are pure (no I/O) and raise `RecordError` with a short reason; `awarl.data.loaders` adds the file
and the record index / line number. Conventions shared by all formats:

- `answers` is the gold answer first, then its aliases, without duplicates (order kept).
- `context` paragraphs carry `is_supporting`; HotpotQA/2Wiki paragraphs are their sentences joined with
  single spaces (HotpotQA sentences carry their own leading space, 2Wiki's do not, so we strip and join).
- `supporting_facts` are (title, sentence index) pairs where the source has them (HotpotQA, 2Wiki,
  Search-R1's HotpotQA rows); MuSiQue's support is paragraph-level only (`Paragraph.is_supporting`).
- `metadata` keeps the source's extra fields that are small and useful downstream (type, level,
  decomposition, evidences, ...), never whole prompts or contexts twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from awarl.data.types import Paragraph, QAExample


class RecordError(ValueError):
    """One record is malformed; the loader prefixes the file and record location."""


FORMATS: tuple[str, ...] = ("hotpotqa", "2wikimultihopqa", "musique", "flashrag", "searchr1", "unified")

# Dataset recorded on each example when neither the caller nor the record names one.
DEFAULT_DATASET: dict[str, str] = {"hotpotqa": "hotpotqa", "2wikimultihopqa": "2wikimultihopqa",
                                   "musique": "musique"}


def _get(rec: Any, key: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
    if not isinstance(rec, dict):
        raise RecordError(f"expected a JSON object, got {type(rec).__name__}")
    if key not in rec or rec[key] is None:
        if optional:
            return None
        raise RecordError(f"missing key {key!r}")
    value = rec[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise RecordError(f"key {key!r}: expected {names}, got {type(value).__name__}")
    return value


def _str_id(value: Any, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value) == "":
        raise RecordError(f"key {key!r}: expected a non-empty string id, got {value!r}")
    return str(value)


def _answers(first: Any, aliases: Any, key: str) -> list[str]:
    out: list[str] = []
    items = ([] if first is None else [first]) + list(aliases or [])
    for a in items:
        if not isinstance(a, (str, int, float)) or isinstance(a, bool):
            raise RecordError(f"key {key!r}: answers must be strings, got {type(a).__name__}")
        a = str(a).strip()
        if a and a not in out:
            out.append(a)
    return out


def _join_sentences(sentences: Any, where: str) -> str:
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        raise RecordError(f"{where}: sentences must be a list of strings")
    return " ".join(s.strip() for s in sentences if s.strip())


def _supporting_facts(raw: Any) -> list[tuple[str, int]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise RecordError("key 'supporting_facts': expected a list of [title, sentence index]")
    out = []
    for i, sf in enumerate(raw):
        if (not isinstance(sf, (list, tuple)) or len(sf) != 2 or not isinstance(sf[0], str)
                or isinstance(sf[1], bool) or not isinstance(sf[1], int)):
            raise RecordError(f"key 'supporting_facts'[{i}]: expected [title, sentence index], got {sf!r}")
        out.append((sf[0], int(sf[1])))
    return out


def _title_sentence_context(raw: Any, support_titles: set[str]) -> list[Paragraph]:
    """HotpotQA/2Wiki context: a list of [title, [sentence, ...]]."""
    if not isinstance(raw, list):
        raise RecordError("key 'context': expected a list of [title, sentences]")
    paras = []
    for i, item in enumerate(raw):
        if not isinstance(item, (list, tuple)) or len(item) != 2 or not isinstance(item[0], str):
            raise RecordError(f"key 'context'[{i}]: expected [title, [sentences]]")
        title = item[0]
        paras.append(Paragraph(title=title, text=_join_sentences(item[1], f"key 'context'[{i}]"),
                               is_supporting=title in support_titles))
    return paras


def convert_hotpotqa(rec: Any, dataset: str | None = None) -> QAExample:
    """HotpotQA official JSON record (`_id, question, answer, supporting_facts, context, type, level`).
    `answer`/`supporting_facts` may be absent (the official test set) and then stay empty."""
    sfs = _supporting_facts(_get(rec, "supporting_facts", list, optional=True))
    return QAExample(
        id=_str_id(_get(rec, "_id", (str, int)), "_id"),
        dataset=dataset or "hotpotqa",
        question=_get(rec, "question", str).strip(),
        answers=_answers(_get(rec, "answer", (str, int, float), optional=True), None, "answer"),
        supporting_facts=sfs,
        context=_title_sentence_context(_get(rec, "context", list), {t for t, _ in sfs}),
        metadata={k: rec[k] for k in ("type", "level") if k in rec},
    )


def convert_2wiki(rec: Any, dataset: str | None = None) -> QAExample:
    """2WikiMultiHopQA official JSON record (HotpotQA's layout plus `evidences`, `entity_ids`, `answer_id`)."""
    sfs = _supporting_facts(_get(rec, "supporting_facts", list, optional=True))
    return QAExample(
        id=_str_id(_get(rec, "_id", (str, int)), "_id"),
        dataset=dataset or "2wikimultihopqa",
        question=_get(rec, "question", str).strip(),
        answers=_answers(_get(rec, "answer", (str, int, float), optional=True), None, "answer"),
        supporting_facts=sfs,
        context=_title_sentence_context(_get(rec, "context", list), {t for t, _ in sfs}),
        metadata={k: rec[k] for k in ("type", "evidences", "entity_ids", "answer_id") if k in rec},
    )


def convert_musique(rec: Any, dataset: str | None = None) -> QAExample:
    """MuSiQue official JSONL record (`id, question, answer, answer_aliases, answerable, paragraphs`).
    Unanswerable questions (MuSiQue-Full) keep their answer strings and get `answerable=False`."""
    paragraphs = _get(rec, "paragraphs", list)
    context = []
    for i, p in enumerate(paragraphs):
        if not isinstance(p, dict):
            raise RecordError(f"key 'paragraphs'[{i}]: expected an object")
        title, text = p.get("title"), p.get("paragraph_text")
        if not isinstance(title, str) or not isinstance(text, str):
            raise RecordError(f"key 'paragraphs'[{i}]: needs string 'title' and 'paragraph_text'")
        context.append(Paragraph(title=title, text=text.strip(), is_supporting=bool(p.get("is_supporting"))))
    answerable = _get(rec, "answerable", bool, optional=True)
    meta = {k: rec[k] for k in ("question_decomposition",) if k in rec}
    return QAExample(
        id=_str_id(_get(rec, "id", (str, int)), "id"),
        dataset=dataset or "musique",
        question=_get(rec, "question", str).strip(),
        answers=_answers(_get(rec, "answer", (str, int, float), optional=True),
                         _get(rec, "answer_aliases", list, optional=True), "answer_aliases"),
        answerable=True if answerable is None else answerable,
        context=context,
        metadata=meta,
    )


def convert_flashrag(rec: Any, dataset: str | None = None) -> QAExample:
    """FlashRAG unified JSONL record (`id, question, golden_answers, metadata`)."""
    meta = _get(rec, "metadata", dict, optional=True) or {}
    return QAExample(
        id=_str_id(_get(rec, "id", (str, int)), "id"),
        dataset=dataset or "flashrag",
        question=_get(rec, "question", str).strip(),
        answers=_answers(None, _get(rec, "golden_answers", list), "golden_answers"),
        metadata=dict(meta),
    )


def convert_searchr1(rec: Any, dataset: str | None = None) -> QAExample:
    """Search-R1 processed parquet row (`id, question, golden_answers, data_source, prompt, ...`). Rows
    from HotpotQA carry `metadata.context`/`supporting_facts` in HF-datasets column layout; we keep them."""
    meta_in = _get(rec, "metadata", dict, optional=True) or {}
    sfs: list[tuple[str, int]] = []
    context: list[Paragraph] = []
    sf_raw = meta_in.get("supporting_facts")
    if isinstance(sf_raw, dict) and sf_raw.get("title") is not None:
        sfs = _supporting_facts([list(x) for x in zip(sf_raw["title"], sf_raw.get("sent_id") or [],
                                                      strict=False)])
    ctx_raw = meta_in.get("context")
    if isinstance(ctx_raw, dict) and ctx_raw.get("title") is not None:
        titles, sents = ctx_raw["title"], ctx_raw.get("sentences") or []
        if len(titles) != len(sents):
            raise RecordError("key 'metadata.context': title and sentences lengths differ")
        context = _title_sentence_context([[t, s] for t, s in zip(titles, sents, strict=True)],
                                          {t for t, _ in sfs})
    meta = {k: rec[k] for k in ("data_source", "ability", "extra_info") if rec.get(k) is not None}
    meta.update({k: meta_in[k] for k in ("type", "level") if meta_in.get(k) is not None})
    source = rec.get("data_source")
    return QAExample(
        id=_str_id(_get(rec, "id", (str, int)), "id"),
        dataset=dataset or (source if isinstance(source, str) and source else "searchr1"),
        question=_get(rec, "question", str).strip(),
        answers=_answers(None, _get(rec, "golden_answers", list), "golden_answers"),
        supporting_facts=sfs,
        context=context,
        metadata=meta,
    )


def convert_unified(rec: Any, dataset: str | None = None) -> QAExample:
    """Our own unified JSONL (`QAExample.to_dict()` lines)."""
    _get(rec, "question", str)
    _get(rec, "dataset", str)
    _str_id(_get(rec, "id", (str, int)), "id")
    _get(rec, "answers", list, optional=True)
    # Checked here because from_dict would coerce silently: bool("false") is True, dict("ab") is an error
    # without the key's name.
    _get(rec, "answerable", bool, optional=True)
    _get(rec, "context", list, optional=True)
    _get(rec, "supporting_facts", list, optional=True)
    _get(rec, "metadata", dict, optional=True)
    try:
        ex = QAExample.from_dict(rec)
    except (TypeError, ValueError, KeyError) as e:
        raise RecordError(f"not a unified QAExample record: {e}") from None
    if dataset:
        ex.dataset = dataset
    return ex


CONVERTERS: dict[str, Callable[[Any, str | None], QAExample]] = {
    "hotpotqa": convert_hotpotqa,
    "2wikimultihopqa": convert_2wiki,
    "musique": convert_musique,
    "flashrag": convert_flashrag,
    "searchr1": convert_searchr1,
    "unified": convert_unified,
}


def sniff_record(rec: Any) -> str | None:
    """Name the format of one raw record from its keys, or None when no format fits."""
    if not isinstance(rec, dict):
        return None
    keys = set(rec)
    if {"answers", "dataset", "question", "id"} <= keys:
        return "unified"
    if {"paragraphs", "question", "id"} <= keys and ("answer_aliases" in keys or "answerable" in keys):
        return "musique"
    if {"_id", "question", "context"} <= keys:
        return "2wikimultihopqa" if keys & {"evidences", "entity_ids", "answer_id"} else "hotpotqa"
    if {"golden_answers", "question", "id"} <= keys:
        return "searchr1" if keys & {"data_source", "prompt", "reward_model"} else "flashrag"
    return None
