"""Citation critics: a schema-bound verdict per answer, checked against the original retrieved passages.

`make_judge(cfg, cache_dir)` builds the judge selected by `critic.judge` from its registry
(`awarl.choices.JUDGES`; None for `none`); `judge_kind(name)` is what the run knows of a registered judge
without building it (an oracle, an endpoint, its settings: `awarl.critic.schema.JudgeKind`);
`check_endpoints(cfg, judge, grader)` is the start-up check of the ones behind a service.
"""

from __future__ import annotations

import os
from pathlib import Path

from awarl.choices import JUDGES
from awarl.config import CriticConfig
from awarl.critic.correctness import AnswerGrader
from awarl.critic.gold_judge import GoldJudge
from awarl.critic.lexical_judge import LexicalJudge
from awarl.critic.openai_judge import JudgeUnavailable, OpenAIJudge
from awarl.critic.schema import Judge, JudgeKind, Reachable

__all__ = ["GoldJudge", "JudgeKind", "JudgeUnavailable", "LexicalJudge", "OpenAIJudge", "check_endpoints",
           "critic_cache_dir", "is_oracle", "judge_kind", "make_judge"]


def critic_cache_dir(cfg: CriticConfig, run_dir: str | os.PathLike[str]) -> Path:
    """Where a run's judge verdicts are cached: critic.cache_dir, else <run>/critic_cache."""
    return Path(cfg.cache_dir) if cfg.cache_dir else Path(run_dir) / "critic_cache"


def make_judge(cfg: CriticConfig, cache_dir: str | os.PathLike[str] | None = None) -> Judge | None:
    """The judge `critic.judge` names, built by its registered factory with `cfg` and `cache_dir` (where a
    judge that caches verdicts keeps them; default cfg.cache_dir); None for `none`."""
    if cfg.judge == "none":
        return None
    return judge_kind(cfg.judge)(cfg, cache_dir)


def judge_kind(name: str) -> JudgeKind:
    """The registered judge `name` (ValueError naming the choices when there is none)."""
    return JUDGES.load(name, JudgeKind)


def is_oracle(label: object) -> bool:
    """Whether a verdict's judge label (a registered name, `openai:<model>`, ...) names a judge that reads the
    gold evidence: its verdicts are no system's."""
    return isinstance(label, str) and label in JUDGES and judge_kind(label).oracle


def check_endpoints(cfg: CriticConfig, judge: Judge | None = None, grader: AnswerGrader | None = None) -> None:
    """Raise JudgeUnavailable, before any model loads, when the citation judge or the answer grader is an
    OpenAI-compatible endpoint that does not answer or does not serve `critic.model` (`critic.check_endpoint`
    turns it off). Both share one endpoint, so it is asked once."""
    if not cfg.check_endpoint:
        return
    for obj, what in ((judge, f"citation judge (critic.judge: {cfg.judge})"),
                      (grader, "answer grader (metrics.correctness: judge)")):
        if isinstance(obj, Reachable):
            obj.check_reachable(what)
            return
