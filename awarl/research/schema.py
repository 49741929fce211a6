"""The critic loop's records (the critic-loop article's schemas, in pydantic), shared by its parts.

`ExecutorResult` keeps the ORIGINAL text of every passage the executor retrieved next to its summary, so the
critic can check claims against the sources and not against a summary of them (the article's requirement).
`ResearchReport.coverage_gaps` is required and never omitted: an empty list says "no gaps", a missing field
would let gaps go unreported. Every finding carries its evidence trail (the passage ids and the quoted span
that support it) and, when it is not plainly grounded, the mark that keeps it from passing silently.
"""

from __future__ import annotations

import datetime as _dt
from typing import Literal

from pydantic import BaseModel, Field

from awarl.critic.schema import ClaimVerification
from awarl.decompose import Plan, Reduce, SubQuestion  # noqa: F401 - a plan's types, part of the loop's records


class ExecutorResult(BaseModel):
    """What the executor (the search agent) found for one sub-question in one attempt."""

    sub_question: str
    summary: str = Field("", description="The executor's answer: compressed, used for planning.")
    source_docs: list[str] = Field(default_factory=list, description="Original text of every retrieved "
                                   "passage, used for critic verification.")
    source_ids: list[str] = Field(default_factory=list, description="Corpus ids of those passages, in order.")
    cited_ids: list[str] = Field(default_factory=list, description="The passages the executor cited.")
    unknown_citations: list[str] = Field(default_factory=list, description="What the executor cited that names no "
                                         "passage it was shown: a number never shown, or a <cite> block that names "
                                         "no number (flagged in the report, never dropped silently).")
    invalid_reason: str | None = Field(None, description="Why the trajectory is invalid (the parser's reason).")
    searches: list[str] = Field(default_factory=list, description="The search queries it issued.")
    abstained: bool = False
    valid: bool = True
    attempt: int = 1
    repeated: bool = Field(False, description="A re-query whose searches were all tried before (checked after "
                           "every allowed draw): a query failure, not new evidence.")
    draws: int = Field(1, ge=1, description="Executor draws this attempt took (a draw repeating earlier "
                       "searches is discarded and drawn again, up to research.requery_draws).")


class Quote(BaseModel):
    passage_id: str
    text: str = Field(..., description="The span of the passage's original text that supports the claim.")
    start: int | None = Field(None, ge=0, description="Where the span starts in the passage's text (the report's "
                              "`passages` keeps that text): passages[id].text[start:end] == text.")
    end: int | None = Field(None, ge=0, description="Where it ends (exclusive).")


class PassageText(BaseModel):
    """A retrieved passage as the critic read it (original text): the evidence chain's last link."""

    id: str
    title: str = ""
    text: str


class ReportConflict(BaseModel):
    """Values that disagree for one fact, with the passages (and steps) that give them: reported, not averaged."""

    claim: str = ""
    values: list[str] = Field(default_factory=list)
    source_ids: list[str] = Field(default_factory=list)
    steps: list[int] = Field(default_factory=list, description="0-based steps whose sources or answers give them; "
                             "empty for the final pass.")
    found_by: Literal["critic", "drift"] = Field("critic", description="critic: the step's or the final pass's "
                                                 "verdict (the judge's typed conflicts and the loop's reading of "
                                                 "the passages); drift: two sub-questions' answers.")
    detail: str = ""


class Finding(ClaimVerification):
    """A verified claim with its evidence trail: which step it came from, which judge labelled it, the quoted
    span of each supporting passage, and its mark when it is not plainly grounded (the article's inferred /
    unsupported categories, or a low confidence)."""

    step: int | None = Field(None, description="0-based step index; None: the final answer (reduce).")
    judge: str = Field("", description="The judge that labelled it (`gold (oracle)` for the gold judge).")
    quotes: list[Quote] = Field(default_factory=list)
    mark: str | None = Field(None, description="Why the claim is marked in the report; None when grounded "
                             "with enough confidence.")


class ResearchReport(BaseModel):
    question: str
    answer: str = Field(..., description="The approved answer, or the abstention phrase with the gaps stated.")
    approved: bool
    findings: list[Finding] = Field(default_factory=list)
    coverage_gaps: list[str] = Field(..., description="Where the sources were insufficient after searching "
                                     "with different terms; required, possibly empty, never omitted.")
    query_failures: list[str] = Field(default_factory=list, description="Steps that failed for want of a real "
                                      "search (none at all, or re-queries repeating the searches tried): not "
                                      "evidence about the sources.")
    failures: list[str] = Field(default_factory=list, description="The judge gave no valid verdict, the executor no "
                                "valid trajectory, or the loop's own search failed: failures of the machinery, "
                                "neither evidence about the sources nor a failure of the query.")
    conflicts: list[ReportConflict] = Field(default_factory=list, description="Values that disagree for one fact "
                                            "(any blocks approval).")
    flags: list[str] = Field(default_factory=list, description="Conflicting values across sub-questions, claims "
                             "marked in an approved answer, and every critic flag (the final pass's too).")
    confidence: float = Field(..., ge=0.0, le=1.0, description="How much of the reported answer is grounded: the "
                              "share of grounded claims among the judge's findings on it (the final pass's and the "
                              "approved steps'; the planner's own conclusion is not a claim of the sources and is "
                              "not counted). 0 when the report abstains: it asserts nothing (docs/research.md).")
    iterations: int = Field(..., ge=0, description="Critic-loop cycles: the most attempts any sub-question took.")
    requeries: int = Field(0, ge=0, description="Re-queued sub-question attempts, over all sub-questions.")
    groundedness_before: float | None = Field(None, description="Mean groundedness of the first attempts.")
    groundedness_after: float | None = Field(None, description="Mean groundedness of the final attempts.")
    judge: str = Field("", description="The judge whose verdicts decided approval (`gold (oracle)`: it read "
                       "the dataset's gold evidence).")
    oracle: bool = Field(False, description="Whether that judge is an oracle (the gold judge).")
    plan: dict = Field(default_factory=dict, description="The planner's rule and reduce.")
    sub_questions: list[dict] = Field(default_factory=list, description="Per step: text as asked, attempts, "
                                      "approved, answer, searches, and per attempt the recounted and the "
                                      "judge's own groundedness.")
    passages: list[PassageText] = Field(default_factory=list, description="The original text of every passage a "
                                        "finding or a conflict names: each quote is passages[id].text[start:end].")
    provenance: dict = Field(default_factory=dict, description="What the report was made with: the index (kind, "
                             "corpus hash, size, settings), the executor (policy identity), the judge (name, model) "
                             "and the planner.")
    generated_at: str = Field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(
        timespec="seconds"))
