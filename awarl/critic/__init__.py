"""Citation critics: a schema-bound verdict per answer, checked against the original retrieved passages.

`make_judge(cfg, cache_dir)` builds the judge selected by `critic.judge` (None for `none`);
`check_endpoints(cfg, judge, grader)` is the start-up check of the OpenAI-compatible ones.
"""

from __future__ import annotations

import os
from pathlib import Path

from awarl.config import CriticConfig
from awarl.critic.correctness import AnswerGrader
from awarl.critic.gold_judge import GoldJudge
from awarl.critic.lexical_judge import LexicalJudge
from awarl.critic.openai_judge import JudgeUnavailable, OpenAIJudge
from awarl.critic.schema import Judge

__all__ = ["GoldJudge", "JudgeUnavailable", "LexicalJudge", "OpenAIJudge", "check_endpoints", "critic_cache_dir", "make_judge"]


def critic_cache_dir(cfg: CriticConfig, run_dir: str | os.PathLike) -> Path:
    """Where a run's judge verdicts are cached: critic.cache_dir, else <run>/critic_cache."""
    return Path(cfg.cache_dir) if cfg.cache_dir else Path(run_dir) / "critic_cache"


def make_judge(cfg: CriticConfig, cache_dir: str | os.PathLike | None = None) -> Judge | None:
    """`none` -> None, `lexical` -> LexicalJudge, `gold` -> GoldJudge (with the lexical judge for questions
    without evidence unless `gold_fallback: none`), `openai` -> OpenAIJudge (cache in cache_dir or
    cfg.cache_dir)."""
    if cfg.judge == "none":
        return None
    if cfg.judge == "lexical":
        return LexicalJudge(cfg)
    if cfg.judge == "gold":
        return GoldJudge(cfg, fallback=LexicalJudge(cfg) if cfg.gold_fallback == "lexical" else None)
    if cfg.judge == "openai":
        return OpenAIJudge(cfg, cache_dir=cache_dir)
    raise ValueError(f"critic.judge must be none, lexical, gold or openai, got {cfg.judge!r}")


def check_endpoints(cfg: CriticConfig, judge: Judge | None = None, grader: AnswerGrader | None = None) -> None:
    """Raise JudgeUnavailable, before any model loads, when the citation judge or the answer grader is an
    OpenAI-compatible endpoint that does not answer or does not serve `critic.model` (`critic.check_endpoint`
    turns it off). Both share one endpoint, so it is asked once."""
    if not cfg.check_endpoint:
        return
    for obj, what in ((judge, "citation judge (critic.judge: openai)"),
                      (grader, "answer grader (metrics.correctness: judge)")):
        if isinstance(obj, OpenAIJudge):
            obj.check_reachable(what)
            return
