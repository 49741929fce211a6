"""The predictions file of an evaluation run: one JSON line per question (docs/formats.md)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from awarl.config import AwarlConfig
from awarl.critic.correctness import Grade, answer_outcome, grade_answers, graded_fields, trajectory_outcome
from awarl.critic.gold_judge import compact_evidence
from awarl.data.evidence import gold_evidence
from awarl.data.types import QAExample, example_key
from awarl.io import atomic_write_text, iter_jsonl

log = logging.getLogger(__name__)

PREDICTIONS = "predictions.jsonl"


def trajectory_record(ex: QAExample, traj: Any, cfg: AwarlConfig, phrases: list[str],
                      grade: Grade | None = None) -> dict[str, Any]:
    """One predictions.jsonl line (docs/formats.md) from an example and its trajectory.

    `phrases`: the engine's abstention phrases, `grade`: the LLM grader's verdict (see trajectory_outcome)."""
    p = traj.parsed
    outcome = trajectory_outcome(p, ex.answers, cfg, phrases, grade)
    return {
        "id": ex.id,
        "dataset": ex.dataset,
        "question": ex.question,
        "prediction": p.answer,
        "answers": ex.answers,
        "valid": p.valid,
        "outcome": outcome.value,
        **graded_fields(grade),
        # for the report's citation precision/recall and evidence-retrieved share (titles and ids only)
        "gold_evidence": compact_evidence(gold_evidence(ex)),
        "trajectory": {
            "searches": list(p.searches),
            "citations": list(p.citations),
            "unshown_citations": list(p.unshown_citations),
            "invalid_reason": p.invalid_reason,
            "stop_reason": traj.stop_reason,
            "failed_searches": traj.failed_searches,
            "num_turns": p.num_turns,
            "passages": [{k: d.get(k) for k in ("number", "id", "title")} for d in traj.passages],
            "response": traj.response_text,
            "model_tokens": int(sum(traj.env_mask)),
            "env_tokens": int(len(traj.env_mask) - sum(traj.env_mask)),
        },
    }


def critic_label(cfg: AwarlConfig) -> str:
    """The judge named on each verdict: `gold`, `lexical`, or `openai:<model>` (a gold judge's fallback
    verdicts name the fallback)."""
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


def regrade_failed(path: Path, grader: Any, cfg: AwarlConfig, phrases: list[str]) -> tuple[int, int]:
    """Ask the answer grader again for the lines whose grade failed (`judge_failed`) in an earlier run, so one
    outage does not stay in the folder: a line the grader now settles gets its verdict and outcome, one it
    still fails on keeps its flag. The file is rewritten atomically, other lines byte for byte. Returns
    (lines retried, lines settled)."""
    if grader is None or not path.exists():
        return 0, 0
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    todo: list[tuple[int, dict]] = []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a torn or foreign line: left as it is (read_done skips it)
        if isinstance(row, dict) and row.get("judge_failed") is True:
            todo.append((i, row))
    if not todo:
        return 0, 0
    grades = grade_answers(grader, [(str(r.get("question", "")), r.get("prediction"), bool(r.get("valid", True)),
                                     list(r.get("answers") or [])) for _, r in todo], phrases)
    settled = 0
    for (i, row), g in zip(todo, grades, strict=True):
        if g.failed or g.correct is None:
            continue
        settled += 1
        row.pop("judge_failed", None)
        row["judge_correct"] = g.correct
        row["outcome"] = answer_outcome(row.get("prediction"), row.get("answers") or [], cfg, phrases,
                                        valid=bool(row.get("valid", True)), grade=g).value
        lines[i] = json.dumps(row, ensure_ascii=False) + "\n"
    if settled:
        atomic_write_text(path, "".join(lines))
    log.info("answer grader: re-graded %d line(s) whose grade had failed; %d settled, %d still failing",
             len(todo), settled, len(todo) - settled)
    return len(todo), settled
