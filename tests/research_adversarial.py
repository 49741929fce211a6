"""Issue 43's adversarial set: one case per failure class of the issue's "Found" list, each run through the
REAL critic loop (ResearchRun + run_research, the real rollout engine and BM25 retrieval; a scripted executor
where the case needs a given answer, the shipped tiny executor for the Ninth Gate case) and checked for the
behaviour the issue asks for. Constructed passages where a case needs a contradiction no shipped passage has;
real shipped questions and passages (the closed corpus) wherever one shows the failure.

Every case returns None when the loop behaves, else the reason it does not. The same cases run under pytest
(tests/test_research_adversarial.py: each must pass) and as a script, which counts the failures per class
against whatever `awarl` is importable (the branch, or main's code for the "before" column):

    python tests/research_adversarial.py                        # this checkout
    cd /path/to/main-copy && PYTHONPATH=$PWD python /path/to/tests/research_adversarial.py   # another version

The checks read the report as JSON (`model_dump`) and the printed markdown, so they run unchanged against an
older version (a section it lacks is a failure of that case, not an error). The LLM judge is a FAKE
OpenAI-compatible endpoint on loopback (no LLM runs here), answering what a judge model would.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from research_kit import DOCS, FixedPlanner, research  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TINY_EXECUTOR = REPO / "data" / "research" / "tiny-executor"

# Constructed passages for contradictions no shipped passage has (added to issue 24's constructed cases).
ADV_DOCS = DOCS + [
    ("Cy Vance", "Cy Vance is a painter. Cy Vance worked in Leeds for a decade. Cy Vance was born in Oslo."),
    ("Zed Tower", "Mia Holt did not design the Zed Tower. The Zed Tower was designed by Rex Dunn."),
    ("Qux Ltd", "Qux Ltd was founded in 1999. Other records say Qux Ltd was founded in 2001."),
    ("Foo Trail park", "The park says the Foo Trail is 5 km long."),
    ("Foo Trail guide", "The guide says the Foo Trail is 5 miles long."),
    ("Bex Census", "The census puts the Bex market size at $5,000 million."),
    ("Bex Survey", "The survey puts the Bex market size at $5 billion."),
    ("Vel Corp", "Vel Corp was founded on March 3, 1999 in Springfield."),
    ("Kop Peak", "The Kop Peak trail climbs 5 km above the valley floor."),
    ("Kop Peak registry", "The registry says the Kop Peak trail climbs 5000 m above the valley floor."),
    ("Qat Club", "Qat Club was founded on 3 March 1999."),
    ("Lin Orr", "Reports that Lin Orr was born in Leeds are false. Lin Orr's birthplace is Oslo."),
    ("Vox Film", "Vox Film was directed by Lia Moss."),
    ("Vox Film review", "The review credits Tom Reed as the director of Vox Film."),
    ("Pax Hall", "Pax Hall opened its doors in the spring of 1999."),
    ("Pax Hall registry", "According to the registry, the hall named Pax first welcomed visitors two years later "
                          "than is usually said."),
]

CLASSES = {
    "contradicted": "contradicted answers approved",
    "conflict": "conflicts missed",
    "false_conflict": "false conflicts and broken claims",
    "false_gap": "false coverage gaps",
    "omission": "silent omissions",
    "report": "the report",
}


@dataclass
class Case:
    id: str
    cls: str
    what: str
    fn: Callable[[Any], str | None]


CASES: list[Case] = []


def case(cid: str, cls: str, what: str) -> Callable:
    def add(fn: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
        CASES.append(Case(cid, cls, what, fn))
        return fn
    return add


class Context:
    """What the cases share, built lazily: the tiny executor's real tokenizer, a BM25 index over ADV_DOCS, the
    shipped closed corpus's BM25 index (given, or built under `root`)."""

    def __init__(self, root: Path, shipped_index: Path | None = None) -> None:
        self.root, self._shipped, self._tok, self._adv, self._shipped_index = root, shipped_index, None, None, None

    @property
    def tok(self) -> Any:
        if self._tok is None:
            from transformers import AutoTokenizer

            self._tok = AutoTokenizer.from_pretrained(TINY_EXECUTOR)
        return self._tok

    @property
    def adv(self) -> Any:
        if self._adv is None:
            from awarl.data.corpus import passage_contents, passage_id
            from awarl.io import write_jsonl
            from awarl.retrieval import build_index, load_index

            root = self.root / "adv"
            if not (root / "bm25" / "index_meta.json").exists():
                write_jsonl(root / "corpus.jsonl", [{"id": passage_id(t, x), "contents": passage_contents(t, x)}
                                                    for t, x in ADV_DOCS])
                build_index(root / "corpus.jsonl", "bm25", root / "bm25", show_progress=False)
            self._adv = load_index(root / "bm25")
        return self._adv

    @property
    def shipped(self) -> Any:
        if self._shipped_index is None:
            from awarl.retrieval import load_index

            path = self._shipped
            if path is None:
                from awarl.data.corpus import shipped_closed_corpus
                from awarl.retrieval import build_index

                path = self.root / "shipped" / "bm25"
                if not (path / "index_meta.json").exists():
                    corpus = shipped_closed_corpus(self.root / "shipped" / "corpus.jsonl")
                    build_index(corpus, "bm25", path, show_progress=False)
            self._shipped_index = load_index(path)
        return self._shipped_index


def _engine(ctx: Context, script: dict, retriever: Any = None, **over: Any) -> tuple[Any, Any]:
    from research_kit import engine

    return engine(ctx.tok, retriever if retriever is not None else ctx.adv, script, **over)


def _lexical(cfg: Any) -> Any:
    from awarl.critic.lexical_judge import LexicalJudge

    return LexicalJudge(cfg.critic)


def _loop(ctx: Context, question: str, steps: list[str] | None, script: dict, *, reduce: Any = None,
          retriever: Any = None, judge: Any = None, planner: Any = None, **over: Any) -> tuple[dict, Any]:
    """(report as JSON, run) of one question through the real loop (lexical judge unless one is given)."""
    cfg, eng = _engine(ctx, script, retriever, **over)
    planner = planner or FixedPlanner(steps or [question], reduce)
    report, run = research(question, planner, eng, judge if judge is not None else _lexical(cfg), cfg)
    return report.model_dump(mode="json"), (report, run)


def _turns(search: str, answer: str, cite: str = "1") -> list[str]:
    return [f"<search> {search} </search>", f"<cite> {cite} </cite> <answer> {answer} </answer>"]


def _grounded(rep: dict, needle: str) -> list[dict]:
    return [f for f in rep["findings"] if needle in f["claim"] and f["status"] == "grounded"]


def _approved_wrongly(rep: dict, what: str) -> str | None:
    if rep["approved"]:
        return f"approved {rep['answer']!r} ({what}), confidence {rep['confidence']:.2f}"
    return None


def _conflict_said(rep: dict, *values: str) -> bool:
    """Whether the report names a conflict between the values (a typed conflict, or a flag)."""
    said = json.dumps(rep.get("conflicts", [])) + " ".join(rep["flags"])
    return all(v in said for v in values) and ("conflict" in said.lower())


@contextlib.contextmanager
def _llm_judge(verdict_for: Callable[[dict, list[str]], dict], tmp: Path) -> Any:
    """A FAKE OpenAI-compatible judge endpoint on loopback and the OpenAIJudge pointed at it."""
    from conftest import serve_app
    from research_kit import fake_judge_app

    from awarl.config import CriticConfig
    from awarl.critic import make_judge

    with serve_app(fake_judge_app(verdict_for)) as url:
        yield make_judge(CriticConfig(judge="openai", base_url=f"{url}/v1", model="judge-llm", retries=0,
                                      cache_dir=str(tmp / "cache")))


def _claim(claim: str, status: str, ids: list[str], confidence: float = 0.9) -> dict:
    return {"claim": claim, "status": status, "source_ids": ids, "confidence": confidence}


# ------------------------------------------------------------------------------ contradicted answers approved
@case("long-claim-wrong-city", "contradicted", "a long claim naming another city than its only source")
def _(ctx: Context) -> str | None:
    q = "Where was Ann Ray born?"
    rep, _ = _loop(ctx, q, None, {q: _turns("Ann Ray born", "Ann Ray was born on 3 May 1985 in Oslo.")},
                   **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "the passage says Leeds") or (
        "the Oslo claim is grounded" if _grounded(rep, "Oslo") else None)


@case("long-claim-wrong-amount", "contradicted", "a long claim with another amount than its only source")
def _(ctx: Context) -> str | None:
    q = "How big is the Acme market according to the 2023 industry survey?"
    rep, _ = _loop(ctx, q, None, {q: _turns("Acme market size 2023 industry survey",
                                            "The 2023 industry survey puts the Acme market size at $7B.")},
                   **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "the survey says $5B") or ("the $7B claim is grounded" if _grounded(rep, "$7B")
                                                             else None)


@case("short-answer-other-relation", "contradicted", "a short answer the passage gives in another relation "
      "(worked there; the question asks where the person was born)")
def _(ctx: Context) -> str | None:
    q = "Where was Cy Vance born?"
    rep, _ = _loop(ctx, q, None, {q: _turns("Cy Vance", "Leeds")}, **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "Cy Vance worked in Leeds; was born in Oslo")


@case("short-answer-other-relation-shipped", "contradicted", "the same on a shipped passage: Christian "
      "Ackermann was born in Königsberg and worked in Riga")
def _(ctx: Context) -> str | None:
    q = "Where was Christian Ackermann born?"
    rep, (_, run) = _loop(ctx, q, None, {q: _turns("Christian Ackermann", "Riga")}, retriever=ctx.shipped,
                          **{"retrieval.topk": 1})
    if run.steps[0].attempts[0].passages[0]["title"] != "Christian Ackermann":
        return "setup: BM25's top passage is not Christian Ackermann's"
    return _approved_wrongly(rep, "the passage says he was born in Königsberg")


@case("short-answer-other-clause-shipped", "contradicted", "a shipped sentence with both relations: Jerome "
      "Storm 'was born in Denver, Colorado, and died in Desert Hot Springs'; asked where he died, 'Denver'")
def _(ctx: Context) -> str | None:
    q = "Where did Jerome Storm die?"
    rep, (_, run) = _loop(ctx, q, None, {q: _turns("Jerome Storm", "Denver")}, retriever=ctx.shipped,
                          **{"retrieval.topk": 1})
    if run.steps[0].attempts[0].passages[0]["title"] != "Jerome Storm":
        return "setup: BM25's top passage is not Jerome Storm's"
    return _approved_wrongly(rep, "he died in Desert Hot Springs")


@case("negated-short-answer", "contradicted", "a passage saying 'X did not design it' supporting 'X'")
def _(ctx: Context) -> str | None:
    q = "Who designed the Zed Tower?"
    rep, _ = _loop(ctx, q, None, {q: _turns("Zed Tower design", "Mia Holt")}, **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "the passage says Mia Holt did NOT design it")


@case("negated-long-claim", "contradicted", "the same as a long claim")
def _(ctx: Context) -> str | None:
    q = "Who designed the Zed Tower?"
    rep, _ = _loop(ctx, q, None, {q: _turns("Zed Tower design", "Mia Holt designed the Zed Tower.")},
                   **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "the passage says Mia Holt did NOT design it")


def _pick(entities: list[str], order: str) -> Any:
    from awarl.research.schema import Reduce

    return Reduce(kind="pick", parts=[0, 1], entities=entities, value="date", order=order)


@case("comparison-names-the-wrong-entity", "contradicted", "both steps grounded, the synthesis picks the later "
      "birth date for 'born earlier' (an LLM planner's mistake)")
def _(ctx: Context) -> str | None:
    q = "Who was born earlier, Ann Ray or Bo Tell?"
    steps = ["When was Ann Ray born?", "When was Bo Tell born?"]
    script = {steps[0]: _turns("Ann Ray born", "3 May 1985"), steps[1]: _turns("Bo Tell born", "9 July 1990")}
    rep, _ = _loop(ctx, q, steps, script, reduce=_pick(["Ann Ray", "Bo Tell"], "max"), **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "Ann Ray (1985) was born earlier than Bo Tell (1990)")


@case("comparison-names-the-wrong-entity-shipped", "contradicted", "the same on a shipped HotpotQA comparison "
      "(Iain Pears 1955, Richard Llewellyn 1906; 'Who was born first?')")
def _(ctx: Context) -> str | None:
    q = "Who was born first Iain Pears or Richard Llewellyn ?"
    steps = ["When was Iain Pears born?", "When was Richard Llewellyn born?"]
    script = {steps[0]: _turns("Iain Pears", "1 January 1955"), steps[1]: _turns("Richard Llewellyn", "8 December 1906")}
    rep, _ = _loop(ctx, q, steps, script, reduce=_pick(["Iain Pears", "Richard Llewellyn"], "max"),
                   retriever=ctx.shipped, **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "Richard Llewellyn (1906) was born first")


# ------------------------------------------------------------------------------------------ conflicts missed
ZED_Q = "When was Zed Corp founded?"


@case("two-sources-of-one-step", "conflict", "two retrieved sources of one step give 1999 and 2001; the answer "
      "'1999'")
def _(ctx: Context) -> str | None:
    rep, _ = _loop(ctx, ZED_Q, None, {ZED_Q: _turns("Zed Corp founded", "1999")}, **{"retrieval.topk": 2})
    return _approved_wrongly(rep, "the registry says 2001") or (
        None if _conflict_said(rep, "1999", "2001") else "the conflict is not reported")


@case("one-passage-both-years", "conflict", "one passage states both years")
def _(ctx: Context) -> str | None:
    q = "When was Qux Ltd founded?"
    rep, _ = _loop(ctx, q, None, {q: _turns("Qux Ltd founded", "1999")}, **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "the passage also says 2001") or (
        None if _conflict_said(rep, "1999", "2001") else "the conflict is not reported")


@case("llm-flag-worded-freely", "conflict", "an LLM judge's flag worded 'contradict each other' (no typed "
      "conflict)")
def _(ctx: Context) -> str | None:
    def verdict(user: dict, ids: list[str]) -> dict:
        return {"verified_claims": [_claim("Zed Corp was founded in 1999", "grounded", [ids[0]])],
                "overall_groundedness": 1.0, "flags": ["Passages 1 and 2 contradict each other on the founding year"]}

    with _llm_judge(verdict, ctx.root / "llm-free") as judge:
        rep, _ = _loop(ctx, ZED_Q, None, {ZED_Q: _turns("Zed Corp founded", "1999")}, judge=judge,
                       **{"retrieval.topk": 2})
    return _approved_wrongly(rep, "the judge said the passages contradict each other")


@case("llm-typed-conflict", "conflict", "an LLM judge reporting the conflict in the verdict's typed field only "
      "(a paraphrase no offline reader sees)")
def _(ctx: Context) -> str | None:
    q = "When did Pax Hall open?"

    def verdict(user: dict, ids: list[str]) -> dict:
        return {"verified_claims": [_claim("Pax Hall opened in 1999", "grounded", [ids[0]])],
                "overall_groundedness": 1.0, "flags": [],
                "conflicts": [{"claim": "Pax Hall opened in 1999", "values": ["1999", "2001"], "source_ids": ids[:2]}]}

    with _llm_judge(verdict, ctx.root / "llm-typed") as judge:
        rep, _ = _loop(ctx, q, None, {q: _turns("Pax Hall opened", "1999")}, judge=judge, **{"retrieval.topk": 2})
    return _approved_wrongly(rep, "the judge reported a conflict")


TRAIL_1, TRAIL_2 = "How long is the Foo Trail according to the park?", "How long is the Foo Trail according to the guide?"


@case("km-vs-miles-across-steps", "conflict", "5 km and 5 miles from two sub-questions")
def _(ctx: Context) -> str | None:
    script = {TRAIL_1: _turns("Foo Trail park", "5 km"), TRAIL_2: _turns("Foo Trail guide", "5 miles")}
    rep, _ = _loop(ctx, "How long is the Foo Trail?", [TRAIL_1, TRAIL_2], script, **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "5 km is not 5 miles") or (
        None if _conflict_said(rep, "5 km", "5 miles") else "the conflict is not reported")


@case("km-vs-miles-within-a-step", "conflict", "5 km answered over two sources of one step, one saying 5 miles")
def _(ctx: Context) -> str | None:
    q = "How long is the Foo Trail?"
    rep, _ = _loop(ctx, q, None, {q: _turns("Foo Trail long", "5 km")}, **{"retrieval.topk": 2})
    return _approved_wrongly(rep, "the guide says 5 miles") or (
        None if _conflict_said(rep, "5 km", "5 miles") else "the conflict is not reported")


@case("bare-years-paraphrased-steps", "conflict", "bare values from paraphrased sub-questions ('founded' / "
      "'established')")
def _(ctx: Context) -> str | None:
    s1, s2 = ZED_Q, "In what year was Zed Corp established, according to the registry?"
    script = {s1: _turns("Zed Corp founded Springfield", "1999"), s2: _turns("Zed Corp registry", "2001")}
    rep, _ = _loop(ctx, ZED_Q, [s1, s2], script, **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "1999 vs 2001") or (
        None if _conflict_said(rep, "1999", "2001") else "the conflict is not reported")


@case("bare-names-paraphrased-steps", "conflict", "two directors of one film from paraphrased sub-questions")
def _(ctx: Context) -> str | None:
    s1, s2 = "Who directed Vox Film?", "Which filmmaker was the director of Vox Film, according to the review?"
    script = {s1: _turns("Vox Film directed", "Lia Moss"), s2: _turns("Vox Film review director", "Tom Reed")}
    rep, _ = _loop(ctx, s1, [s1, s2], script, **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "Lia Moss vs Tom Reed") or (
        None if _conflict_said(rep, "Lia Moss", "Tom Reed") else "the conflict is not reported")


@case("long-claims-across-steps", "conflict", "issue 24's $5B / $3B across sub-questions (control: fixed then)")
def _(ctx: Context) -> str | None:
    s1 = "What is the Acme market size according to the 2023 survey?"
    s2 = "What is the Acme market size according to the analyst report?"
    script = {s1: _turns("Acme market size survey 2023", "Acme market size is $5B"),
              s2: _turns("Acme market size analyst report", "Acme market size is $3B")}
    rep, _ = _loop(ctx, "How big is the Acme market?", [s1, s2], script, **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "$5B vs $3B") or (None if _conflict_said(rep, "$5B", "$3B")
                                                    else "the conflict is not reported")


# ------------------------------------------------------------------------- false conflicts and broken claims
def _fragments(rep: dict, whole: str) -> list[str]:
    """Findings of the answer's claims that hold a piece of `whole` but not all of it (a split value)."""
    parts = [p for p in whole.replace(",", " ").split() if p]
    return [f["claim"] for f in rep["findings"] if f["judge"] != "planner (reduce)"
            and any(p in f["claim"] for p in parts) and whole not in f["claim"]]


@case("amount-split-at-its-comma", "false_conflict", "'$5,000 million' split at the comma")
def _(ctx: Context) -> str | None:
    q = "How big is the Bex market according to the census?"
    answer = "The census puts the Bex market size at $5,000 million."
    rep, _ = _loop(ctx, q, None, {q: _turns("Bex market census", answer)}, **{"retrieval.topk": 1})
    broken = _fragments(rep, "$5,000 million")
    return (f"split into {broken}" if broken else None) or (None if rep["approved"] else
                                                              f"a consistent answer not approved: {rep['flags']}")


@case("date-split-at-its-comma", "false_conflict", "'March 3, 1999' split at the comma")
def _(ctx: Context) -> str | None:
    q = "When was Vel Corp founded?"
    answer = "Vel Corp was founded on March 3, 1999 in Springfield."
    rep, _ = _loop(ctx, q, None, {q: _turns("Vel Corp founded", answer)}, **{"retrieval.topk": 1})
    broken = _fragments(rep, "March 3, 1999")
    return (f"split into {broken}" if broken else None) or (None if rep["approved"] else
                                                              f"a consistent answer not approved: {rep['flags']}")


@case("date-split-shipped", "false_conflict", "a shipped passage's 'November 11, 1890' (Jerome Storm)")
def _(ctx: Context) -> str | None:
    q = "When was Jerome Storm born?"
    answer = "Jerome Storm was born on November 11, 1890."
    rep, _ = _loop(ctx, q, None, {q: _turns("Jerome Storm", answer)}, retriever=ctx.shipped, **{"retrieval.topk": 1})
    broken = _fragments(rep, "November 11, 1890")
    return (f"split into {broken}" if broken else None) or (None if rep["approved"] else
                                                              f"a consistent answer not approved: {rep['flags']}")


@case("place-name-split-shipped", "false_conflict", "'Mountrail County, North Dakota' split at the comma "
      "(shipped Van Hook Township passage)")
def _(ctx: Context) -> str | None:
    q = "Where is Van Hook Township?"
    answer = "Van Hook Township is a township in Mountrail County, North Dakota."
    rep, _ = _loop(ctx, q, None, {q: _turns("Van Hook Township", answer)}, retriever=ctx.shipped,
                   **{"retrieval.topk": 1})
    broken = _fragments(rep, "Mountrail County, North Dakota")
    return (f"split into {broken}" if broken else None) or (None if rep["approved"] else
                                                              f"a consistent answer not approved: {rep['flags']}")


@case("metres-read-as-millions", "false_conflict", "'5000 m' (metres) against '5 km' across steps")
def _(ctx: Context) -> str | None:
    s1, s2 = "How high does the Kop Peak trail climb?", "How high does the Kop Peak trail climb, says the registry?"
    script = {s1: _turns("Kop Peak trail climbs", "The Kop Peak trail climbs 5 km above the valley floor."),
              s2: _turns("Kop Peak registry", "The Kop Peak trail climbs 5000 m above the valley floor.")}
    rep, _ = _loop(ctx, s1, [s1, s2], script, **{"retrieval.topk": 1})
    if any("conflict" in f.lower() for f in rep["flags"]) or rep.get("conflicts"):
        return f"a false conflict: {[f for f in rep['flags'] if 'conflict' in f.lower()] or rep.get('conflicts')}"
    return None if rep["approved"] else f"a consistent answer not approved: {rep['coverage_gaps']}"


@case("month-precision-is-not-a-conflict", "false_conflict", "'March 1999' against '3 March 1999'")
def _(ctx: Context) -> str | None:
    s1, s2 = "When was Qat Club founded?", "In what month was Qat Club founded?"
    script = {s1: _turns("Qat Club founded", "3 March 1999"), s2: _turns("Qat Club founded month", "March 1999")}
    rep, _ = _loop(ctx, s1, [s1, s2], script, **{"retrieval.topk": 1})
    if any("conflict" in f.lower() for f in rep["flags"]) or rep.get("conflicts"):
        return f"a false conflict: {[f for f in rep['flags'] if 'conflict' in f.lower()] or rep.get('conflicts')}"
    return None if rep["approved"] else f"a consistent answer not approved: {rep['coverage_gaps']}"


@case("millions-and-billions-agree", "false_conflict", "'$5,000 million' against '$5 billion' (control)")
def _(ctx: Context) -> str | None:
    s1, s2 = "How big is the Bex market according to the census?", "How big is the Bex market according to the survey?"
    script = {s1: _turns("Bex market census", "$5,000 million"), s2: _turns("Bex market survey", "$5 billion")}
    rep, _ = _loop(ctx, "How big is the Bex market?", [s1, s2], script, **{"retrieval.topk": 1})
    if any("conflict" in f.lower() for f in rep["flags"]) or rep.get("conflicts"):
        return f"a false conflict: {[f for f in rep['flags'] if 'conflict' in f.lower()] or rep.get('conflicts')}"
    return None if rep["approved"] else f"a consistent answer not approved: {rep['coverage_gaps']}"


# --------------------------------------------------------------------------------------- false coverage gaps
def _named(rep: dict, text: str) -> list[str]:
    return [g for g in rep["coverage_gaps"] if text in g]


@case("off-topic-searches-are-not-a-gap", "false_gap", "re-queries that differ as strings but are off topic, "
      "while the sub-question's own search finds the answer")
def _(ctx: Context) -> str | None:
    q = "When was Qat Club founded?"
    script = {q: _turns("weather in Paris", "Atlantis"),
              q + " (Not supported": _turns("football scores", "Atlantis"),
              '"weather in Paris"; "football scores"': _turns("cooking pasta", "Atlantis")}
    rep, _ = _loop(ctx, q, None, script, **{"retrieval.topk": 1})
    return f"reported as a coverage gap: {rep['coverage_gaps']}" if _named(rep, q) else None


@case("ninth-gate-tiny-executor", "false_gap", "the shipped tiny executor on 'When did The Ninth Gate come out?' "
      "(BM25's top passage for it states 1999)")
def _(ctx: Context) -> str | None:
    from awarl.agent.rollout import RolloutEngine
    from awarl.config import load_config
    from awarl.models.loading import load_tokenizer

    q = "When did The Ninth Gate come out?"
    cfg = load_config(None, ["retrieval.topk=1"])
    eng = RolloutEngine.from_config(cfg, load_tokenizer(str(TINY_EXECUTOR)), ctx.shipped, model=str(TINY_EXECUTOR))
    report, _ = research(q, FixedPlanner([q]), eng, _lexical(cfg), cfg)
    rep = report.model_dump(mode="json")
    if ctx.shipped.search([q], 1)[0][0].title != "The Ninth Gate":
        return "setup: BM25's top passage is not The Ninth Gate's"
    return f"reported as a coverage gap: {rep['coverage_gaps']}" if _named(rep, q) else None


@case("judge-outage-is-not-a-gap", "false_gap", "the LLM judge's endpoint down: its failure is said, not a gap")
def _(ctx: Context) -> str | None:
    from conftest import free_port

    from awarl.config import CriticConfig
    from awarl.critic import make_judge

    q = "When was Qat Club founded?"
    judge = make_judge(CriticConfig(judge="openai", base_url=f"http://127.0.0.1:{free_port()}/v1", model="m",
                                    retries=0, timeout_s=2, cache_dir=str(ctx.root / "dead")))
    rep, _ = _loop(ctx, q, None, {q: _turns("Qat Club founded", "3 March 1999"),
                                  q + " (Not supported": _turns("Qat Club history", "3 March 1999")},
                   judge=judge, **{"retrieval.topk": 1})
    if rep["coverage_gaps"]:
        return f"reported as a coverage gap: {rep['coverage_gaps']}"
    said = json.dumps(rep.get("failures", []))
    return None if "judge" in said else "the judge's failure is not in the report"


@case("executor-failure-is-not-a-gap", "false_gap", "an executor that never gives a valid answer: its failure "
      "is said, not a gap")
def _(ctx: Context) -> str | None:
    q = "When was Qat Club founded?"
    script = {q: ["<search> Qat Club </search>", "it was founded then, I think"],
              q + " (Not supported": ["<search> Qat Club founding </search>", "maybe in spring"]}
    rep, _ = _loop(ctx, q, None, script, **{"retrieval.topk": 1})
    if _named(rep, q):
        return f"reported as a coverage gap: {rep['coverage_gaps']}"
    said = json.dumps(rep.get("failures", []))
    return None if "executor" in said else "the executor's failure is not in the report"


@case("a-real-gap-names-what-was-searched", "false_gap", "a real gap is stated only after the sub-question's own "
      "terms were searched, and names that search")
def _(ctx: Context) -> str | None:
    q = "How many people live in the lost city Plato described?"
    script = {q: _turns("weather in Paris", "Atlantis"),
              q + " (Not supported": _turns("football scores", "Atlantis"),
              '"weather in Paris"; "football scores"': _turns("cooking pasta", "Atlantis")}
    rep, _ = _loop(ctx, q, None, script, **{"retrieval.topk": 1})
    gaps = _named(rep, q)
    if not gaps:
        return f"no coverage gap for a question the sources cannot answer: {rep['coverage_gaps']} / " \
               f"{rep['query_failures']}"
    return None if any(f"searched for the sub-question itself ({q!r}" in g or f"'{q}'" in g.split(": ", 1)[1]
                       for g in gaps) else f"the gap does not name the sub-question's own search: {gaps}"


# ----------------------------------------------------------------------------------------- silent omissions
@case("judge-omits-a-claim", "omission", "an LLM judge leaves one claim of a two-claim answer out of its verdict")
def _(ctx: Context) -> str | None:
    q = "What do we know about Foo?"
    answer = "Foo was born in Springfield. Foo won the Nobel Prize in 1999."

    def verdict(user: dict, ids: list[str]) -> dict:
        return {"verified_claims": [_claim("Foo was born in Springfield", "grounded", [ids[0]])],
                "overall_groundedness": 1.0, "flags": []}

    with _llm_judge(verdict, ctx.root / "omit") as judge:
        rep, _ = _loop(ctx, q, None, {q: _turns("Foo", answer)}, judge=judge, **{"retrieval.topk": 1})
    nobel = [f for f in rep["findings"] if "Nobel" in f["claim"]]
    if rep["approved"]:
        return f"approved with the Nobel claim unverified (confidence {rep['confidence']:.2f})"
    return None if nobel and all(f["status"] != "grounded" for f in nobel) else "the omitted claim has no finding"


@case("judge-omits-the-answer", "omission", "an LLM judge's verdict on 'Leeds' whose only claim is about "
      "something else")
def _(ctx: Context) -> str | None:
    q = "Where was Ann Ray born?"

    def verdict(user: dict, ids: list[str]) -> dict:
        return {"verified_claims": [_claim("Ann Ray is a tennis player", "grounded", [ids[0]])],
                "overall_groundedness": 1.0, "flags": []}

    with _llm_judge(verdict, ctx.root / "omit-answer") as judge:
        rep, _ = _loop(ctx, q, None, {q: _turns("Ann Ray born", "Leeds")}, judge=judge, **{"retrieval.topk": 1})
    return _approved_wrongly(rep, "the answer itself was never verified")


@case("citation-of-a-passage-that-does-not-exist", "omission", "the executor cites [1] and [7]; only one "
      "passage was shown")
def _(ctx: Context) -> str | None:
    q = "Where was Ann Ray born?"
    rep, _ = _loop(ctx, q, None, {q: _turns("Ann Ray born", "Leeds", cite="1, 7")}, **{"retrieval.topk": 1})
    return None if any("7" in f and "cite" in f.lower() for f in rep["flags"]) else \
        f"citation [7] dropped silently (flags: {rep['flags']})"


@case("only-citation-does-not-exist", "omission", "the executor cites only [4]; one passage was shown")
def _(ctx: Context) -> str | None:
    q = "Where was Ann Ray born?"
    rep, _ = _loop(ctx, q, None, {q: _turns("Ann Ray born", "Leeds", cite="4")}, **{"retrieval.topk": 1})
    return None if any("[4]" in f or " 4 " in f for f in rep["flags"] if "cite" in f.lower()) else \
        f"citation [4] dropped silently (flags: {rep['flags']})"


# ----------------------------------------------------------------------------------------------- the report
@case("confidence-of-an-abstention", "report", "an abstained report (the parts share no answer) is not 1.00")
def _(ctx: Context) -> str | None:
    from awarl.research.schema import Reduce

    s1, s2 = "Where was Ann Ray born?", "Where was Bo Tell born?"
    script = {s1: _turns("Ann Ray born", "Leeds"), s2: _turns("Bo Tell born", "Oslo")}
    rep, _ = _loop(ctx, "Where were Ann Ray and Bo Tell both born?", [s1, s2], script,
                   reduce=Reduce(kind="common", parts=[0, 1]), **{"retrieval.topk": 1})
    if rep["approved"]:
        return "setup: approved"
    return None if rep["confidence"] < 0.5 else f"abstained with confidence {rep['confidence']:.2f}"


@case("confidence-of-a-conflict", "report", "a report abstaining on conflicting values is not 1.00")
def _(ctx: Context) -> str | None:
    s1 = "What is the Acme market size according to the 2023 survey?"
    s2 = "What is the Acme market size according to the analyst report?"
    script = {s1: _turns("Acme market size survey 2023", "Acme market size is $5B"),
              s2: _turns("Acme market size analyst report", "Acme market size is $3B")}
    rep, _ = _loop(ctx, "How big is the Acme market?", [s1, s2], script, **{"retrieval.topk": 1})
    if rep["approved"]:
        return "setup: approved"
    return None if rep["confidence"] < 0.5 else f"conflicting report with confidence {rep['confidence']:.2f}"


def _comparison(ctx: Context) -> tuple[dict, Any]:
    from awarl.research.planner import DecompositionPlanner

    q = "Who was born earlier, Ann Ray or Bo Tell?"
    script = {"When was Ann Ray born?": _turns("Ann Ray born", "3 May 1985"),
              "When was Bo Tell born?": _turns("Bo Tell born", "9 July 1990")}
    return _loop(ctx, q, None, script, planner=DecompositionPlanner(), **{"retrieval.topk": 1})


@case("confidence-of-a-supported-answer", "report", "a fully supported comparison is 1.00, not 0.75")
def _(ctx: Context) -> str | None:
    rep, _ = _comparison(ctx)
    if not rep["approved"] or rep["answer"] != "Ann Ray":
        return f"setup: {rep['answer']!r} approved={rep['approved']}"
    return None if rep["confidence"] == 1.0 else f"fully supported with confidence {rep['confidence']:.2f}"


@case("evidence-chain-persisted", "report", "each finding's supporting passage text or span offsets, the index "
      "and the model identity are in the report")
def _(ctx: Context) -> str | None:
    rep, _ = _comparison(ctx)
    prov = rep.get("provenance") or {}
    if not (prov.get("index") or {}).get("corpus_sha256"):
        return "no index identity in the report"
    if not prov.get("executor") or not prov.get("judge"):
        return "no executor or judge identity in the report"
    texts = {p["id"]: p["text"] for p in rep.get("passages", [])}
    for f in rep["findings"]:
        for quote in f["quotes"]:
            text = texts.get(quote["passage_id"])
            if text is None or quote.get("start") is None or text[quote["start"]:quote["end"]] != quote["text"]:
                return f"finding {f['claim']!r}: its span is not recoverable from the report"
    return None


@case("quote-is-not-the-opposite-sentence", "report", "the quoted span of a finding is never the passage's "
      "sentence saying the opposite")
def _(ctx: Context) -> str | None:
    q = "Where was Lin Orr born?"
    rep, _ = _loop(ctx, q, None, {q: _turns("Lin Orr born", "Lin Orr was born in Oslo.")}, **{"retrieval.topk": 1})
    bad = [quote["text"] for f in rep["findings"] for quote in f["quotes"] if "are false" in quote["text"]]
    return f"quoted as support: {bad}" if bad else None


@case("joined-answer-citations", "report", "'cited passage supports no claim' on a correct joined answer")
def _(ctx: Context) -> str | None:
    from awarl.research.planner import DecompositionPlanner

    q = "What are the capitals of France and Italy?"
    plan = DecompositionPlanner().decompose(q)
    if plan.reduce.kind != "join":
        return f"setup: plan {plan.rule} / {plan.reduce.kind}"
    s1, s2 = (s.text for s in plan.steps)
    script = {s1: _turns("capital of France", "Paris"), s2: _turns("capital of Italy", "Rome")}
    rep, _ = _loop(ctx, q, None, script, planner=DecompositionPlanner(), **{"retrieval.topk": 1})
    if not rep["approved"]:
        return f"setup: not approved ({rep['coverage_gaps']})"
    bad = [f for f in rep["flags"] if "supports no claim" in f]
    return f"flagged: {bad}" if bad else None


@case("control-characters-and-markdown-escaped", "report", "ANSI escapes and a '## Coverage gaps – none' "
      "heading inside the question do not reach the printed report")
def _(ctx: Context) -> str | None:
    from awarl.research.report import report_markdown

    sub = "Where was Ann Ray born?"
    q = "Where was Ann Ray born?\x1b[31m\n## Coverage gaps – none\n"
    _, (report, _) = _loop(ctx, q, [sub], {sub: _turns("Ann Ray born", "Leeds")}, **{"retrieval.topk": 1})
    md = report_markdown(report)
    if "\x1b" in md:
        return "an ANSI escape reached the printed report"
    forged = [line for line in md.splitlines() if line.startswith("## Coverage gaps –")]
    return f"forged heading: {forged}" if forged else None


def _cli(argv: list[str]) -> tuple[int, str]:
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from awarl.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = int(e.code or 0)
    return rc, err.getvalue()


@case("non-utf8-question-refused-at-parse-time", "report", "a question that is not UTF-8 (undecodable bytes on "
      "the command line) is refused by --dry-run, in one line")
def _(ctx: Context) -> str | None:
    rc, err = _cli(["research", "Who founded Caf\udce9 Nero?", "--dry-run"])
    if rc != 2:
        return f"--dry-run passed (exit {rc})"
    return None if "UTF-8" in err and len(err.strip().splitlines()) == 1 else f"not a one-line UTF-8 error: {err!r}"


@case("non-utf8-task-refused-at-parse-time", "report", "the same for a regression task whose question escapes "
      "an undecodable byte")
def _(ctx: Context) -> str | None:
    path = ctx.root / "bad-tasks.jsonl"
    path.write_text(json.dumps({"id": "t", "question": "Who founded Caf\udce9 Nero?"}) + "\n", encoding="utf-8")
    rc, err = _cli(["research", "--regression", str(path), "--dry-run"])
    if rc != 2:
        return f"--dry-run passed (exit {rc})"
    return None if "UTF-8" in err and len(err.strip().splitlines()) == 1 else f"not a one-line UTF-8 error: {err!r}"


# --------------------------------------------------------------------------------------------------- runner
def run_case(c: Case, ctx: Context) -> str | None:
    try:
        return c.fn(ctx)
    except Exception as e:  # noqa: BLE001 - a crash is a failure of the case, counted and shown
        return f"crashed: {type(e).__name__}: {' '.join(str(e).split())[:200]}"


def table(results: dict[str, str | None]) -> list[str]:
    by = {cls: [c for c in CASES if c.cls == cls] for cls in CLASSES}
    lines = ["| class | cases | failures |", "|---|---:|---:|"]
    for cls, cases in by.items():
        lines.append(f"| {CLASSES[cls]} | {len(cases)} | {sum(results[c.id] is not None for c in cases)} |")
    lines.append(f"| all | {len(CASES)} | {sum(r is not None for r in results.values())} |")
    return lines


def main() -> int:
    import logging
    import os

    import awarl

    logging.disable(logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"awarl from {Path(awarl.__file__).parent}")
    with tempfile.TemporaryDirectory() as tmp:
        ctx = Context(Path(tmp), Path(sys.argv[1]) if len(sys.argv) > 1 else None)
        results = {}
        for c in CASES:
            results[c.id] = run_case(c, ctx)
            print(f"{'FAIL' if results[c.id] else 'ok  '} {c.cls:15} {c.id}: {results[c.id] or ''}", flush=True)
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
