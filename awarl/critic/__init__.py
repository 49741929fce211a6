"""Citation critics: a schema-bound verdict per answer, checked against the original retrieved passages.

`make_judge(cfg, cache_dir)` builds the judge selected by `critic.judge` (None for `none`).
"""

from __future__ import annotations

import os
from typing import Any

from awarl.config import CriticConfig
from awarl.critic.lexical_judge import LexicalJudge
from awarl.critic.openai_judge import OpenAIJudge


def make_judge(cfg: CriticConfig, cache_dir: str | os.PathLike | None = None) -> Any:
    """`none` -> None, `lexical` -> LexicalJudge, `openai` -> OpenAIJudge (cache in cache_dir or cfg.cache_dir)."""
    if cfg.judge == "none":
        return None
    if cfg.judge == "lexical":
        return LexicalJudge(cfg)
    if cfg.judge == "openai":
        return OpenAIJudge(cfg, cache_dir=cache_dir)
    raise ValueError(f"critic.judge must be none, lexical or openai, got {cfg.judge!r}")
