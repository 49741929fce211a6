"""The one example type every loader produces and every stage consumes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


def example_key(dataset: str, qid: str) -> str:
    """A question's key everywhere it is joined: estimate file, training rows, reward, predictions
    (ids alone collide across datasets: Search-R1 reuses `train_N` for NQ and HotpotQA)."""
    return f"{dataset}/{qid}"


@dataclass
class Paragraph:
    """One context paragraph shipped with a question (HotpotQA/2Wiki/MuSiQue contexts)."""

    title: str
    text: str
    is_supporting: bool = False
    # Where each of the source's sentences starts in `text` (HotpotQA/2Wiki; empty when the source has no
    # sentence split, as MuSiQue): supporting facts name sentences by index.
    sentence_starts: list[int] = field(default_factory=list)

    def sentence(self, i: int) -> str | None:
        """Sentence `i` of the source paragraph, or None when it is unknown (no split, index out of range)."""
        if not 0 <= i < len(self.sentence_starts):
            return None
        end = self.sentence_starts[i + 1] if i + 1 < len(self.sentence_starts) else len(self.text)
        return self.text[self.sentence_starts[i]:end].strip()


@dataclass
class QAExample:
    id: str
    dataset: str
    question: str
    answers: list[str]  # gold answer first, then aliases; may be empty for unanswerable questions
    answerable: bool = True
    supporting_facts: list[tuple[str, int]] = field(default_factory=list)  # (title, sentence index)
    context: list[Paragraph] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)  # raw extra fields of the source record

    @property
    def gold_answers(self) -> list[str]:
        """The answers a prediction is scored against: none for an unanswerable question (MuSiQue-Full's
        `answerable: false`, whose record keeps the answer strings of the question it was made from), so
        that any answer to it is wrong and abstaining is the right move. Every scorer reads this, never
        `answers` directly."""
        return list(self.answers) if self.answerable else []

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["supporting_facts"] = [list(sf) for sf in self.supporting_facts]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> QAExample:
        return cls(
            id=str(d["id"]),
            dataset=str(d["dataset"]),
            question=str(d["question"]),
            answers=[str(a) for a in d.get("answers", [])],
            # null reads as absent, as the unified reader and MuSiQue take it: answerable
            answerable=True if d.get("answerable") is None else bool(d["answerable"]),
            supporting_facts=[(str(t), int(i)) for t, i in d.get("supporting_facts", [])],
            context=[Paragraph(**p) for p in d.get("context", [])],
            metadata=dict(d.get("metadata", {})),
        )
