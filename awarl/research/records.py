"""`awarl eval --agent critic_loop`: the critic loop over evaluation questions, as predictions lines that the
single-pass scorer, report and `awarl compare` read unchanged (prediction, outcome, critic summary, the
searches for the coverage-gap list), plus the loop's own record under "research"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awarl.agent.backends.base import question_seed
from awarl.agent.rollout import RolloutEngine
from awarl.choices import PLANNERS
from awarl.config import (
    GenerationConfig,
    MetricsConfig,
    ResearchConfig,
)
from awarl.critic.correctness import AnswerGrader, Grade, answer_outcome, grade_answers, graded_fields
from awarl.critic.gold_judge import compact_evidence
from awarl.critic.schema import Judge
from awarl.data.evidence import gold_evidence
from awarl.data.types import QAExample
from awarl.research.critic import passage_refs
from awarl.research.loop import ResearchRun, run_research
from awarl.research.planner import CacheDir, LoopSettings, Planner
from awarl.research.provenance import provenance
from awarl.research.schema import ResearchReport
from awarl.rewards.citation import CitationJudgement, citation_reward, safe_verify


def make_planner(cfg: LoopSettings, cache_dir: CacheDir = None, *, check: bool = False) -> Planner:
    """The planner of `research.planner` (offline: the dataset's own decomposition, else the offline rules,
    else the question; openai: the LLM planner at research.planner_base_url, checked reachable first when
    `check`, its errors naming the option that set the endpoint): the registered planner of that name."""
    return PLANNERS.load(cfg.research.planner)(cfg, cache_dir, check)


def make_loop_judge(cfg: LoopSettings, cache_dir: CacheDir = None, *, check: bool = False,
                    reuse: Judge | None = None) -> Judge | None:
    """The judge of `research.judge`, which decides the loop (not critic.judge, the citation reward's: see
    the field's description). `reuse`: a judge already built for critic.judge, used when both are the same
    kind (one client, one cache, one set of counters). One behind a service is checked reachable when `check`."""
    from awarl.critic import make_judge
    from awarl.critic.schema import Reachable

    if reuse is not None and getattr(reuse, "name", None) == cfg.research.judge:
        return reuse
    judge = make_judge(cfg.critic.model_copy(update={"judge": cfg.research.judge}), cache_dir)
    if check and cfg.critic.check_endpoint and isinstance(judge, Reachable):
        judge.check_reachable(f"critic-loop judge (research.judge: {cfg.research.judge})",
                              instead="set research.judge to lexical (offline)")
    return judge


def make_runs(r: ResearchConfig, examples: Sequence[Any], planner: Planner, phrases: Sequence[str],
              questions: Sequence[str] | None = None, seed: int | None = None) -> list[ResearchRun]:
    """One run per example (its `question`, or the one given; the example's record feeds the planner). With a
    `seed`, each run samples from its question's own seed (`question_seed` of its dataset and id; a question
    without a record: its text), so a resumed question draws what it would have in an uninterrupted run."""
    questions = questions or [ex.question for ex in examples]
    runs = []
    for q, ex in zip(questions, examples, strict=True):
        run = ResearchRun(q, planner, approve_threshold=r.approve_threshold, max_iterations=r.max_iterations,
                          abstention_phrase=phrases[0], example=ex, requery_draws=r.requery_draws,
                          min_claim_confidence=r.min_claim_confidence, drift_overlap=r.drift_overlap,
                          max_question_chars=r.max_question_chars)
        if seed is not None:
            run.seed = question_seed(seed, str(getattr(ex, "dataset", "") or ""), str(getattr(ex, "id", "") or q))
        runs.append(run)
    return runs


def loop_reports(runs: Sequence[ResearchRun], engine: RolloutEngine, judge: Judge | None, research: ResearchConfig,
                 *, temperature: float, top_p: float, seed: int | None, generation: GenerationConfig | None = None,
                 model_ref: str | None = None) -> list[ResearchReport]:
    """The runs' reports, each with the identities of its index, executor (`model_ref`: the checkpoint given;
    a scripted replay: `generation.script`), judge and planner."""
    ident = provenance(engine, judge, runs[0].planner if runs else None, generation, model_ref)
    return run_research(runs, engine, judge, temperature=temperature, top_p=top_p, seed=seed,
                        requery_temperature=research.requery_temperature, provenance=ident)


def critic_summaries(runs: Sequence[ResearchRun], reports: Sequence[ResearchReport], judge: Judge | None,
                     loop_judge: Judge | None, label: str, inferred_weight: float) -> list[dict | None]:
    """The citation critic's summary of each ANSWERED final answer, in the single-pass line's shape and by the
    same judge (critic.judge), so citation metrics compare across agents; None where the loop abstained (a
    single pass judges only answers too). The loop's own final verdict is reused when the two judges are one
    and it checked the whole answer at once; else critic.judge is asked, in one call."""
    out: list[dict | None] = [None] * len(runs)
    ask = [i for i, (run, rep) in enumerate(zip(runs, reports, strict=True)) if rep.approved and run.final]
    if judge is None or not ask:
        return out
    finals = {i: f[1] for i in ask if (f := runs[i].final) is not None}   # every asked run has one
    fresh = [i for i in ask if judge is not loop_judge or len(runs[i].final_inputs) != 1]
    verdicts = dict(zip(fresh, safe_verify(judge, [finals[i] for i in fresh], "citation judge")[0],
                        strict=True))
    for i in ask:
        final_input = finals[i]
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


def research_record(ex: QAExample, run: ResearchRun, report: ResearchReport, metrics: MetricsConfig,
                    phrases: Sequence[str], grade: Grade | None = None) -> dict[str, Any]:
    """One predictions.jsonl line of the critic loop."""
    outcome = answer_outcome(report.answer, ex.gold_answers, metrics, phrases, valid=True, grade=grade)
    searches = [q for s in report.sub_questions for q in s["searches"]]
    # Every passage the loop retrieved, numbered in order of first retrieval, and the final answer's citations by
    # those numbers: what a single-pass line keeps, so the report's gold-evidence metrics (citation precision and
    # recall, evidence retrieved, reading failures against retrieval gaps) cover the loop too.
    refs = passage_refs([d for s in run.steps for a in s.attempts for d in a.passages])
    number = {p.id: p.number for p in refs}
    cited = [number[p.id] for p in run.final[1].cited if p.id in number] if report.approved and run.final else []
    return {
        "id": ex.id, "dataset": ex.dataset, "question": ex.question, "prediction": report.answer,
        "answers": ex.gold_answers, **({} if ex.answerable else {"answerable": False}),
        "valid": True, "outcome": outcome.value, **graded_fields(grade),
        "gold_evidence": compact_evidence(gold_evidence(ex)),
        "trajectory": {"searches": searches, "citations": cited,
                       "passages": [{"number": p.number, "id": p.id, "title": p.title} for p in refs],
                       "num_turns": sum(s["attempts"] for s in report.sub_questions)},
        "research": report.model_dump(mode="json"),
    }


def critic_loop_rows(engine: RolloutEngine, judge: Judge | None, grader: AnswerGrader | None,
                     batch: Sequence[QAExample], cfg: LoopSettings, *, temperature: float, top_p: float, seed: int,
                     label: str, planner: Planner, loop_judge: Judge | None = None) -> list[dict[str, Any]]:
    """Research every question of the batch together (one engine batch per round; decisions by `loop_judge`,
    research.judge) and make their lines (citation metrics by `judge`, critic.judge)."""
    phrases = list(engine.abstention_phrases)
    loop_judge = loop_judge if loop_judge is not None else make_loop_judge(cfg, reuse=judge)
    runs = make_runs(cfg.research, batch, planner, phrases, seed=seed)
    reports = loop_reports(runs, engine, loop_judge, cfg.research, temperature=temperature, top_p=top_p, seed=seed,
                           generation=getattr(cfg, "generation", None))
    grades = grade_answers(grader, [(ex.question, rep.answer, True, ex.gold_answers) for ex, rep in zip(batch, reports,
                                                                                               strict=True)], phrases)
    summaries = critic_summaries(runs, reports, judge, loop_judge, label, cfg.reward.inferred_weight)
    rows = []
    for ex, run, rep, g, summary in zip(batch, runs, reports, grades, summaries, strict=True):
        row = research_record(ex, run, rep, cfg.metrics, phrases, g)
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
    macro: dict[str, float | None] = {}
    for k in keys:
        vals = [x for v in per.values() if (x := v[k]) is not None]
        macro[k] = sum(vals) / len(vals) if vals else None
    judges = sorted({str(x.get("judge") or "") for reps in by_ds.values() for x in reps} - {""})
    oracle = any(bool(x.get("oracle")) for reps in by_ds.values() for x in reps)
    return {"per_dataset": per, "macro": macro, "judges": judges, "oracle": oracle}
