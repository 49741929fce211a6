"""`awarl research`: the critic-loop research agent on one question, or a regression suite of fixed tasks
against a frozen source snapshot (awarl/research/, docs/research.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from awarl.agent.backends import backend_kind
from awarl.agent.rollout import RolloutEngine
from awarl.config import AwarlConfig, save_resolved
from awarl.critic import critic_cache_dir, judge_kind
from awarl.data.loaders import SHIPPED_DEV, load_shipped
from awarl.io import atomic_write_json
from awarl.locks import folder_lock, path_lock
from awarl.models.loading import load_tokenizer
from awarl.research.loop import check_question
from awarl.research.records import loop_reports, make_loop_judge, make_planner, make_runs
from awarl.research.regression import (
    check,
    check_recorded_with,
    check_snapshot,
    read_tasks,
    record,
    recorded_with,
    snapshot_of,
)
from awarl.research.schema import ResearchReport
from awarl.retrieval import load_retriever
from awarl.stages.eval_manifest import retriever_identity
from awarl.stages.resources import ensure_default_retrieval

log = logging.getLogger(__name__)


class _Parts:
    """What research runs with: the engine (executor), the loop's judge (critic, research.judge), the planner,
    the retriever."""

    def __init__(self, cfg: AwarlConfig, model: str | None) -> None:
        cache = critic_cache_dir(cfg.critic, cfg.run.out_dir)
        self.judge = make_loop_judge(cfg, cache, check=True)  # dead endpoints fail before any model loads
        self.planner = make_planner(cfg, cache, check=True)
        model = model or cfg.train.model
        self.model_ref = model
        self.cfg = ensure_default_retrieval(cfg)
        self.retriever = load_retriever(self.cfg.retrieval)
        tokenizer = load_tokenizer(model, "--model / train.model")
        self.engine = RolloutEngine.from_config(self.cfg, tokenizer, self.retriever, model=model)


def _research(parts: _Parts, questions: list[str], examples: list[Any]) -> list[ResearchReport]:
    cfg, engine, judge = parts.cfg, parts.engine, parts.judge
    runs = make_runs(cfg.research, examples, parts.planner, engine.abstention_phrases, questions, seed=cfg.run.seed)
    return loop_reports(runs, engine, judge, cfg.research, temperature=cfg.eval.temperature, top_p=cfg.generation.top_p,
                        seed=cfg.run.seed, generation=cfg.generation, model_ref=parts.model_ref)


class _Question:
    """A question with no dataset record behind it (no decomposition: the planner asks it as it is)."""

    def __init__(self, question: str) -> None:
        self.question = question
        self.metadata: dict[str, Any] = {}


def research_question(cfg: AwarlConfig, question: str, *, model: str | None = None,
                      out: str | Path | None = None,
                      on_report: Callable[[ResearchReport], None] | None = None) -> ResearchReport:
    """Research one question; the report is handed to `on_report` (the command prints it), then written as
    JSON to `out` (atomically) and returned: a write that fails at the end of the run (a full disk) costs the
    file, not the report. A blank or over-long question is refused before anything loads, and `out` is locked
    (awarl.locks) before anything loads too, so an output that cannot be written is refused at once."""
    check_question(question, cfg.research.max_question_chars)
    with ExitStack() as stack:
        if out:
            stack.enter_context(path_lock(out, f"research report {out}", remedy="or choose another --out"))
        (report,) = _research(_Parts(cfg, model), [question], [_example_for(question)])
        if on_report is not None:
            on_report(report)
        if out:
            atomic_write_json(Path(out), report.model_dump(mode="json"))
    return report


def _example_for(question: str) -> Any:
    """The shipped record of this exact question, when there is one (for its decomposition)."""
    for ds in SHIPPED_DEV:
        for ex in load_shipped(ds):
            if ex.question.strip() == question.strip():
                return ex
    return _Question(question)


def _task_example(task: dict, shipped: dict[str, dict[str, Any]]) -> Any:
    """The shipped record a task names (`shipped`: each dataset's records by id, loaded once), else the
    question alone."""
    ds, eid = task.get("dataset"), task.get("example_id")
    if ds in SHIPPED_DEV and eid:
        if ds not in shipped:
            shipped[ds] = {}
            for ex in load_shipped(ds):
                shipped[ds].setdefault(ex.id, ex)
        found = shipped[ds].get(str(eid))
        if found is None:
            raise ValueError(f"task {task['id']}: no {ds} example {eid!r} in the shipped sample")
        return found
    return _Question(task["question"])


def run_regression(cfg: AwarlConfig, tasks_path: str | Path, out_dir: str | Path, *, model: str | None = None,
                   record_mode: bool = False) -> dict[str, Any]:
    """Run the fixed tasks; check them against their recorded expectations (or record them). Returns a
    summary with `failures` (task id -> differences) and writes it, with every report, to `out_dir`."""
    header, tasks = read_tasks(tasks_path)
    if not tasks:
        raise ValueError(f"{tasks_path}: no tasks")
    for t in tasks:
        check_question(t["question"], cfg.research.max_question_chars)
    with folder_lock(out_dir, f"regression folder {out_dir}", remedy="or choose another --out"):
        return _regression_locked(cfg, header, tasks, tasks_path, Path(out_dir), model, record_mode)


def _regression_locked(cfg: AwarlConfig, header: dict | None, tasks: list[dict], tasks_path: str | Path, out: Path,
                       model: str | None, record_mode: bool) -> dict[str, Any]:
    """`run_regression` once its output folder's lock is held."""
    parts = _Parts(cfg, model)
    snapshot = snapshot_of(retriever_identity(parts.retriever))
    current = recorded_with(parts.cfg, parts.model_ref)
    notes: list[str] = []
    if not record_mode:
        check_snapshot(header, snapshot, tasks_path)
        notes = check_recorded_with(header, current, tasks_path)
    save_resolved(parts.cfg, out)
    shipped: dict[str, dict[str, Any]] = {}
    reports = _research(parts, [t["question"] for t in tasks], [_task_example(t, shipped) for t in tasks])
    if record_mode:
        record(tasks_path, snapshot, tasks, reports, current)
    failures = {} if record_mode else {t["id"]: d for t, r in zip(tasks, reports, strict=True) if (d := check(t, r))}
    summary = {"tasks": len(tasks), "recorded": record_mode, "snapshot": snapshot, "recorded_with": current,
               "setting_differences": notes, "failures": failures,
               "regressions": sum(1 for d in failures.values() for line in d if line.startswith("REGRESSION")),
               "reports": {t["id"]: r.model_dump(mode="json") for t, r in zip(tasks, reports, strict=True)}}
    atomic_write_json(out / "regression.json", summary)
    return summary


def dry_run(cfg: AwarlConfig, *, question: str | None, tasks: str | None, model: str | None) -> str:
    """What `awarl research` would run, after checking what can be checked without loading anything: the
    question (or every task's), the tasks file, the script of a scripted executor, an index folder. Errors
    name what is wrong; a local model path that does not exist yet is said, not refused (`make demo` or
    `awarl train` writes it)."""
    from awarl.research.critic import judge_label

    r = cfg.research
    lines = []
    if tasks:
        header, rows = read_tasks(tasks)
        for t in rows:
            check_question(t["question"], r.max_question_chars)
        rec = (header or {}).get("recorded_with") or {}
        lines.append(f"regression: {len(rows)} task(s) from {tasks}; recorded with judge {rec.get('judge', '?')}, "
                     f"planner {rec.get('planner', '?')}, policy {(rec.get('policy') or {}).get('kind', '?')}")
    else:
        check_question(question, r.max_question_chars)
        lines.append(f"question: {question!r} ({len(question or '')} characters, limit {r.max_question_chars})")
    if backend_kind(cfg.generation.backend).replays_script and \
            not (cfg.generation.script and Path(cfg.generation.script).is_file()):
        raise FileNotFoundError(f"generation.script: no script file at {cfg.generation.script!r}")
    ref = model or cfg.train.model
    local = Path(ref)
    where = ("local" if local.is_dir() else "not found locally: a hub id, or a path still to be made "
             "(`make demo` writes runs/demo/final)")
    lines.append(f"executor: {ref} ({where}), generation.backend={cfg.generation.backend}")
    if cfg.retrieval.kind == "server":
        lines.append(f"retrieval: server {cfg.retrieval.server_url} (not contacted), topk {cfg.retrieval.topk}")
    elif cfg.retrieval.index_dir:
        if not Path(cfg.retrieval.index_dir).is_dir():
            raise FileNotFoundError(f"retrieval.index_dir: no index folder at {cfg.retrieval.index_dir}")
        lines.append(f"retrieval: index {cfg.retrieval.index_dir}, topk {cfg.retrieval.topk}")
    else:
        lines.append(f"retrieval: the shipped closed corpus's BM25 index (built on first use), topk {cfg.retrieval.topk}")
    kind = judge_kind(r.judge)
    judge = judge_label(r.judge) + (f" {cfg.critic.model} at {cfg.critic.base_url}" if kind.endpoint else "")
    lines.append(f"planner: {r.planner}; loop judge (research.judge): {judge}"
                 + ("; ORACLE: it reads the dataset's gold evidence" if kind.oracle else ""))
    lines.append(f"loop: approve at {r.approve_threshold}, at most {r.max_iterations} attempt(s) a step, re-queries "
                 f"at temperature {r.requery_temperature} with up to {r.requery_draws} draw(s) each")
    return "dry run, nothing loaded:\n  " + "\n  ".join(lines)
