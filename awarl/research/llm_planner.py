"""The LLM planner (`research.planner: openai`): decomposition, re-query instructions and the final synthesis
asked of an OpenAI-compatible endpoint (a vLLM server on its own GPU, or any provider), each reply JSON bound
to a schema (`response_format` json_schema, through the same client, cache, deadline and retries as the
citation judge: awarl.critic.openai_judge). A failed call never stops research: the offline rule stands in
(the question as one step, the templated re-query, the last step's answer) and the failure is counted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from awarl.critic.openai_judge import OpenAIJudge
from awarl.data.types import QAExample
from awarl.research.planner import PlannerKind, hop_refs, one_step, requery_text
from awarl.research.reduce import combine
from awarl.research.schema import ExecutorResult, Plan, Reduce, SubQuestion

if TYPE_CHECKING:
    from awarl.research.planner import CacheDir, LoopSettings

log = logging.getLogger(__name__)

PROMPT_VERSION = "awarl-planner/1"


class PlanStep(BaseModel):
    question: str = Field(..., min_length=1)
    depends_on: list[int] = Field(default_factory=list, description="1-based numbers of earlier steps")


class PlanReply(BaseModel):
    model_config = ConfigDict(title="Plan")  # the request schema as before (research.schema.Plan is the plan)

    sub_questions: list[PlanStep] = Field(..., min_length=1)


class Rewrite(BaseModel):
    question: str = Field(..., min_length=1)


class Synthesis(BaseModel):
    answer: str = Field(..., min_length=1)


def _closed(schema: dict) -> dict:
    """A pydantic JSON schema closed for constrained decoding (no extra keys anywhere)."""
    if schema.get("type") == "object":
        schema["additionalProperties"] = False
    for v in list(schema.get("properties", {}).values()) + list(schema.get("$defs", {}).values()):
        _closed(v)
    if isinstance(schema.get("items"), dict):
        _closed(schema["items"])
    return schema


DECOMPOSE = """You are the planner of a research agent that answers questions with a search engine. Split the \
QUESTION into the fewest sub-questions whose answers, together, answer it: one per fact it rests on (one per \
hop of a multi-hop question). A sub-question that needs the answer of an earlier one writes #k for that \
answer (k = the earlier sub-question's 1-based number) and lists k in depends_on. A question that needs one \
fact is one sub-question: the question itself. Do not answer anything. Reply with JSON only."""

REQUERY = """You are the planner of a research agent. The SUB-QUESTION below was researched, but a critic that \
checked the answer against the ORIGINAL retrieved passages found the listed claims unsupported. Rewrite the \
sub-question for the search agent with explicit instructions: name the unsupported claims, and ask for \
sources with search terms different from those already tried. Reply with JSON only."""

SYNTHESIZE = """You are the planner of a research agent. Compose the final answer to the QUESTION using ONLY the \
verified findings below (sub-question -> answer); add nothing from your own knowledge. Answer as briefly as \
the question allows (a name, a date, yes or no). If the findings do not answer the question, answer exactly: \
{abstain}. Reply with JSON only."""


class LLMPlanner:
    """The Planner protocol over an OpenAI-compatible endpoint (module docstring)."""

    name = "openai"

    def __init__(self, client: OpenAIJudge, abstention_phrase: str = "not enough information") -> None:
        self.client = client
        self.abstention = abstention_phrase
        self.failures = 0

    def _ask(self, system: str, user: str, kind: type[BaseModel], name: str) -> Any:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        out = self.client.ask(messages, kind, name, _closed(kind.model_json_schema()), PROMPT_VERSION)
        if out is None:
            self.failures += 1
        return out

    def decompose(self, question: str, example: QAExample | None = None) -> Plan:
        plan = self._ask(DECOMPOSE, f"QUESTION:\n{question}", PlanReply, "research_plan")
        if plan is None:
            return one_step(question)
        steps = []
        for i, st in enumerate(plan.sub_questions):
            # only earlier steps (no cycles); a #k the text writes counts even when depends_on leaves it out,
            # or the step would run before step k with "#k" unfilled in its search
            deps = {d - 1 for d in st.depends_on if 0 < d <= i} | hop_refs(st.question, i)
            steps.append(SubQuestion(index=i, text=st.question.strip(), depends_on=sorted(deps)))
        return Plan(steps=steps, reduce=Reduce(kind="llm"), rule="llm")

    def requery(self, text: str, result: ExecutorResult, unsupported: Sequence[str],
                tried: Sequence[str] = ()) -> str:
        searches = list(dict.fromkeys([*tried, *result.searches]))
        user = json.dumps({"sub_question": text, "answer": result.summary, "unsupported_claims": list(unsupported),
                           "searches_tried": searches}, ensure_ascii=False)
        out = self._ask(REQUERY, user, Rewrite, "research_requery")
        return out.question if out is not None else requery_text(text, result, unsupported, tried)

    def synthesize(self, question: str, plan: Plan, answers: dict[int, str]) -> str:
        findings = [{"sub_question": s.text, "answer": answers.get(s.index, "")} for s in plan.steps]
        user = json.dumps({"question": question, "findings": findings}, ensure_ascii=False)
        out = self._ask(SYNTHESIZE.format(abstain=self.abstention), user, Synthesis, "research_synthesis")
        return out.answer.strip() if out is not None else combine(plan.reduce, plan.steps, answers)[0]


def build(cfg: LoopSettings, cache_dir: CacheDir = None, check: bool = False) -> LLMPlanner:
    """The LLM planner at research.planner_base_url (default critic.base_url) serving research.planner_model
    (default critic.model), checked reachable first when `check`, its errors naming the option that set the
    endpoint. `cfg`: the run's config (awarl.research.records.LoopSettings)."""
    r = cfg.research
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


OPENAI = PlannerKind(build, endpoint=True)
