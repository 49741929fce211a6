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
from awarl.rewards.citation import CitationJudgement, citation_reward, safe_verify


def make_planner(cfg: Any, cache_dir: Any = None, *, check: bool = False) -> Planner:
    """The planner of `research.planner` (offline: the dataset's own decomposition, else the offline rules,
    else the question; openai: the LLM planner at research.planner_base_url, checked reachable first when
    `check`, its errors naming the option that set the endpoint)."""
    r = cfg.research
    if r.planner == "decomposition":
        return DecompositionPlanner()
    from awarl.critic.openai_judge import OpenAIJudge
    from awarl.research.llm_planner import LLMPlanner

    ccfg = cfg.critic.model_copy(update={"base_url": r.planner_base_url or cfg.critic.base_url,
                                         "model": r.planner_model or cfg.critic.model})
    client = OpenAIJudge(ccfg, cache_dir=cache_dir)
    if check and cfg.critic.check_endpoint:
        url_key = ("research.planner_base_url" if r.planner_base_url
                   else "critic.base_url (research.planner_base_url is unset)")
        model_key = "research.planner_model" if r.planner_model else "critic.model (research.planner_model is unset)"
        client.check_reachable("research planner", url_key=url_key, model_key=model_key,
                               instead="set research.planner to decomposition (the offline planner)")
    return LLMPlanner(client, cfg.agent.abstention_phrases[0])


def make_loop_judge(cfg: Any, cache_dir: Any = None, *, check: bool = False, reuse: Any = None) -> Any:
    """The judge of `research.judge`, which decides the loop (not critic.judge, the citation reward's: see
    the field's description). `reuse`: a judge already built for critic.judge, used when both are the same
    kind (one client, one cache, one set of counters). The OpenAI one is checked reachable when `check`."""
    from awarl.critic import OpenAIJudge, make_judge

    if reuse is not None and getattr(reuse, "name", None) == cfg.research.judge:
        return reuse
    judge = make_judge(cfg.critic.model_copy(update={"judge": cfg.research.judge}), cache_dir)
    if check and cfg.critic.check_endpoint and isinstance(judge, OpenAIJudge):
        judge.check_reachable("critic-loop judge (research.judge: openai)",
                              instead="set research.judge to lexical (offline)")
    return judge


def make_runs(cfg: Any, examples: Sequence[Any], planner: Planner, phrases: Sequence[str],
              questions: Sequence[str] | None = None) -> list[ResearchRun]:
    """One run per example (its `question`, or the one given; the example's record feeds the planner)."""
    r = cfg.research
    questions = questions or [ex.question for ex in examples]
    return [ResearchRun(q, planner, approve_threshold=r.approve_threshold, max_iterations=r.max_iterations,
                        abstention_phrase=phrases[0], example=ex, requery_draws=r.requery_draws,
                        min_claim_confidence=r.min_claim_confidence, drift_overlap=r.drift_overlap,
                        max_question_chars=r.max_question_chars)
            for q, ex in zip(questions, examples, strict=True)]


def loop_reports(runs: Sequence[ResearchRun], engine: Any, judge: Any, cfg: Any, *, temperature: float,
                 top_p: float, seed: int | None) -> list[ResearchReport]:
    return run_research(runs, engine, judge, temperature=temperature, top_p=top_p, seed=seed,
                        requery_temperature=cfg.research.requery_temperature)


def critic_summaries(runs: Sequence[ResearchRun], reports: Sequence[ResearchReport], judge: Any, loop_judge: Any,
                     label: str, inferred_weight: float) -> list[dict | None]:
    """The citation critic's summary of each ANSWERED final answer, in the single-pass line's shape and by the
    same judge (critic.judge), so citation metrics compare across agents; None where the loop abstained (a
    single pass judges only answers too). The loop's own final verdict is reused when the two judges are one
    and it checked the whole answer at once; else critic.judge is asked, in one call."""
    out: list[dict | None] = [None] * len(runs)
    ask = [i for i, (run, rep) in enumerate(zip(runs, reports, strict=True)) if rep.approved and run.final]
    if judge is None or not ask:
        return out
    fresh = [i for i in ask if judge is not loop_judge or len(runs[i].final_inputs) != 1]
    verdicts = dict(zip(fresh, safe_verify(judge, [runs[i].final[1] for i in fresh], "citation judge")[0],
                        strict=True))
    for i in ask:
        final_input = runs[i].final[1]
        verdict = verdicts[i] if i in verdicts else runs[i].final_verdict
        route = getattr(judge, "route", None)
        name = (route(final_input) if route else None) or label
        if verdict is None:
            out[i] = CitationJudgement(error="no valid verdict").summary(name)
            continue
        score = citation_reward(verdict, [p.number for p in final_input.cited], list(final_input.passages),
                                inferred_weight)
        out[i] = CitationJudgement(verdict=verdict, score=score).summary(name)
    return out


def research_record(ex: QAExample, run: ResearchRun, report: ResearchReport, cfg: Any, phrases: Sequence[str],
                    grade: Any = None) -> dict[str, Any]:
    """One predictions.jsonl line of the critic loop."""
    outcome = answer_outcome(report.answer, ex.answers, cfg, list(phrases), valid=True, grade=grade)
    searches = [q for s in report.sub_questions for q in s["searches"]]
    return {
        "id": ex.id, "dataset": ex.dataset, "question": ex.question, "prediction": report.answer,
        "answers": ex.answers, "valid": True, "outcome": outcome.value, **graded_fields(grade),
        "trajectory": {"searches": searches, "citations": [],
                       "num_turns": sum(s["attempts"] for s in report.sub_questions)},
        "research": report.model_dump(mode="json"),
    }


def critic_loop_rows(engine: Any, judge: Any, grader: Any, batch: Sequence[QAExample], cfg: Any, *,
                     temperature: float, top_p: float, seed: int, label: str,
                     planner: Planner, loop_judge: Any = None) -> list[dict[str, Any]]:
    """Research every question of the batch together (one engine batch per round; decisions by `loop_judge`,
    research.judge) and make their lines (citation metrics by `judge`, critic.judge)."""
    phrases = list(engine.abstention_phrases)
    loop_judge = loop_judge if loop_judge is not None else make_loop_judge(cfg, reuse=judge)
    runs = make_runs(cfg, batch, planner, phrases)
    reports = loop_reports(runs, engine, loop_judge, cfg, temperature=temperature, top_p=top_p, seed=seed)
    grades = grade_answers(grader, [(ex.question, rep.answer, True, ex.answers) for ex, rep in zip(batch, reports,
                                                                                               strict=True)], phrases)
    summaries = critic_summaries(runs, reports, judge, loop_judge, label, cfg.reward.inferred_weight)
    rows = []
    for ex, run, rep, g, summary in zip(batch, runs, reports, grades, summaries, strict=True):
        row = research_record(ex, run, rep, cfg, phrases, g)
        row["critic"] = summary
        rows.append(row)
    return rows


RESEARCH_MEANS = ("iterations", "requeries", "groundedness_before", "groundedness_after")


def research_summary(rows: Sequence[dict]) -> dict[str, Any] | None:
    """The loop's own figures in an evaluation report, per dataset and macro: mean critic-loop cycles and
    re-queries per question, mean groundedness of first and final attempts, the approved share, coverage gaps
    and query failures per question; and the judges that decided (`oracle`: the gold judge among them). None
    when the rows are not critic-loop predictions."""
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
        out["query_failures_per_question"] = sum(len(x.get("query_failures") or []) for x in reports) / len(reports)
        return out

    per = {ds: stats(reps) for ds, reps in sorted(by_ds.items())}
    keys = [k for k in next(iter(per.values())) if k != "questions"]
    macro = {k: (sum(v[k] for v in per.values() if v[k] is not None) / n if (n := sum(v[k] is not None
                                                                                     for v in per.values())) else None)
             for k in keys}
    judges = sorted({str(x.get("judge") or "") for reps in by_ds.values() for x in reps} - {""})
    oracle = any(bool(x.get("oracle")) for reps in by_ds.values() for x in reps)
    return {"per_dataset": per, "macro": macro, "judges": judges, "oracle": oracle}
