"""Closed passage corpora built from the datasets' own context paragraphs (wiki-18 row format).

A row is `{"id": "p-<16 hex>", "contents": "\\"Title\\"\\ntext"}`, the format of Search-R1's and FlashRAG's
wiki-18 corpus, so the same index and retrieval server serve both. Ids are a hash of (title, text): the
same paragraph gets the same id in every run and whatever the input order, and duplicates (the same
paragraph shipped with several questions) collapse to one row.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from awarl.data.types import Paragraph, QAExample
from awarl.io import write_jsonl

ID_PREFIX = "p-"
_ID_HEX = 16  # 64 bits: collision odds stay negligible for closed corpora of millions of paragraphs


def passage_id(title: str, text: str) -> str:
    """The id of an already normalised (title, text) pair (see `normalise_passage`)."""
    digest = hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()
    return ID_PREFIX + digest[:_ID_HEX]


def normalise_passage(title: str, text: str) -> tuple[str, str]:
    """(title, text) as the closed corpus stores them: the title stripped, the text's whitespace collapsed."""
    return title.strip(), " ".join(text.split())


def paragraph_passage_id(p: Paragraph) -> str | None:
    """The closed-corpus id of a context paragraph, or None for an empty one (never in the corpus)."""
    title, text = normalise_passage(p.title, p.text)
    return passage_id(title, text) if text else None


def passage_contents(title: str, text: str) -> str:
    return f'"{title}"\n{text}'


def build_corpus(examples: Iterable[QAExample]) -> list[dict[str, str]]:
    """Unique context paragraphs of `examples` as corpus rows, sorted by id (so the file does not depend on
    the input order either). Empty paragraphs are dropped."""
    rows: dict[str, dict[str, str]] = {}
    keys: dict[str, tuple[str, str]] = {}
    for ex in examples:
        for p in ex.context:
            title, text = normalise_passage(p.title, p.text)
            if not text:
                continue
            pid = passage_id(title, text)
            if pid in keys:
                if keys[pid] != (title, text):  # pragma: no cover - would need a sha256 prefix collision
                    raise ValueError(f"passage id collision: {pid} for {keys[pid]!r} and {(title, text)!r}")
                continue
            keys[pid] = (title, text)
            rows[pid] = {"id": pid, "contents": passage_contents(title, text)}
    return [rows[k] for k in sorted(rows)]


def write_corpus(rows: Iterable[dict[str, str]], path: str | os.PathLike[str]) -> int:
    """Write corpus rows as JSONL (atomically); returns the row count."""
    return write_jsonl(path, rows)


def shipped_closed_corpus(path: str | os.PathLike[str]) -> Path:
    """Build the closed corpus of the three shipped dev samples (HotpotQA, 2Wiki, MuSiQue) into `path`."""
    from awarl.data.loaders import SHIPPED_DEV, load_shipped

    examples = [ex for name in SHIPPED_DEV for ex in load_shipped(name)]
    write_corpus(build_corpus(examples), path)
    return Path(path)
