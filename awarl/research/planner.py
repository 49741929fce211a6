"""The planner: decomposes a question into sub-questions, re-queues what the critic could not ground, and
composes the final answer from the approved findings.

`DecompositionPlanner` is the offline planner: MuSiQue's own `question_decomposition` where the record has
one (its `#k` references become dependencies, filled with the EXECUTOR's answer for hop k, never the gold
one), else the question itself; the final answer of a chain is its last hop's answer. An LLM planner behind
an OpenAI-compatible endpoint implements the same three methods (awarl/research/llm_planner.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol

from awarl.research.schema import ExecutorResult, SubQuestion

_HOP_REF = re.compile(r"#(\d+)")


class Planner(Protocol):
    def decompose(self, question: str, example: Any = None) -> list[SubQuestion]: ...

    def requery(self, text: str, result: ExecutorResult, unsupported: Sequence[str]) -> str: ...

    def synthesize(self, question: str, plan: Sequence[SubQuestion], answers: dict[int, str]) -> str: ...


def render_hop(text: str) -> str:
    """MuSiQue writes many hops as `entity >> relation` (`#1 >> capital`); ask them as a question."""
    if ">>" not in text:
        return text.strip()
    entity, relation = (part.strip() for part in text.split(">>", 1))
    return f"{relation} of {entity}?"


def fill(text: str, answers: dict[int, str]) -> str:
    """`#k` replaced by the answer found for step k (1-based, as MuSiQue writes them)."""
    return _HOP_REF.sub(lambda m: answers.get(int(m.group(1)) - 1, m.group(0)), text)


def requery_text(text: str, result: ExecutorResult, unsupported: Sequence[str]) -> str:
    """A re-queued sub-question with explicit instructions: the claims the sources did not support and the
    searches already tried, so the executor searches with different terms."""
    tried = "; ".join(f'"{q}"' for q in result.searches) or "none"
    claims = "; ".join(f'"{c}"' for c in unsupported) or "no answer was found"
    return (f"{text} (Not supported by the retrieved sources: {claims}. Searches already tried: {tried}. "
            "Search with different terms.)")


class DecompositionPlanner:
    """Offline planner (module docstring)."""

    def decompose(self, question: str, example: Any = None) -> list[SubQuestion]:
        hops = (getattr(example, "metadata", None) or {}).get("question_decomposition") or []
        texts = [str(h.get("question", "")).strip() for h in hops if isinstance(h, dict)]
        if len(texts) < 2 or not all(texts):
            return [SubQuestion(index=0, text=question)]
        plan = []
        for i, t in enumerate(texts):
            deps = sorted({int(k) - 1 for k in _HOP_REF.findall(t) if 0 < int(k) <= i})
            plan.append(SubQuestion(index=i, text=render_hop(t), depends_on=deps))
        return plan

    def requery(self, text: str, result: ExecutorResult, unsupported: Sequence[str]) -> str:
        return requery_text(text, result, unsupported)

    def synthesize(self, question: str, plan: Sequence[SubQuestion], answers: dict[int, str]) -> str:
        """The last step answers the question (a chain's final hop, or the question itself)."""
        return answers.get(plan[-1].index, "")
