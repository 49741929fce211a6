"""Record converters: one function per source format, each turning one raw record into a `QAExample`, and
the `DataFormat` each registers (`awarl.choices.FORMATS`: converter, detection, default dataset name).

They are pure (no I/O) and raise `RecordError` with a short reason; `awarl.data.loaders` adds the file
and the record index / line number. Conventions shared by all formats:

- `answers` is the gold answer first, then its aliases, without duplicates (order kept).
- `context` paragraphs carry `is_supporting`; HotpotQA/2Wiki paragraphs are their sentences joined with
  single spaces (HotpotQA sentences carry their own leading space, 2Wiki's do not, so we strip and join),
  and `sentence_starts` says where each source sentence starts in the text.
- `supporting_facts` are (title, sentence index) pairs where the source has them (HotpotQA, 2Wiki, and
  FlashRAG / Search-R1 rows built from them); MuSiQue's support is paragraph-level (`Paragraph.is_supporting`).
- `metadata` keeps the source's extra fields that are small and useful downstream (type, level,
  decomposition, evidences, ...), never whole prompts or contexts twice.
- A malformed question, id or answer costs the record (RecordError). Malformed *optional* metadata
  (supporting facts, evidences, decompositions, and a FlashRAG / Search-R1 row's `metadata.context`) costs
  only that field: it is dropped and its reason appended to the converter's `notes` list. Official
  HotpotQA / 2Wiki `context` and MuSiQue `paragraphs` are the record's body and stay required; our own
  unified format is strict throughout.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from awarl.data.types import Paragraph, QAExample


class RecordError(ValueError):
    """One record is malformed; the loader prefixes the file and record location."""


@dataclass(frozen=True)
class DataFormat:
    """What a dataset format registers (`awarl.choices.FORMATS`, docs/extending.md).

    - `convert(record, dataset, notes)`: one raw record -> QAExample; RecordError with a short reason when it
      is malformed; `dataset` (None: the format's own name for it) is recorded on the example; `notes`
      collects what optional metadata was dropped.
    - `sniff(record)`: whether a record (a dict) looks like this format, from its keys. `auto` asks each
      registered format in registry order and takes the first that accepts, so a sniff must refuse what a
      more specific format later in the list would take.
    - `dataset(path)`: the dataset name of a file's examples when the caller gives none; None: the records
      name their own (or `convert` defaults it).
    """

    convert: Callable[[Any, str | None, list[str] | None], QAExample]
    sniff: Callable[[dict[str, Any]], bool]
    dataset: Callable[[Path], str | None] = lambda path: None


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


def _question(rec: Any) -> str:
    """The record's question, stripped; a blank one is malformed like an empty id (nothing to ask the model)."""
    question = _get(rec, "question", str).strip()
    if not question:
        raise RecordError("key 'question': empty")
    return question


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


def _join_sentences(sentences: Any, where: str) -> tuple[str, list[int]]:
    """The paragraph text (stripped sentences joined with one space) and where each sentence starts in it
    (so sentence-level supporting facts can be read back from the unified record)."""
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        raise RecordError(f"{where}: sentences must be a list of strings")
    parts: list[str] = []
    starts: list[int] = []
    pos = 0
    for s in (s.strip() for s in sentences):
        if s and parts:
            pos += 1  # the joining space
        starts.append(pos)
        if s:
            parts.append(s)
            pos += len(s)
    return " ".join(parts), starts


def _supporting_facts(raw: Any, key: str = "supporting_facts") -> list[tuple[str, int]]:
    """[[title, sentence index], ...], or the HF-datasets column layout {title: [...], sent_id: [...]}."""
    if raw is None:
        return []
    if isinstance(raw, dict):
        titles, ids = raw.get("title"), raw.get("sent_id")
        if titles is None and ids is None:
            return []
        if not isinstance(titles, list) or not isinstance(ids, list) or len(titles) != len(ids):
            raise RecordError(f"key {key!r}: expected {{title: [...], sent_id: [...]}} of equal lengths")
        raw = [[t, i] for t, i in zip(titles, ids, strict=True)]
    if not isinstance(raw, list):
        raise RecordError(f"key {key!r}: expected a list of [title, sentence index]")
    out = []
    for i, sf in enumerate(raw):
        if (not isinstance(sf, (list, tuple)) or len(sf) != 2 or not isinstance(sf[0], str)
                or isinstance(sf[1], bool) or not isinstance(sf[1], int) or sf[1] < 0):
            raise RecordError(f"key {key!r}[{i}]: expected [title, sentence index], got {sf!r:.80}")
        out.append((sf[0], int(sf[1])))
    return out


def _context_items(raw: Any, key: str) -> list[tuple[Any, Any]]:
    """(title, sentences) of each paragraph of a context in any of its layouts: `[[title, [sentence, ...]],
    ...]` (official HotpotQA/2Wiki), or columns `{title: [...], sentences: [[...], ...]}` (HF datasets,
    Search-R1's HotpotQA rows) or `{title: [...], content: [[...], ...]}` (FlashRAG's 2WikiMultiHopQA rows).
    A parquet column holding both layouts has the other key null on each row."""
    if isinstance(raw, dict):
        titles = raw.get("title")
        body = raw.get("sentences") if raw.get("sentences") is not None else raw.get("content")
        if titles is None and body is None:
            return []
        if not isinstance(titles, list) or not isinstance(body, list):
            raise RecordError(f"key {key!r}: expected {{title: [...], sentences (or content): [[...], ...]}}")
        if len(titles) != len(body):
            raise RecordError(f"key {key!r}: {len(titles)} titles but {len(body)} paragraphs")
        return list(zip(titles, body, strict=True))
    if not isinstance(raw, list):
        raise RecordError(f"key {key!r}: expected a list of [title, sentences]")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise RecordError(f"key {key!r}[{i}]: expected [title, [sentences]]")
        out.append((item[0], item[1]))
    return out


def _title_sentence_context(raw: Any, support_titles: set[str], key: str = "context") -> list[Paragraph]:
    """HotpotQA/2Wiki context (see `_context_items` for the layouts) as paragraphs."""
    paras = []
    for i, (title, sentences) in enumerate(_context_items(raw, key)):
        if not isinstance(title, str):
            raise RecordError(f"key {key!r}[{i}]: expected [title, [sentences]] with a string title")
        text, starts = _join_sentences(sentences, f"key {key!r}[{i}]")
        paras.append(Paragraph(title=title, text=text, is_supporting=title in support_titles,
                               sentence_starts=starts))
    return paras


def _musique_paragraphs(raw: Any, key: str = "paragraphs") -> list[Paragraph]:
    if not isinstance(raw, list):
        raise RecordError(f"key {key!r}: expected a list of paragraphs")
    context = []
    for i, p in enumerate(raw):
        if not isinstance(p, dict):
            raise RecordError(f"key {key!r}[{i}]: expected an object")
        title, text = p.get("title"), p.get("paragraph_text")
        if not isinstance(title, str) or not isinstance(text, str):
            raise RecordError(f"key {key!r}[{i}]: needs string 'title' and 'paragraph_text'")
        # Absent (a split whose support is hidden) is not supporting; anything but a bool is refused, as
        # `answerable` is: bool("false") is True, which would make the paragraph gold evidence.
        supporting = p.get("is_supporting")
        if supporting is not None and not isinstance(supporting, bool):
            raise RecordError(f"key {key!r}[{i}].is_supporting: expected a bool, got {supporting!r:.40}")
        context.append(Paragraph(title=title, text=text.strip(), is_supporting=bool(supporting)))
    return context


def _triples(raw: Any, key: str = "evidences") -> list[list[str]]:
    """2WikiMultiHopQA's evidence triples, [[subject, relation, object], ...]."""
    if not isinstance(raw, list):
        raise RecordError(f"key {key!r}: expected a list of [subject, relation, object]")
    for i, t in enumerate(raw):
        if not isinstance(t, (list, tuple)) or len(t) != 3 or not all(isinstance(x, str) for x in t):
            raise RecordError(f"key {key!r}[{i}]: expected [subject, relation, object] strings, got {t!r:.80}")
    return [list(t) for t in raw]


def _decomposition(raw: Any, key: str = "question_decomposition") -> list[dict[str, Any]]:
    """MuSiQue's hops: [{question, answer, paragraph_support_idx, ...}, ...] (`#k` refers to hop k's answer)."""
    if not isinstance(raw, list):
        raise RecordError(f"key {key!r}: expected a list of hops")
    for i, h in enumerate(raw):
        idx = h.get("paragraph_support_idx") if isinstance(h, dict) else None
        if (not isinstance(h, dict) or not isinstance(h.get("question"), str)
                or not isinstance(h.get("answer"), (str, int, float)) or isinstance(h.get("answer"), bool)
                or not (idx is None or (isinstance(idx, int) and not isinstance(idx, bool) and idx >= 0))):
            raise RecordError(f"key {key!r}[{i}]: expected {{question, answer, paragraph_support_idx}}")
    return [dict(h) for h in raw]


def _optional(notes: list[str] | None, fn: Callable[[], Any], default: Any) -> Any:
    """`fn()`, or `default` when the optional field it reads is malformed: the record keeps its question and
    answers, and the reason goes to `notes` (the loader names the record and counts them)."""
    try:
        return fn()
    except RecordError as e:
        if notes is not None:
            notes.append(str(e))
        return default


# Structured optional metadata the gold evidence is read from (awarl.data.evidence), checked on loading.
_CHECKED_METADATA: dict[str, Callable[[Any, str], Any]] = {"evidences": _triples,
                                                           "question_decomposition": _decomposition}


def _checked_metadata(meta: dict[str, Any], prefix: str, notes: list[str] | None) -> dict[str, Any]:
    """`meta` without None values, its evidences / decomposition checked; a malformed one is dropped."""
    out = {k: v for k, v in meta.items() if v is not None}
    for k, check in _CHECKED_METADATA.items():
        if k in out:
            value = _optional(notes, functools.partial(check, out[k], prefix + k), None)
            if value is None:
                del out[k]
            else:
                out[k] = value
    return out


def _official_extras(rec: dict[str, Any], keys: tuple[str, ...], notes: list[str] | None) -> dict[str, Any]:
    """The small metadata fields of an official record."""
    return _checked_metadata({k: rec[k] for k in keys if k in rec}, "", notes)


def _title_sentence_record(rec: Any, dataset: str, keys: tuple[str, ...], notes: list[str] | None) -> QAExample:
    """HotpotQA / 2Wiki official record: the context is the record's body (required); supporting facts and
    evidences are optional extras."""
    sfs = _optional(notes, lambda: _supporting_facts(_get(rec, "supporting_facts", (list, dict), optional=True)),
                    [])
    key = "id" if isinstance(rec, dict) and "_id" not in rec and "id" in rec else "_id"  # HF datasets: `id`
    return QAExample(
        id=_str_id(_get(rec, key, (str, int)), key),
        dataset=dataset,
        question=_question(rec),
        answers=_answers(_get(rec, "answer", (str, int, float), optional=True), None, "answer"),
        supporting_facts=sfs,
        context=_title_sentence_context(_get(rec, "context", (list, dict)), {t for t, _ in sfs}),
        metadata=_official_extras(rec, keys, notes),
    )


def convert_hotpotqa(rec: Any, dataset: str | None = None, notes: list[str] | None = None) -> QAExample:
    """HotpotQA official JSON record (`_id, question, answer, supporting_facts, context, type, level`).
    `answer`/`supporting_facts` may be absent (the official test set) and then stay empty."""
    return _title_sentence_record(rec, dataset or "hotpotqa", ("type", "level"), notes)


def convert_2wiki(rec: Any, dataset: str | None = None, notes: list[str] | None = None) -> QAExample:
    """2WikiMultiHopQA official JSON record (HotpotQA's layout plus `evidences`, `entity_ids`, `answer_id`)."""
    return _title_sentence_record(rec, dataset or "2wikimultihopqa",
                                  ("type", "evidences", "entity_ids", "answer_id"), notes)


def convert_musique(rec: Any, dataset: str | None = None, notes: list[str] | None = None) -> QAExample:
    """MuSiQue official JSONL record (`id, question, answer, answer_aliases, answerable, paragraphs`).
    Unanswerable questions (MuSiQue-Full) keep their answer strings and get `answerable=False`."""
    answerable = _get(rec, "answerable", bool, optional=True)
    return QAExample(
        id=_str_id(_get(rec, "id", (str, int)), "id"),
        dataset=dataset or "musique",
        question=_question(rec),
        answers=_answers(_get(rec, "answer", (str, int, float), optional=True),
                         _get(rec, "answer_aliases", list, optional=True), "answer_aliases"),
        answerable=True if answerable is None else answerable,
        context=_musique_paragraphs(_get(rec, "paragraphs", list)),
        metadata=_official_extras(rec, ("question_decomposition",), notes),
    )


# Fields of a FlashRAG / Search-R1 `metadata` object that become QAExample fields instead of metadata.
_MOVED_METADATA = ("supporting_facts", "context", "paragraphs")


def _row_metadata(meta: Any, notes: list[str] | None) -> tuple[list[tuple[str, int]], list[Paragraph], dict[str, Any]]:
    """(supporting facts, context, other metadata) of a FlashRAG / Search-R1 row's `metadata`, which carries
    the source dataset's fields: HotpotQA's and 2Wiki's `supporting_facts` and `context` (any layout of
    `_context_items`), MuSiQue's `paragraphs`, 2Wiki's `evidences`. All of it is optional: a malformed part
    is dropped with a note, never the row."""
    if meta is None:
        return [], [], {}
    if not isinstance(meta, dict):
        if notes is not None:
            notes.append(f"key 'metadata': expected an object, got {type(meta).__name__}")
        return [], [], {}
    sfs = _optional(notes, lambda: _supporting_facts(meta.get("supporting_facts"), "metadata.supporting_facts"),
                    [])
    context: list[Paragraph] = []
    if meta.get("context") is not None:
        context = _optional(notes, lambda: _title_sentence_context(meta["context"], {t for t, _ in sfs},
                                                                   "metadata.context"), [])
    elif meta.get("paragraphs") is not None:
        context = _optional(notes, lambda: _musique_paragraphs(meta["paragraphs"], "metadata.paragraphs"), [])
    rest = _checked_metadata({k: v for k, v in meta.items() if k not in _MOVED_METADATA}, "metadata.", notes)
    return sfs, context, rest


def convert_flashrag(rec: Any, dataset: str | None = None, notes: list[str] | None = None) -> QAExample:
    """FlashRAG unified JSONL record (`id, question, golden_answers, metadata`). The multi-hop datasets'
    `metadata` carries their supporting facts and context, which become the example's (see `_row_metadata`)."""
    sfs, context, meta = _row_metadata(_get(rec, "metadata", object, optional=True), notes)
    return QAExample(
        id=_str_id(_get(rec, "id", (str, int)), "id"),
        dataset=dataset or "flashrag",
        question=_question(rec),
        answers=_answers(None, _get(rec, "golden_answers", list), "golden_answers"),
        supporting_facts=sfs,
        context=context,
        metadata=meta,
    )


def convert_searchr1(rec: Any, dataset: str | None = None, notes: list[str] | None = None) -> QAExample:
    """Search-R1 processed parquet row (`id, question, golden_answers, data_source, prompt, ...`). Rows from
    HotpotQA (and 2Wiki) carry `metadata.context`/`supporting_facts` in HF-datasets column layout; we keep
    them. The prompt is not kept (awarl builds its own)."""
    sfs, context, meta_in = _row_metadata(_get(rec, "metadata", object, optional=True), notes)
    meta = {k: rec[k] for k in ("data_source", "ability", "extra_info") if rec.get(k) is not None}
    meta.update(meta_in)
    source = rec.get("data_source")
    return QAExample(
        id=_str_id(_get(rec, "id", (str, int)), "id"),
        dataset=dataset or (source if isinstance(source, str) and source else "searchr1"),
        question=_question(rec),
        answers=_answers(None, _get(rec, "golden_answers", list), "golden_answers"),
        supporting_facts=sfs,
        context=context,
        metadata=meta,
    )


def _unified_paragraph(p: Any, i: int) -> Paragraph:
    if not isinstance(p, dict) or not isinstance(p.get("title"), str) or not isinstance(p.get("text"), str):
        raise RecordError(f"key 'context'[{i}]: expected {{title, text, is_supporting}} with string title/text")
    starts = p.get("sentence_starts", [])
    if not isinstance(starts, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in starts):
        raise RecordError(f"key 'context'[{i}].sentence_starts: expected a list of character offsets")
    # Offsets `_join_sentences` writes: non-decreasing, inside the text. Any other list would read back
    # sentences that are not the source's (a negative offset slices from the end), and so wrong gold evidence.
    bounds = [0, *starts, len(p["text"])]
    if any(a > b for a, b in zip(bounds, bounds[1:], strict=False)):
        raise RecordError(f"key 'context'[{i}].sentence_starts: expected non-decreasing offsets in "
                          f"[0, {len(p['text'])}] (the text's length), got {starts!r:.80}")
    supporting = p.get("is_supporting", False)
    if not isinstance(supporting, bool):
        raise RecordError(f"key 'context'[{i}].is_supporting: expected a bool, got {supporting!r:.40}")
    unknown = set(p) - {"title", "text", "is_supporting", "sentence_starts"}
    if unknown:
        raise RecordError(f"key 'context'[{i}]: unknown keys {sorted(unknown)}")
    return Paragraph(title=p["title"], text=p["text"], is_supporting=supporting, sentence_starts=list(starts))


# The keys `QAExample.to_dict()` writes.
_UNIFIED_FIELDS = frozenset(f.name for f in fields(QAExample))


def convert_unified(rec: Any, dataset: str | None = None, notes: list[str] | None = None) -> QAExample:
    """Our own unified JSONL (`QAExample.to_dict()` lines). Strict: a malformed field means the file is not
    what `awarl data prepare` wrote, so it costs the record."""
    _question(rec)
    unknown = set(rec) - _UNIFIED_FIELDS
    if unknown:  # a typo (`answer`, `contexts`) would otherwise drop that field without a word
        raise RecordError(f"unknown keys {sorted(unknown)} (a unified record has {sorted(_UNIFIED_FIELDS)})")
    _get(rec, "dataset", str)
    _str_id(_get(rec, "id", (str, int)), "id")
    # Strings only, as `awarl data prepare` writes them: from_dict's str() would make a null the gold answer
    # "None", a nested list "['Rush']", true "True".
    for i, a in enumerate(_get(rec, "answers", list, optional=True) or []):
        if not isinstance(a, str):
            raise RecordError(f"key 'answers'[{i}]: expected a string, got {type(a).__name__}")
    # Checked here because from_dict would coerce silently: bool("false") is True, dict("ab") is an error
    # without the key's name.
    _get(rec, "answerable", bool, optional=True)
    context = [_unified_paragraph(p, i) for i, p in enumerate(_get(rec, "context", list, optional=True) or [])]
    sfs = _supporting_facts(_get(rec, "supporting_facts", list, optional=True))
    meta = _get(rec, "metadata", dict, optional=True) or {}
    for k, check in _CHECKED_METADATA.items():
        if meta.get(k) is not None:
            check(meta[k], f"metadata.{k}")
    try:
        ex = QAExample.from_dict({**rec, "context": [], "supporting_facts": []})
    except (TypeError, ValueError, KeyError) as e:
        raise RecordError(f"not a unified QAExample record: {e}") from None
    ex.context, ex.supporting_facts = context, sfs
    if dataset:
        ex.dataset = dataset
    return ex


# ------------------------------------------------------------------ the registered formats
# Detection (`sniff`) reads the first record's keys; each test refuses what another format's would accept.
_TITLE_SENTENCE = {"_id", "question", "context"}
_TWOWIKI_KEYS = {"evidences", "entity_ids", "answer_id"}
_GOLDEN = {"golden_answers", "question", "id"}
_SEARCHR1_KEYS = {"data_source", "prompt", "reward_model"}
_UNIFIED = {"answers", "dataset", "question", "id"}
_SPLIT_NAMES = {"train", "dev", "test", "val", "validation", "eval"}


def _flashrag_dataset(path: Path) -> str | None:
    """FlashRAG ships <dataset>/<split>.jsonl; our samples are named <dataset>_<split>N.jsonl."""
    stem = path.stem.split(".")[0]
    # The folder of the absolute path: `dev.jsonl` read inside hotpotqa/ has no parent name as given. Made
    # absolute lexically (abspath), not resolved: a Hub cache file is a link into blobs/, named by its hash.
    folder = Path(os.path.abspath(path)).parent.name
    if stem.lower() in _SPLIT_NAMES and folder:
        return folder
    return stem.split("_")[0] or None


def _title_sentence(rec: dict[str, Any]) -> bool:
    """An official HotpotQA / 2Wiki record: `_id`, or `id` as the Hugging Face `datasets` copies name it (then
    neither our unified nor a FlashRAG record, which have `id`, `question` and `context` too)."""
    if rec.keys() >= _TITLE_SENTENCE:
        return True
    return rec.keys() >= {"id", "question", "context"} and not rec.keys() & {"dataset", "answers", "golden_answers"}


def _is_hotpotqa(rec: dict[str, Any]) -> bool:
    return _title_sentence(rec) and not rec.keys() & _TWOWIKI_KEYS


def _is_2wiki(rec: dict[str, Any]) -> bool:
    return _title_sentence(rec) and bool(rec.keys() & _TWOWIKI_KEYS)


def _is_musique(rec: dict[str, Any]) -> bool:
    return (rec.keys() >= {"paragraphs", "question", "id"} and ("answer_aliases" in rec or "answerable" in rec)
            and not rec.keys() >= _UNIFIED)


def _is_flashrag(rec: dict[str, Any]) -> bool:
    return rec.keys() >= _GOLDEN and not rec.keys() & _SEARCHR1_KEYS


def _is_searchr1(rec: dict[str, Any]) -> bool:
    return rec.keys() >= _GOLDEN and bool(rec.keys() & _SEARCHR1_KEYS)


def _is_unified(rec: dict[str, Any]) -> bool:
    return rec.keys() >= _UNIFIED


HOTPOTQA = DataFormat(convert_hotpotqa, _is_hotpotqa, lambda path: "hotpotqa")
TWOWIKI = DataFormat(convert_2wiki, _is_2wiki, lambda path: "2wikimultihopqa")
MUSIQUE = DataFormat(convert_musique, _is_musique, lambda path: "musique")
FLASHRAG = DataFormat(convert_flashrag, _is_flashrag, _flashrag_dataset)
SEARCHR1 = DataFormat(convert_searchr1, _is_searchr1)  # rows name their dataset (`data_source`)
UNIFIED = DataFormat(convert_unified, _is_unified)     # rows name their dataset
