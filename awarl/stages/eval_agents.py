"""The agents `awarl eval` evaluates (`eval.agent`, registered in awarl.choices.EVAL_AGENTS; docs/extending.md):
each makes the predictions lines of one batch of questions, and says what the evaluation must build for it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from awarl.agent.rollout import RolloutEngine
    from awarl.config import AwarlConfig
    from awarl.critic.correctness import AnswerGrader
    from awarl.critic.schema import Judge
    from awarl.data.types import QAExample
    from awarl.research.planner import Planner


@dataclass(frozen=True)
class EvalAgentKind:
    """A registered evaluation agent: `rows(engine, judge, grader, batch, cfg, *, temperature, top_p, seed,
    planner, loop_judge)` -> one predictions line per question of the batch (each question seeded by itself,
    `question_seed`, so a resumed question draws what it would have in an uninterrupted run).
    `research_loop`: it runs the critic-loop research agent, so the evaluation builds the research planner and
    the loop's judge (research.judge), both checked before any model loads, and records the `research:`
    section in its manifest (a resume under other research settings is refused); `planner` and `loop_judge`
    are None for an agent without it."""

    rows: Callable[..., list[dict[str, Any]]]
    research_loop: bool = False


def single_pass_rows(engine: RolloutEngine, judge: Judge | None, grader: AnswerGrader | None,
                     batch: list[QAExample], cfg: AwarlConfig, *, temperature: float, top_p: float, seed: int,
                     planner: Planner | None = None, loop_judge: Judge | None = None) -> list[dict[str, Any]]:
    """One search trajectory per question (awarl.stages.evaluate.single_pass_rows)."""
    from awarl.stages.evaluate import single_pass_rows as rows

    return rows(engine, judge, grader, batch, cfg, temperature=temperature, top_p=top_p, seed=seed)


def critic_loop_rows(engine: RolloutEngine, judge: Judge | None, grader: AnswerGrader | None,
                     batch: list[QAExample], cfg: AwarlConfig, *, temperature: float, top_p: float, seed: int,
                     planner: Planner | None = None, loop_judge: Judge | None = None) -> list[dict[str, Any]]:
    """The critic-loop research agent over the search agent (awarl.research.records.critic_loop_rows)."""
    from awarl.research.records import critic_loop_rows as rows
    from awarl.stages.predictions import critic_label

    if planner is None:
        raise ValueError("eval.agent: the critic loop needs its research planner")
    return rows(engine, judge, grader, batch, cfg, temperature=temperature, top_p=top_p, seed=seed,
                label=critic_label(cfg), planner=planner, loop_judge=loop_judge)


SINGLE_PASS = EvalAgentKind(single_pass_rows)
CRITIC_LOOP = EvalAgentKind(critic_loop_rows, research_loop=True)
