"""The critic's verdict schema (SPEC section 5) and its input, shared by every judge.

A judge sees the question, the answer, the cited passages and ALL passages retrieved in the trajectory in
their original text (the critic-loop article: a critic that only sees summaries can check consistency, not
grounding), and returns one `CriticOutput` per item, or None when it failed.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ClaimVerification(BaseModel):
    model_config = ConfigDict(extra="ignore")

    claim: str = Field(..., min_length=1)
    status: Literal["grounded", "inferred", "unsupported"]
    source_id: str | None = Field(None, description="Passage id supporting the claim; required when grounded.")
    confidence: float = Field(..., ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _grounded_needs_source(self) -> ClaimVerification:
        if self.status == "grounded" and not self.source_id:
            raise ValueError("source_id is required when status is 'grounded'")
        return self


class CriticOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    verified_claims: list[ClaimVerification]
    overall_groundedness: float = Field(..., ge=0.0, le=1.0, description="Share of claims that are grounded.")
    flags: list[str] = Field(default_factory=list, description="Issues: conflicting values, uncited support, ...")


class PassageRef(BaseModel):
    """A retrieved passage as the agent saw it: its number in the trajectory and its corpus id."""

    model_config = ConfigDict(extra="ignore")

    number: int
    id: str
    title: str = ""
    text: str


class CriticInput(BaseModel):
    question: str
    answer: str
    cited: list[PassageRef] = Field(default_factory=list, description="Passages the answer cites.")
    passages: list[PassageRef] = Field(default_factory=list, description="Every passage retrieved, original text.")


class AnswerCheck(BaseModel):
    """One answer to grade under `metrics.correctness: judge`: is `prediction` the same answer as a gold one?"""

    question: str
    prediction: str
    answers: list[str] = Field(..., min_length=1, description="Gold answers (aliases).")


class AnswerVerdict(BaseModel):
    model_config = ConfigDict(extra="ignore")

    correct: bool
    reason: str = ""


class Judge(Protocol):
    failures: int

    def verify(self, items: list[CriticInput]) -> list[CriticOutput | None]:
        """One verdict per item, in order; None for an item the judge could not verify (never raises)."""
        ...


def critic_output_json_schema() -> dict:
    """JSON schema of CriticOutput for `response_format` and the prompt.

    Written by hand rather than taken from pydantic so that it is plain, closed (additionalProperties false)
    and accepted by constrained-decoding backends such as vLLM's guided JSON.
    """
    claim = {
        "type": "object",
        "properties": {
            "claim": {"type": "string"},
            "status": {"type": "string", "enum": ["grounded", "inferred", "unsupported"]},
            "source_id": {"type": ["string", "null"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["claim", "status", "source_id", "confidence"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "verified_claims": {"type": "array", "items": claim},
            "overall_groundedness": {"type": "number", "minimum": 0, "maximum": 1},
            "flags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["verified_claims", "overall_groundedness", "flags"],
        "additionalProperties": False,
    }


def answer_verdict_json_schema() -> dict:
    """JSON schema of AnswerVerdict (closed, for constrained decoding like the critic's)."""
    return {
        "type": "object",
        "properties": {"correct": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["correct", "reason"],
        "additionalProperties": False,
    }
