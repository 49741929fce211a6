"""What every retriever returns, and the one interface they all share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    score: float = 0.0

    @property
    def contents(self) -> str:
        """The corpus line's `contents` field: `"Title"\\ntext` (wiki-18 / Search-R1 format)."""
        return f'"{self.title}"\n{self.text}'

    @classmethod
    def from_contents(cls, pid: str, contents: str, score: float = 0.0) -> Passage:
        title, sep, text = contents.partition("\n")
        if not sep:
            return cls(str(pid), "", contents, score)
        return cls(str(pid), title.strip().strip('"'), text, score)


class Retriever(Protocol):
    def search(self, queries: list[str], k: int) -> list[list[Passage]]:
        """Batched search: one ranked list of at most k passages (best first, with scores) per query."""
        ...
