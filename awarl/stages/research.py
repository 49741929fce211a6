"""`awarl research`: the critic-loop research agent on one question, or a regression suite of fixed tasks
against a frozen source snapshot (awarl/research/, docs/research.md)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from awarl.agent.rollout import RolloutEngine
from awarl.config import AwarlConfig, save_resolved
from awarl.critic import check_endpoints, critic_cache_dir, make_judge
from awarl.data.loaders import SHIPPED_DEV, load_shipped
from awarl.io import atomic_write_json
from awarl.models.loading import load_tokenizer
from awarl.research.loop import run_research
from awarl.research.records import make_planner, make_runs
from awarl.research.regression import check, check_snapshot, read_tasks, record, snapshot_of
from awarl.research.schema import ResearchReport
from awarl.retrieval import load_retriever
from awarl.stages.eval_manifest import retriever_identity
from awarl.stages.resources import ensure_default_retrieval

log = logging.getLogger(__name__)


class _Parts:
    """What research runs with: the engine (executor), the judge (critic), the planner, the retriever."""

    def __init__(self, cfg: AwarlConfig, model: str | None) -> None:
        cache = critic_cache_dir(cfg.critic, cfg.run.out_dir)
        self.judge = make_judge(cfg.critic, cache)
        check_endpoints(cfg.critic, self.judge, None)  # dead endpoints fail before any model loads
        self.planner = make_planner(cfg, cache, check=True)
        model = model or cfg.train.model
        self.cfg = ensure_default_retrieval(cfg)
        self.retriever = load_retriever(self.cfg.retrieval)
        tokenizer = load_tokenizer(model, "--model / train.model")
        self.engine = RolloutEngine.from_config(self.cfg, tokenizer, self.retriever, model=model)


def _research(parts: _Parts, questions: list[str], examples: list[Any]) -> list[ResearchReport]:
    cfg, engine, judge = parts.cfg, parts.engine, parts.judge
    runs = make_runs(cfg, examples, parts.planner, engine.abstention_phrases, questions)
    return run_research(runs, engine, judge, temperature=cfg.eval.temperature, top_p=cfg.generation.top_p,
                        seed=cfg.run.seed)


class _Question:
    """A question with no dataset record behind it (no decomposition: the planner asks it as it is)."""

    def __init__(self, question: str) -> None:
        self.question, self.metadata = question, {}


def research_question(cfg: AwarlConfig, question: str, *, model: str | None = None,
                      out: str | Path | None = None) -> ResearchReport:
    """Research one question; the report is written as JSON to `out` (atomically) and returned."""
    (report,) = _research(_Parts(cfg, model), [question], [_example_for(question)])
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
    recorded, tasks = read_tasks(tasks_path)
    if not tasks:
        raise ValueError(f"{tasks_path}: no tasks")
    parts = _Parts(cfg, model)
    snapshot = snapshot_of(retriever_identity(parts.retriever))
    if not record_mode:
        check_snapshot(recorded, snapshot, tasks_path)
    out = Path(out_dir)
    save_resolved(parts.cfg, out)
    shipped: dict[str, dict[str, Any]] = {}
    reports = _research(parts, [t["question"] for t in tasks], [_task_example(t, shipped) for t in tasks])
    if record_mode:
        record(tasks_path, snapshot, tasks, reports)
    failures = {} if record_mode else {t["id"]: d for t, r in zip(tasks, reports, strict=True) if (d := check(t, r))}
    summary = {"tasks": len(tasks), "recorded": record_mode, "snapshot": snapshot, "failures": failures,
               "regressions": sum(1 for d in failures.values() for line in d if line.startswith("REGRESSION")),
               "reports": {t["id"]: r.model_dump(mode="json") for t, r in zip(tasks, reports, strict=True)}}
    atomic_write_json(out / "regression.json", summary)
    return summary
