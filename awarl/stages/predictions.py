"""The predictions file of an evaluation run: one JSON line per question (docs/formats.md)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from awarl.agent.rollout import Trajectory
from awarl.choices import JUDGES
from awarl.config import AwarlConfig
from awarl.critic import judge_kind
from awarl.critic.correctness import (
    AnswerGrader,
    Grade,
    answer_outcome,
    grade_answers,
    graded_fields,
    trajectory_outcome,
)
from awarl.critic.gold_judge import compact_evidence
from awarl.data.evidence import gold_evidence
from awarl.data.types import QAExample, example_key
from awarl.io import (
    append_jsonl,
    atomic_write_bytes,
    atomic_write_text,
    finish_interrupted_append,
    iter_jsonl,
    loads_json,
    repair_torn_tail,
)
from awarl.stages.score import duplicate_problem, line_problem, question_key

log = logging.getLogger(__name__)

PREDICTIONS = "predictions.jsonl"
REJECTED = "predictions.rejected.jsonl"  # lines a resume found unscorable, kept with what was wrong with them


def trajectory_record(ex: QAExample, traj: Trajectory, cfg: AwarlConfig, phrases: list[str],
                      grade: Grade | None = None) -> dict[str, Any]:
    """One predictions.jsonl line (docs/formats.md) from an example and its trajectory.

    `phrases`: the engine's abstention phrases, `grade`: the LLM grader's verdict (see trajectory_outcome)."""
    p = traj.parsed
    outcome = trajectory_outcome(p, ex.gold_answers, cfg.metrics, phrases, grade)
    return {
        "id": ex.id,
        "dataset": ex.dataset,
        "question": ex.question,
        "prediction": p.answer,
        "answers": ex.gold_answers,
        **({} if ex.answerable else {"answerable": False}),
        "valid": p.valid,
        "outcome": outcome.value,
        **graded_fields(grade),
        # for the report's citation precision/recall and evidence-retrieved share (titles and ids only)
        "gold_evidence": compact_evidence(gold_evidence(ex)),
        "trajectory": {
            "searches": list(p.searches),
            "citations": list(p.citations),
            "unshown_citations": list(p.unshown_citations),
            "malformed_citations": list(p.malformed_citations),
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
    """The judge named on each verdict: `gold`, `lexical`, or `openai:<model>` (an endpoint judge names its
    model; a gold judge's fallback verdicts name the fallback)."""
    j = cfg.critic.judge
    return judge_kind(j).label(j, cfg.critic) if j in JUDGES else j


def read_done(path: Path, correctness: str = "em", phrases: list[str] | None = None) -> dict[str, dict]:
    """Finished predictions keyed by (dataset, id): the lines the scorer scores (`line_problem` under
    `correctness`, with the abstention `phrases`), the first of a question when it has several (the scorer's
    rule, `duplicate_problem`: the report of an evaluation and `awarl score` of its file keep the same line).
    Any other line is not done: its question is generated again (`set_aside_bad_lines` first moves it out of
    the file)."""
    if not path.exists():
        return {}
    done: dict[str, dict] = {}
    for _, r in iter_jsonl(path, on_error="skip"):
        if line_problem(r, correctness, phrases) is None:
            done.setdefault(example_key(*question_key(r)), r)
    return done


def set_aside_bad_lines(path: Path, correctness: str, phrases: list[str] | None = None) -> list[str]:
    """Move the lines the scorer cannot score (not JSON, or failing `line_problem`) out of a predictions file
    before a resume: each goes to REJECTED next to it (`{"file", "line", "problem", "text"}`), the file is
    rewritten without them (atomically; the other lines byte for byte), and their questions count as not
    done, so they are generated again instead of being dropped from the report. A batch a kill interrupted
    is completed first, and a partial last line (its write was cut off) cut; a whole last row that lacks only
    its newline is completed and kept (`repair_torn_tail`). Returns one message per line set aside, saying
    what was found."""
    if not path.exists():
        return []
    finish_interrupted_append(path)
    repair_torn_tail(path)
    raw_lines = path.read_bytes().splitlines(keepends=True)
    keep, rejected, messages = [], [], []
    first: dict[tuple[str, str], str] = {}
    for n, raw in enumerate(raw_lines, 1):
        if not raw.strip():
            continue
        try:
            row = loads_json(raw.decode("utf-8"))
            problem = line_problem(row, correctness, phrases)
        except ValueError as e:  # not UTF-8, not JSON, nested too deeply
            problem = f"not valid JSON ({e})"
        duplicate = problem is None and (key := question_key(row)) in first
        if duplicate:
            problem = duplicate_problem(key, first[key])   # the scorer's rule: the first copy counts
        if problem is None:
            first[key] = f"line {n}"
            keep.append(raw)
            continue
        text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        rejected.append({"file": path.name, "line": n, "problem": problem, "text": text})
        messages.append(f"{path}:{n}: {problem}; moved to {REJECTED} "
                        f"({'the first copy stays' if duplicate else 'its question is generated again'})")
    if rejected:
        append_jsonl(path.with_name(REJECTED), rejected)
        atomic_write_bytes(path, b"".join(keep))
        for m in messages:
            log.warning("%s", m)
    return messages


def drop_failed_verdicts(path: Path) -> int:
    """Take the lines whose citation verdict failed (`critic.failed`: the judge was down, or answered no valid
    verdict) out of a predictions file before a resume, so their questions are generated and judged again:
    each question is sampled from its own seed, so it gets the answer it had, and now a verdict (one outage
    stayed in the folder for good: "0 judged, 30 failures" on every rerun). A verdict is not asked for without
    the trajectory's passages, which the line does not keep, hence the question is run again. The file is
    rewritten atomically, other lines byte for byte. Returns the lines taken out."""
    if not path.exists():
        return 0
    lines = path.read_bytes().splitlines(keepends=True)
    keep = []
    for raw in lines:
        try:
            row = loads_json(raw)
        except ValueError:
            row = None
        critic = row.get("critic") if isinstance(row, dict) else None
        if not (isinstance(critic, dict) and critic.get("failed") is True):
            keep.append(raw)
    dropped = len(lines) - len(keep)
    if dropped:
        atomic_write_bytes(path, b"".join(keep))
        log.warning("%s: %d line(s) whose citation verdict failed in an earlier run are generated and judged again",
                    path, dropped)
    return dropped


def regrade_failed(path: Path, grader: AnswerGrader | None, cfg: AwarlConfig, phrases: list[str]) -> tuple[int, int]:
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
            row = loads_json(line)
        except ValueError:
            continue  # a line set_aside_bad_lines would move: left as it is
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
        row["outcome"] = answer_outcome(row.get("prediction"), row.get("answers") or [], cfg.metrics, phrases,
                                        valid=bool(row.get("valid", True)), grade=g).value
        lines[i] = json.dumps(row, ensure_ascii=False) + "\n"
    if settled:
        atomic_write_text(path, "".join(lines))
    log.info("answer grader: re-graded %d line(s) whose grade had failed; %d settled, %d still failing",
             len(todo), settled, len(todo) - settled)
    return len(todo), settled
