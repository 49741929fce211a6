"""The predictions file of an evaluation run: one JSON line per question (docs/formats.md)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from awarl.config import AwarlConfig
from awarl.critic.correctness import Grade, trajectory_outcome
from awarl.data.types import QAExample, example_key
from awarl.io import iter_jsonl

log = logging.getLogger(__name__)

PREDICTIONS = "predictions.jsonl"


def trajectory_record(ex: QAExample, traj: Any, cfg: AwarlConfig, phrases: list[str],
                      grade: Grade | None = None) -> dict[str, Any]:
    """One predictions.jsonl line (docs/formats.md) from an example and its trajectory.

    `phrases`: the engine's abstention phrases, `grade`: the LLM grader's verdict (see trajectory_outcome)."""
    p = traj.parsed
    outcome = trajectory_outcome(p, ex.answers, cfg, phrases, grade)
    graded = {} if grade is None or grade.correct is None else \
        {"judge_correct": grade.correct, **({"judge_failed": True} if grade.failed else {})}
    return {
        "id": ex.id,
        "dataset": ex.dataset,
        "question": ex.question,
        "prediction": p.answer,
        "answers": ex.answers,
        "valid": p.valid,
        "outcome": outcome.value,
        **graded,
        "trajectory": {
            "searches": list(p.searches),
            "citations": list(p.citations),
            "unshown_citations": list(p.unshown_citations),
            "invalid_reason": p.invalid_reason,
            "stop_reason": traj.stop_reason,
            "num_turns": p.num_turns,
            "passages": [{k: d.get(k) for k in ("number", "id", "title")} for d in traj.passages],
            "response": traj.response_text,
            "model_tokens": int(sum(traj.env_mask)),
            "env_tokens": int(len(traj.env_mask) - sum(traj.env_mask)),
        },
    }


def critic_label(cfg: AwarlConfig) -> str:
    """The judge named on each verdict: `lexical`, or `openai:<model>`."""
    return f"openai:{cfg.critic.model}" if cfg.critic.judge == "openai" else cfg.critic.judge


def read_done(path: Path) -> dict[str, dict]:
    """Finished predictions keyed by (dataset, id); a torn last line from a killed run is ignored."""
    if not path.exists():
        return {}
    errors: list[str] = []
    done = {example_key(str(r["dataset"]), str(r["id"])): r
            for _, r in iter_jsonl(path, on_error="skip", errors=errors) if "id" in r and "dataset" in r}
    for e in errors:
        log.warning("ignoring unreadable line (an interrupted write?): %s", e)
    return done
