"""`awarl eval --agent critic_loop`: the critic loop over evaluation questions, as predictions lines that the
single-pass scorer, report and `awarl compare` read unchanged (prediction, outcome, critic summary, the
searches for the coverage-gap list), plus the loop's own record under "research"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awarl.critic.correctness import answer_outcome, grade_answers, graded_fields
from awarl.data.types import QAExample
from awarl.research.loop import ResearchRun, run_research
from awarl.research.planner import DecompositionPlanner, Planner
from awarl.research.schema import ResearchReport
from awarl.rewards.citation import CitationJudgement, citation_reward


def make_planner(cfg: Any, cache_dir: Any = None, *, check: bool = False) -> Planner:
    """The planner of `research.planner` (offline: the dataset's own decomposition, else the question; openai:
    the LLM planner at research.planner_base_url, checked reachable first when `check`)."""
    r = cfg.research
    if r.planner == "decomposition":
        return DecompositionPlanner()
    from awarl.critic.openai_judge import OpenAIJudge
    from awarl.research.llm_planner import LLMPlanner

    ccfg = cfg.critic.model_copy(update={"base_url": r.planner_base_url or cfg.critic.base_url,
                                         "model": r.planner_model or cfg.critic.model})
    client = OpenAIJudge(ccfg, cache_dir=cache_dir)
    if check and cfg.critic.check_endpoint:
        client.check_reachable("research planner (research.planner_base_url)")
    return LLMPlanner(client, cfg.agent.abstention_phrases[0])


def make_runs(cfg: Any, examples: Sequence[Any], planner: Planner, phrases: Sequence[str],
              questions: Sequence[str] | None = None) -> list[ResearchRun]:
    """One run per example (its `question`, or the one given; the example's record feeds the planner)."""
    r = cfg.research
    questions = questions or [ex.question for ex in examples]
    return [ResearchRun(q, planner, approve_threshold=r.approve_threshold, max_iterations=r.max_iterations,
                        abstention_phrase=phrases[0], example=ex) for q, ex in zip(questions, examples, strict=True)]


def critic_summary(run: ResearchRun, judge: Any, label: str, inferred_weight: float) -> dict | None:
    """The citation critic's summary of the final answer, in the single-pass line's shape, so the report's
    critic means compare across agents (labelled with the judge that gave it: the gold judge's fallback for a
    question without gold evidence). None when nothing was synthesised (the loop abstained before)."""
    if run.final is None:
        return None
    _, final_input = run.final
    route = getattr(judge, "route", None)
    label = (route(final_input) if route else None) or label
    if run.final_verdict is None:
        return CitationJudgement(error="no valid verdict").summary(label)
    score = citation_reward(run.final_verdict, [p.number for p in final_input.cited], list(final_input.passages),
                            inferred_weight)
    return CitationJudgement(verdict=run.final_verdict, score=score).summary(label)


def research_record(ex: QAExample, run: ResearchRun, report: ResearchReport, cfg: Any, phrases: Sequence[str],
                    grade: Any = None) -> dict[str, Any]:
    """One predictions.jsonl line of the critic loop."""
    outcome = answer_outcome(report.answer, ex.answers, cfg, list(phrases), valid=True, grade=grade)
    searches = [q for s in report.sub_questions for q in s["searches"]]
    return {
        "id": ex.id, "dataset": ex.dataset, "question": ex.question, "prediction": report.answer,
        "answers": ex.answers, "valid": True, "outcome": outcome.value, **graded_fields(grade),
        "trajectory": {"searches": searches, "citations": [], "num_turns": sum(s["attempts"] for s in report.sub_questions)},
        "research": report.model_dump(mode="json"),
    }


def critic_loop_rows(engine: Any, judge: Any, grader: Any, batch: Sequence[QAExample], cfg: Any, *,
                     temperature: float, top_p: float, seed: int, label: str,
                     planner: Planner) -> list[dict[str, Any]]:
    """Research every question of the batch together (one engine batch per round) and make their lines."""
    phrases = list(engine.abstention_phrases)
    runs = make_runs(cfg, batch, planner, phrases)
    reports = run_research(runs, engine, judge, temperature=temperature, top_p=top_p, seed=seed)
    grades = grade_answers(grader, [(ex.question, rep.answer, True, ex.answers) for ex, rep in zip(batch, reports,
                                                                                               strict=True)], phrases)
    rows = []
    for ex, run, rep, g in zip(batch, runs, reports, grades, strict=True):
        row = research_record(ex, run, rep, cfg, phrases, g)
        row["critic"] = critic_summary(run, judge, label, cfg.reward.inferred_weight)
        rows.append(row)
    return rows


RESEARCH_MEANS = ("iterations", "requeries", "groundedness_before", "groundedness_after")


def research_summary(rows: Sequence[dict]) -> dict[str, Any] | None:
    """The loop's own figures in an evaluation report, per dataset and macro: mean critic-loop cycles and
    re-queries per question, mean groundedness of first and final attempts, the approved share, and coverage
    gaps per question. None when the rows are not critic-loop predictions."""
    by_ds: dict[str, list[dict]] = {}
    for r in rows:
        if isinstance(r.get("research"), dict):
            by_ds.setdefault(str(r["dataset"]), []).append(r["research"])
    if not by_ds:
        return None

    def stats(reports: list[dict]) -> dict[str, float | int | None]:
        out: dict[str, float | int | None] = {"questions": len(reports)}
        for key in RESEARCH_MEANS:
            vals = [float(x[key]) for x in reports if x.get(key) is not None]
            out[key] = sum(vals) / len(vals) if vals else None
        out["approved_share"] = sum(bool(x.get("approved")) for x in reports) / len(reports)
        out["coverage_gaps_per_question"] = sum(len(x.get("coverage_gaps") or []) for x in reports) / len(reports)
        return out

    per = {ds: stats(reps) for ds, reps in sorted(by_ds.items())}
    keys = [k for k in next(iter(per.values())) if k != "questions"]
    macro = {k: (sum(v[k] for v in per.values() if v[k] is not None) / n if (n := sum(v[k] is not None
                                                                                     for v in per.values())) else None)
             for k in keys}
    return {"per_dataset": per, "macro": macro}
