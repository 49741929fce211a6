"""Shared parts of the critic-loop tests: a small real corpus for the issue's constructed cases (indexed with
the real BM25 builder), the scripted executor that records what it was asked, the real rollout engine, a
fixed planner, and a FAKE OpenAI-compatible judge endpoint (an LLM cannot run here; the endpoint answers
what a judge model would, over real HTTP)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from awarl.research.schema import Plan, Reduce, SubQuestion

# The constructed cases of issue 24: two sources that disagree, a biography missing one claim, two capitals,
# two birth dates, two founding dates.
DOCS = [
    ("Acme Survey 2023", "The 2023 industry survey puts the Acme market size at $5B."),
    ("Acme Analyst Report", "An analyst report puts the Acme market size at $3B."),
    ("Foo", "Foo was born in Springfield. Foo studied chemistry at Oxford. Foo married Jane Roe. "
            "Foo founded Foo Labs."),
    ("France", "France is a country in Europe. The capital of France is Paris."),
    ("Italy", "Italy is a country in Europe. The capital of Italy is Rome."),
    ("Lost City", "Plato describes a lost city in the Atlantic."),
    ("Ann Ray", "Ann Ray is a tennis player. Ann Ray was born on 3 May 1985 in Leeds."),
    ("Bo Tell", "Bo Tell is a tennis player. Bo Tell was born on 9 July 1990 in Oslo."),
    ("Zed Corp history", "Zed Corp was founded in 1999 in Springfield."),
    ("Zed Corp registry", "The registry says Zed Corp was founded in 2001."),
]


def build_claims_index(root: Path) -> Path:
    from awarl.data.corpus import passage_contents, passage_id
    from awarl.io import write_jsonl
    from awarl.retrieval import build_index

    if not (root / "bm25" / "index_meta.json").exists():
        write_jsonl(root / "corpus.jsonl", [{"id": passage_id(t, x), "contents": passage_contents(t, x)}
                                            for t, x in DOCS])
        build_index(root / "corpus.jsonl", "bm25", root / "bm25", show_progress=False)
    return root / "bm25"


class RecordingScripted:
    """The scripted backend, recording every prompt it continued and the temperature it was asked for."""

    def __init__(self, tok, script):
        from awarl.agent.backends.scripted import ScriptedBackend

        self.inner, self.tok, self.prompts, self.temperatures = ScriptedBackend(tok, script), tok, [], []

    def generate(self, prompts, **kw):
        self.prompts += [self.tok.decode(p) for p in prompts]
        self.temperatures += [kw.get("temperature")] * len(prompts)
        return self.inner.generate(prompts, **kw)


def engine(tok, retriever, script, **over):
    from awarl.agent.rollout import RolloutEngine
    from awarl.config import load_config

    cfg = load_config(None, ["retrieval.topk=3", "agent.max_turns=2", *[f"{k}={v}" for k, v in over.items()]])
    return cfg, RolloutEngine.from_config(cfg, tok, retriever, backend=RecordingScripted(tok, script))


class FixedPlanner:
    """A planner with a given plan (the Planner protocol; offline re-queries and reduce)."""

    def __init__(self, texts, reduce=None, deps=None):
        from awarl.research.planner import DecompositionPlanner

        deps = deps or [[] for _ in texts]
        self.plan = Plan(steps=[SubQuestion(index=i, text=t, depends_on=d) for i, (t, d) in enumerate(zip(texts, deps, strict=True))],
                         reduce=reduce or Reduce(), rule="fixed")
        self.offline = DecompositionPlanner()

    def decompose(self, question, example=None):
        return self.plan

    def requery(self, text, result, unsupported, tried=()):
        return self.offline.requery(text, result, unsupported, tried)

    def synthesize(self, question, plan, answers):
        return self.offline.synthesize(question, plan, answers)

    explain = staticmethod(lambda plan, answers: "fixed plan")


def research(question, planner, eng, judge, cfg, example=None, **run_kw):
    from awarl.research.loop import ResearchRun, run_research

    r = cfg.research
    run = ResearchRun(question, planner, approve_threshold=r.approve_threshold, max_iterations=r.max_iterations,
                      abstention_phrase="not enough information", example=example, **run_kw)
    (report,) = run_research([run], eng, judge, temperature=0.0, requery_temperature=r.requery_temperature, seed=0)
    return report, run


def fake_judge_app(verdict_for, log=None):
    """A FAKE OpenAI-compatible judge (no LLM can run here): `verdict_for(user_json, passage_ids)` is its reply."""
    from conftest import fake_chat_app

    def reply(body: dict) -> str:
        user = json.loads(body["messages"][-1]["content"])
        return json.dumps(verdict_for(user, [p["id"] for p in user["passages"]]))

    return fake_chat_app(reply, models=["judge-llm"], log=log)


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))
