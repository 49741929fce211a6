"""What every retriever returns, and the one interface they all share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


def unquote_title(title: str) -> str:
    """A title line without surrounding whitespace and one pair of double quotes around the whole of it (a
    corpus writes `"Title"`): `""Heroes""` is the title `"Heroes"`, and `"Weird Al" Yankovic` keeps its
    quotes (stripping every quote at the ends made them `Heroes` and `Weird Al" Yankovic`)."""
    t = title.strip()
    return t[1:-1] if len(t) >= 2 and t[0] == t[-1] == '"' else t


def _split_contents(contents: str) -> tuple[str, str]:
    """(title, text) of a corpus `contents`: its first line, unquoted, and the rest; no title without a line."""
    title, sep, text = contents.partition("\n")
    if not sep:
        return "", contents
    return unquote_title(title), text


@dataclass(frozen=True)
class Passage:
    """A passage: its title and text (what the agent's template shows), and its corpus `contents` as stored.

    `raw_contents` is the corpus line's `contents` verbatim where it is not the rebuilt `"title"\\ntext`
    (wiki-18 has unquoted titles, other corpora lines without a title); None otherwise, and dropped when it
    does not split into this title and text (a `dataclasses.replace` of the text), so two passages with the
    same contents compare equal however they were made."""

    id: str
    title: str
    text: str
    score: float = 0.0
    raw_contents: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        raw = self.raw_contents
        if raw is not None and (raw == f'"{self.title}"\n{self.text}'
                                or _split_contents(raw) != (self.title, self.text)):
            object.__setattr__(self, "raw_contents", None)

    @property
    def contents(self) -> str:
        """The corpus line's `contents` field, as stored in the index (Search-R1's server returns it
        unchanged); `"Title"\\ntext` (wiki-18 / Search-R1 format) for a passage made from title and text."""
        return self.raw_contents if self.raw_contents is not None else f'"{self.title}"\n{self.text}'

    @property
    def title_line(self) -> str:
        """The first line of `contents` verbatim, quotes or none: the title as Search-R1's environment shows it."""
        line, sep, _ = self.contents.partition("\n")
        return line if sep else f'"{self.title}"'

    @classmethod
    def from_contents(cls, pid: str, contents: str, score: float = 0.0) -> Passage:
        title, text = _split_contents(contents)
        return cls(str(pid), title, text, score, contents)


class Retriever(Protocol):
    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        """Batched search: one ranked list of at most k passages (best first, with scores) per query."""
        ...


class IndexRetriever(Retriever, Protocol):
    """A retriever over a local index folder (what `load_index` opens): it also carries the folder's verified
    meta.json (kind, settings, corpus hash, passage count), which the server publishes and runs record."""

    meta: dict[str, Any]
