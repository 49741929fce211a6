"""The planner: decomposes a question into sub-questions, re-queues what the critic could not ground, and
composes the final answer from the approved findings.

`DecompositionPlanner` is the offline planner: MuSiQue's own `question_decomposition` where the record has
one (its `#k` references become dependencies, filled with the EXECUTOR's answer for hop k, never the gold
one); else the offline rules of awarl/decompose.py over the question text (comparison, bridge,
conjunction: HotpotQA, 2Wiki and free text alike); else the question itself. Its reduce combines the
approved sub-answers by the plan's rule (awarl/research/reduce.py): a chain's last hop, a list joined, a
comparison decided from its parts. An LLM planner behind an OpenAI-compatible endpoint implements the same
three methods (awarl/research/llm_planner.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from awarl.data.types import QAExample
from awarl.decompose import offline_plan
from awarl.research.reduce import combine
from awarl.research.schema import ExecutorResult, Plan, Reduce, SubQuestion

if TYPE_CHECKING:
    from awarl.config import AgentConfig, CriticConfig, MetricsConfig, ResearchConfig, RewardConfig


class LoopSettings(Protocol):
    """The sections of a run config the critic loop reads; an AwarlConfig is one."""

    research: ResearchConfig
    critic: CriticConfig
    agent: AgentConfig
    reward: RewardConfig
    metrics: MetricsConfig


CacheDir = str | os.PathLike | None  # where a planner or judge keeps its cache (None: no cache)

_HOP_REF = re.compile(r"#(\d+)")


class Planner(Protocol):
    def decompose(self, question: str, example: QAExample | None = None) -> Plan: ...

    def requery(self, text: str, result: ExecutorResult, unsupported: Sequence[str],
                tried: Sequence[str] = ()) -> str: ...

    def synthesize(self, question: str, plan: Plan, answers: dict[int, str]) -> str: ...


@dataclass(frozen=True)
class PlannerKind:
    """A registered research planner (`research.planner`, awarl.choices.PLANNERS; docs/extending.md): its factory,
    called as `kind(cfg, cache_dir, check)` with the run's config (its `research:` and `critic:` sections), and
    what a run must know of it without comparing its name. `endpoint`: it calls an OpenAI-compatible service
    (research.planner_base_url, else critic.base_url), which `check` asks before any model loads; the planner
    object's `name` is its registry name, recorded with each research report (its provenance)."""

    build: Callable[[LoopSettings, CacheDir, bool], Planner]
    endpoint: bool = False

    def __call__(self, cfg: LoopSettings, cache_dir: CacheDir = None, check: bool = False) -> Planner:
        return self.build(cfg, cache_dir, check)


def render_hop(text: str) -> str:
    """MuSiQue writes many hops as `entity >> relation` (`#1 >> capital`); ask them as a question."""
    if ">>" not in text:
        return text.strip()
    entity, relation = (part.strip() for part in text.split(">>", 1))
    return f"{relation} of {entity}?"


def hop_refs(text: str, index: int) -> set[int]:
    """The earlier steps (0-based) that step `index`'s text refers to as `#k` (1-based): it runs after them
    and asks with their answers filled in. A `#k` to itself or a later step is no dependency (no cycles)."""
    return {int(k) - 1 for k in _HOP_REF.findall(text) if 0 < int(k) <= index}


def fill(text: str, answers: dict[int, str]) -> str:
    """`#k` replaced by the answer found for step k (1-based, as MuSiQue writes them)."""
    return _HOP_REF.sub(lambda m: answers.get(int(m.group(1)) - 1, m.group(0)), text)


def requery_text(text: str, result: ExecutorResult, unsupported: Sequence[str], tried: Sequence[str] = ()) -> str:
    """A re-queued sub-question with explicit instructions: the claims the sources did not support and EVERY
    search already tried (all earlier attempts), so the executor searches with different terms (the loop then
    checks that it did: awarl/research/loop.py)."""
    searches = list(dict.fromkeys([*tried, *result.searches]))
    listed = "; ".join(f'"{q}"' for q in searches) or "none"
    claims = "; ".join(f'"{c}"' for c in unsupported) or "no answer was found"
    return (f"{text} (Not supported by the retrieved sources: {claims}. Searches already tried: {listed}. "
            "Search with different terms.)")


def musique_plan(example: QAExample | None) -> Plan | None:
    """The record's own decomposition (MuSiQue), or None."""
    hops = (getattr(example, "metadata", None) or {}).get("question_decomposition") or []
    texts = [str(h.get("question", "")).strip() for h in hops if isinstance(h, dict)]
    if len(texts) < 2 or not all(texts):
        return None
    steps = []
    for i, t in enumerate(texts):
        steps.append(SubQuestion(index=i, text=render_hop(t), depends_on=sorted(hop_refs(t, i))))
    return Plan(steps=steps, rule="musique_decomposition")


class DecompositionPlanner:
    """Offline planner (module docstring)."""

    name = "decomposition"

    def decompose(self, question: str, example: QAExample | None = None) -> Plan:
        return (musique_plan(example) or offline_plan(question)
                or Plan(steps=[SubQuestion(index=0, text=question)], rule="question"))

    def requery(self, text: str, result: ExecutorResult, unsupported: Sequence[str],
                tried: Sequence[str] = ()) -> str:
        return requery_text(text, result, unsupported, tried)

    def synthesize(self, question: str, plan: Plan, answers: dict[int, str]) -> str:
        return combine(plan.reduce, plan.steps, answers)[0]

    @staticmethod
    def explain(plan: Plan, answers: dict[int, str]) -> str:
        """How the offline reduce reached (or could not reach) its answer, for the report."""
        return combine(plan.reduce, plan.steps, answers)[1]


DECOMPOSITION = PlannerKind(lambda cfg, cache_dir, check: DecompositionPlanner())


def one_step(question: str, rule: str = "question") -> Plan:
    return Plan(steps=[SubQuestion(index=0, text=question)], reduce=Reduce(), rule=rule)
