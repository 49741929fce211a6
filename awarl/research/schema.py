"""The critic loop's records (the critic-loop article's schemas, in pydantic), shared by its parts.

`ExecutorResult` keeps the ORIGINAL text of every passage the executor retrieved next to its summary, so the
critic can check claims against the sources and not against a summary of them (the article's requirement).
`ResearchReport.coverage_gaps` is required and never omitted: an empty list says "no gaps", a missing field
would let gaps go unreported.
"""

from __future__ import annotations

import datetime as _dt

from pydantic import BaseModel, ConfigDict, Field

from awarl.critic.schema import ClaimVerification


class SubQuestion(BaseModel):
    """One step of a research plan. `depends_on`: indexes of earlier steps whose answers it needs (a
    multi-hop chain: MuSiQue's `#1` references), substituted into `text` before it is asked."""

    model_config = ConfigDict(extra="forbid")

    index: int
    text: str = Field(..., min_length=1)
    depends_on: list[int] = Field(default_factory=list)


class ExecutorResult(BaseModel):
    """What the executor (the search agent) found for one sub-question in one attempt."""

    sub_question: str
    summary: str = Field("", description="The executor's answer: compressed, used for planning.")
    source_docs: list[str] = Field(default_factory=list, description="Original text of every retrieved "
                                   "passage, used for critic verification.")
    source_ids: list[str] = Field(default_factory=list, description="Corpus ids of those passages, in order.")
    cited_ids: list[str] = Field(default_factory=list, description="The passages the executor cited.")
    searches: list[str] = Field(default_factory=list, description="The search queries it issued.")
    abstained: bool = False
    valid: bool = True
    attempt: int = 1


class ResearchReport(BaseModel):
    question: str
    answer: str = Field(..., description="The approved answer, or the abstention phrase with the gaps stated.")
    approved: bool
    findings: list[ClaimVerification] = Field(default_factory=list)
    coverage_gaps: list[str] = Field(..., description="Where the sources were insufficient; required, possibly "
                                     "empty, never omitted.")
    flags: list[str] = Field(default_factory=list, description="Conflicting values across sub-questions and the "
                             "critic's flags, reported, never averaged.")
    confidence: float = Field(..., ge=0.0, le=1.0, description="Share of grounded claims over all findings.")
    iterations: int = Field(..., ge=0, description="Critic-loop cycles: the most attempts any sub-question took.")
    requeries: int = Field(0, ge=0, description="Re-queued sub-question attempts, over all sub-questions.")
    groundedness_before: float | None = Field(None, description="Mean groundedness of the first attempts.")
    groundedness_after: float | None = Field(None, description="Mean groundedness of the final attempts.")
    sub_questions: list[dict] = Field(default_factory=list, description="Per step: text as asked, attempts, "
                                      "approved, answer.")
    generated_at: str = Field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(
        timespec="seconds"))
