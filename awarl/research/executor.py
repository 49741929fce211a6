"""The executor: the search agent (any checkpoint, through the rollout engine), one trajectory per
sub-question, all sub-questions of a round in one batch (the map step), keeping every retrieved passage in
its original text with its id."""

from __future__ import annotations

from collections.abc import Sequence

from awarl.agent.backends.base import Seed
from awarl.agent.rollout import RolloutEngine, Trajectory
from awarl.critic.schema import CriticInput
from awarl.data.evidence import GoldEvidence
from awarl.research.schema import ExecutorResult
from awarl.rewards.citation import build_critic_input, passages_from_rollout


def to_result(sub_question: str, traj: Trajectory, attempt: int) -> ExecutorResult:
    p = traj.parsed
    by_number = {d["number"]: d for d in traj.passages}
    unknown = [f"[{n}]" for n in dict.fromkeys(p.citations) if n not in by_number]
    unknown += [f"<cite> {m}" for m in dict.fromkeys(p.malformed_citations)]
    return ExecutorResult(
        sub_question=sub_question, summary=(p.answer or "") if p.valid else "",
        source_docs=[f"{d.get('title', '')}\n{d['text']}" for d in traj.passages],
        source_ids=[str(d["id"]) for d in traj.passages],
        cited_ids=[str(by_number[n]["id"]) for n in dict.fromkeys(p.citations) if n in by_number],
        unknown_citations=unknown, invalid_reason=None if p.valid else (p.invalid_reason or "invalid trajectory"),
        searches=list(p.searches), abstained=bool(p.abstained), valid=bool(p.valid), attempt=attempt)


def critic_input(sub_question: str, traj: Trajectory, gold: GoldEvidence | None = None) -> CriticInput:
    """The critic's view of one attempt: the summary AND the original passages, never the summary alone (and
    the step's gold evidence, which only the gold judge reads)."""
    p = traj.parsed
    return build_critic_input(sub_question, (p.answer or "") if p.valid else "", p.citations,
                              passages_from_rollout(traj.passages, where="executor passages"), gold)


def execute(engine: RolloutEngine, queries: Sequence[str], *, temperature: float, top_p: float = 1.0,
            seed: Seed = None) -> list[Trajectory]:
    """One trajectory per query, all in one engine call (`seed`: one for the call, or one per query)."""
    if not queries:
        return []
    trajs = engine.run(list(queries), temperature=temperature, top_p=top_p, seed=seed)
    if len(trajs) != len(queries):
        raise RuntimeError(f"rollout engine returned {len(trajs)} trajectories for {len(queries)} sub-questions")
    return trajs
