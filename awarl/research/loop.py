"""The critic loop (the critic-loop article, sections 2-6): plan -> execute (map) -> criticise -> re-queue what
is unsupported, up to a hard limit -> synthesise (reduce) -> criticise the synthesis -> report, with the
coverage gaps stated instead of filled.

One `ResearchRun` is the state of one question; `run_research` drives any number of them together, so each
round's sub-questions of every question go to the rollout engine as one batch and to the judge as one call.

Approval: an attempt is approved when the executor answered (valid, not an abstention) and at least
`approve_threshold` of its claims are grounded, counted from the audited verdict (a judge's own figure is
logged, never trusted). Re-queries are real: a re-query is sampled (`requery_temperature`) and its searches
must include one never tried by an earlier attempt; a draw that only repeats is discarded and drawn again,
up to `requery_draws` draws, after which the attempt counts as a repeat. A step is attempted at most
`max_iterations` times; a step whose dependency was never approved is not asked at all. What stays
unsupported is a coverage gap only when it was searched for with different terms AND the loop's own search
for the sub-question's words (`probe`) retrieved no passage that answers it; when that search does, the step
is a query failure (the sources hold it, the executor missed it), and so is a step that never searched or
whose re-queries only repeated. A step whose attempts all failed in the judge or the executor is a failure
of its own, in neither list. The final answer is approved only when every step is, the reduce decided it,
the final pass reaches the threshold and no values conflict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awarl.agent.backends.base import stream_seed
from awarl.agent.rollout import RolloutEngine
from awarl.critic.schema import Judge
from awarl.research.checks import answering_span
from awarl.research.critic import answered, judge_name, nothing_to_verify, passage_refs, verify
from awarl.research.executor import critic_input, execute
from awarl.research.report_build import build_report
from awarl.research.schema import ResearchReport
from awarl.research.state import RESEARCH_DEFAULTS, Attempt, ResearchRun, Step, check_question

__all__ = ["Attempt", "ResearchRun", "Step", "check_question", "run_research"]


def _job_seed(run: ResearchRun, seed: int | None, step: Step, rnd: int, requery: bool) -> int | None:
    """The seed of one draw: from the run's own seed (else the call's), the round, the step and whether it is a
    re-query, never from the draw's position in the batch."""
    base = run.seed if run.seed is not None else seed
    if base is None:
        return None
    return stream_seed(base, (rnd * 2 + int(requery)) * 4096 + step.sub.index)


def probe(runs: Sequence[ResearchRun], engine: RolloutEngine) -> None:
    """The loop's own search for each exhausted step's sub-question (its words, not the executor's), in one
    retriever call: whether a passage answers it decides between a coverage gap and a query failure."""
    steps = [(run, s) for run in runs for s in run.to_probe()]
    if not steps:
        return
    queries = [s.asked for _, s in steps]
    k = int(getattr(engine, "topk", 3) or 3)
    try:
        found = engine.retriever.search(queries, k)
    except Exception as e:  # noqa: BLE001 - a failed search is reported as such, never as a gap
        for _, s in steps:
            s.probe = {"query": s.asked, "error": f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"}
        return
    for (_, s), hits in zip(steps, found, strict=True):
        refs = passage_refs([{"id": p.id, "title": p.title, "text": p.text} for p in hits])
        span = answering_span(s.asked, refs)
        s.probe = {"query": s.asked, "passages": [{"id": p.id, "title": p.title, "text": p.text} for p in refs],
                   "answering": None if span is None else span.__dict__}


def run_research(runs: Sequence[ResearchRun], engine: RolloutEngine, judge: Judge | None, *, temperature: float = 0.0,
                 top_p: float = 1.0, seed: int | None = None,
                 requery_temperature: float = RESEARCH_DEFAULTS.requery_temperature,
                 provenance: dict[str, Any] | None = None) -> list[ResearchReport]:
    """Drive the runs to their reports: every round executes the ready steps of every run in one engine batch
    per temperature (first attempts at `temperature`, re-queries sampled at `requery_temperature`) and
    verifies them in one judge call; the sub-questions still unsupported are searched by the loop itself
    (`probe`); then every synthesis is verified in one more call. `provenance` (the index, executor, judge
    and planner identities; by default read from the engine, the judge and the planner) is written into every
    report."""
    rnd = 0
    while True:
        jobs = [(run, step, text, rq) for run in runs if not run.finished for step, text, rq in run.ready()]
        if not jobs:
            break
        trajs: list[Any] = [None] * len(jobs)
        for rq, temp in ((False, temperature), (True, requery_temperature)):
            idx = [i for i, job in enumerate(jobs) if job[3] is rq]
            seeds = [_job_seed(jobs[i][0], seed, jobs[i][1], rnd, rq) for i in idx]
            got = execute(engine, [jobs[i][2] for i in idx], temperature=temp, top_p=top_p,
                          seed=None if any(x is None for x in seeds) else [int(x) for x in seeds if x is not None])
            for i, t in zip(idx, got, strict=True):
                trajs[i] = t
        inputs = [critic_input(step.asked, t, step.gold) for (_, step, _, _), t in zip(jobs, trajs, strict=True)]
        asked = [i for i, t in enumerate(trajs) if answered(t)]  # an abstention has no claims to check
        got_verdicts = dict(zip(asked, verify(judge, [inputs[i] for i in asked]), strict=True))
        for i, ((run, step, _, _), traj) in enumerate(zip(jobs, trajs, strict=True)):
            verdict, name = got_verdicts.get(i) or (nothing_to_verify(), judge_name(judge, inputs[i]) if judge else "none")
            run.absorb(step, traj, verdict, name)
        rnd += 1
    probe(runs, engine)
    if provenance is None:
        from awarl.research.provenance import provenance as identities

        provenance = identities(engine, judge, runs[0].planner if runs else None)
    for run in runs:
        run.provenance = dict(provenance)
    finals = [run.synthesis() for run in runs]
    verdicts = iter(verify(judge, [inp for f in finals for inp in f]))
    for run, f in zip(runs, finals, strict=True):
        run.settle_final([next(verdicts) for _ in f])
    return [build_report(run) for run in runs]
