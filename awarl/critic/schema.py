"""The critic's verdict schema (SPEC section 5) and its input, shared by every judge.

A judge sees the question, the answer, the cited passages and ALL passages retrieved in the trajectory in
their original text (the critic-loop article: a critic that only sees summaries can check consistency, not
grounding), and returns one `CriticOutput` per item, or None when it failed.

A claim names the passages it rests on in `source_ids`: several when they ground it only jointly (the two
hops of a multi-hop answer), the critic-loop article's `source_url` generalised. The single-id form
(`"source_id": "w1"`, or null) of older verdicts and caches is still read.

Issue 43 added two optional parts, both absent from older verdicts and caches (read as empty): a claim's
`evidence` (the character spans of its passages that state it: the offline judge gives them, an LLM judge is
not asked for them) and a verdict's `conflicts` (passages that give different values for one fact, a typed
list every judge fills; the LLM judge's request schema asks for it, so its conflicts are no longer read from
the wording of a flag).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from awarl.data.evidence import GoldEvidence, passage_id_key

if TYPE_CHECKING:
    from awarl.config import CriticConfig


class Span(BaseModel):
    """Characters [start, end) of a passage's original text that state a claim."""

    model_config = ConfigDict(extra="ignore")

    passage_id: str
    start: int = Field(..., ge=0)
    end: int = Field(..., ge=0)

    @field_validator("passage_id", mode="before")
    @classmethod
    def _clean_id(cls, v: Any) -> Any:
        return passage_id_key(v) if isinstance(v, str) else v


class Conflict(BaseModel):
    """Retrieved passages that give different values for one fact (reported, never averaged)."""

    model_config = ConfigDict(extra="ignore")

    claim: str = Field("", description="The claim or fact the values are about.")
    values: list[str] = Field(default_factory=list, description="The values the passages give, as written.")
    source_ids: list[str] = Field(default_factory=list, description="The passages that give them.")
    detail: str = Field("", description="What each passage says, in a sentence.")

    @field_validator("source_ids", mode="before")
    @classmethod
    def _clean_ids(cls, v: Any) -> Any:
        if isinstance(v, list):
            return list(dict.fromkeys(k for x in v if x is not None and (k := passage_id_key(str(x)))))
        return v


class ClaimVerification(BaseModel):
    model_config = ConfigDict(extra="ignore")

    claim: str = Field(..., min_length=1)
    status: Literal["grounded", "inferred", "unsupported"]
    source_ids: list[str] = Field(default_factory=list, description="Passage ids that support the claim (all "
                                  "of them jointly); at least one when grounded.")
    confidence: float = Field(..., ge=0.0, le=1.0)
    evidence: list[Span] = Field(default_factory=list, description="The spans of the source passages that state "
                                 "the claim (the offline judge's; empty when a judge gives none).")

    @model_validator(mode="before")
    @classmethod
    def _single_source_form(cls, data: Any) -> Any:
        """`source_id` (a string, null or a list) is read as `source_ids` when that is absent."""
        if isinstance(data, dict) and "source_id" in data:
            data = dict(data)
            one = data.pop("source_id")
            if data.get("source_ids") is None:
                data["source_ids"] = [] if one is None else list(one) if isinstance(one, list) else [one]
        return data

    @field_validator("source_ids", mode="before")
    @classmethod
    def _clean_ids(cls, v: Any) -> Any:
        if v is None:
            return []
        if isinstance(v, str):
            v = [v]
        if isinstance(v, list):  # ids as written by a model: stripped, blanks and repeats dropped
            return list(dict.fromkeys(k for x in v if x is not None and (k := passage_id_key(x))))
        return v

    @model_validator(mode="after")
    def _grounded_needs_source(self) -> ClaimVerification:
        if self.status == "grounded" and not self.source_ids:
            raise ValueError("source_ids must name at least one passage when status is 'grounded'")
        return self

    @property
    def source_id(self) -> str | None:
        """The first source (the single-id form)."""
        return self.source_ids[0] if self.source_ids else None


class CriticOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    verified_claims: list[ClaimVerification]
    overall_groundedness: float = Field(..., ge=0.0, le=1.0, description="Share of claims that are grounded. "
                                        "Recounted from the claims once a verdict is read (awarl.critic.audit): "
                                        "a judge's own figure is never trusted.")
    flags: list[str] = Field(default_factory=list, description="Issues: conflicting values, uncited support, ...")
    conflicts: list[Conflict] = Field(default_factory=list, description="Passages that give different values for "
                                      "one fact: the typed form of a conflicting-values flag (read by the critic "
                                      "loop; absent from older verdicts, read as none).")
    reported_groundedness: float | None = Field(None, ge=0.0, le=1.0, description="The judge's own "
                                                "overall_groundedness, kept beside the recount (set by the "
                                                "audit; None before it). Internal: not part of the request "
                                                "schema; a value a judge's reply puts there never fails the "
                                                "verdict and is overwritten by the audit.")

    @field_validator("reported_groundedness", mode="before")
    @classmethod
    def _internal_figure(cls, v: Any) -> Any:
        """Set by the audit (awarl.critic.audit), which overwrites it with the judge's overall_groundedness: a
        reply that carries the key anyway is not failed for it (`"n/a"`, 3, NaN are read as None). Only a number
        in [0, 1] is kept (the audit's, a verdict built in code, a cache entry)."""
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            return None
        return v


class PassageRef(BaseModel):
    """A retrieved passage as the agent saw it: its number in the trajectory and its corpus id."""

    model_config = ConfigDict(extra="ignore")

    number: int
    id: str
    title: str = ""
    text: str

    @field_validator("id", mode="before")
    @classmethod
    def _clean_id(cls, v: Any) -> Any:
        """Stripped like a claim's `source_ids`, so the two always compare equal."""
        return passage_id_key(v) if isinstance(v, str) else v


class CriticInput(BaseModel):
    question: str
    answer: str
    cited: list[PassageRef] = Field(default_factory=list, description="Passages the answer cites.")
    passages: list[PassageRef] = Field(default_factory=list, description="Every passage retrieved, original text.")
    gold: Any = Field(None, exclude=True, description="The question's GoldEvidence, for the gold judge only "
                      "(never shown to an LLM judge); None when the data marks none.")

    @field_validator("gold", mode="before")
    @classmethod
    def _gold_evidence(cls, v: Any) -> GoldEvidence | None:
        if v is None or isinstance(v, GoldEvidence):
            return v
        if isinstance(v, dict):
            return GoldEvidence.from_dict(v)
        raise ValueError(f"gold: expected GoldEvidence, a dict or None, got {type(v).__name__}")


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
    """What a registered citation judge is (awarl.choices.JUDGES; docs/extending.md). `name` labels its verdicts
    (its registry name); `failures` counts the items it could not verify."""

    name: str
    failures: int

    def verify(self, items: list[CriticInput]) -> list[CriticOutput | None]:
        """One verdict per item, in order; None for an item the judge could not verify (never raises)."""
        ...


@runtime_checkable
class Reachable(Protocol):
    """A judge (or answer grader) behind a service: `check_reachable` raises JudgeUnavailable, naming the setting
    to change, when the service does not answer or does not serve the configured model. Every such judge is
    checked before any model loads (`awarl.critic.check_endpoints`)."""

    def check_reachable(self, what: str, *, instead: str = ...) -> None: ...


@dataclass(frozen=True)
class JudgeKind:
    """A registered citation judge (awarl.choices.JUDGES; docs/extending.md): its factory, called as
    `kind(cfg, cache_dir)`, and what a run must know of it without building it or comparing its name.

    `oracle`: it reads the dataset's gold evidence, so its verdicts are no system's (labelled ORACLE wherever
    they are used; the loop takes its claims as given). `endpoint`: it calls the OpenAI-compatible service of
    critic.base_url / critic.model (its verdicts name the model; the dry run shows the endpoint). `settings`:
    the CriticConfig fields its verdicts depend on (recorded with a research report's provenance)."""

    build: Callable[..., Judge]   # (cfg: CriticConfig, cache_dir: str | PathLike | None) -> Judge
    oracle: bool = False
    endpoint: bool = False
    settings: tuple[str, ...] = ()

    def __call__(self, cfg: CriticConfig, cache_dir: str | os.PathLike[str] | None = None) -> Judge:
        return self.build(cfg, cache_dir)

    def label(self, name: str, cfg: CriticConfig) -> str:
        """The judge named on each verdict: its name, with the model for an endpoint judge (`openai:<model>`)."""
        return f"{name}:{cfg.model}" if self.endpoint else name


# Bounds of a constrained reply: a weak judge model under constrained decoding (seen with vLLM's CPU build)
# otherwise repeats claims or flags until max_tokens and the reply is cut (invalid JSON). Multi-hop answers
# rest on 2-4 facts; 16 claims and 8 flags leave room for long answers. Only the request schema carries them:
# local judges (lexical, gold) may return more.
MAX_CLAIMS = 16
MAX_FLAGS = 8
MAX_CONFLICT_VALUES = 4


def _claim_schema(statuses: list[str], min_sources: int) -> dict[str, Any]:
    sources: dict[str, Any] = {"type": "array", "items": {"type": "string", "minLength": 1}}
    if min_sources:
        sources["minItems"] = min_sources
    return {
        "type": "object",
        "properties": {
            "claim": {"type": "string", "minLength": 1},
            "status": {"type": "string", "enum": statuses},
            "source_ids": sources,
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["claim", "status", "source_ids", "confidence"],
        "additionalProperties": False,
    }


def critic_output_json_schema() -> dict[str, Any]:
    """JSON schema of CriticOutput for `response_format` and the prompt.

    Written by hand rather than taken from pydantic so that it is plain, closed (additionalProperties false)
    and accepted by constrained-decoding backends such as vLLM's guided JSON. `claim` has minLength 1 because
    the pydantic model refuses an empty claim (constrained decoding otherwise produces "").
    """
    # A grounded claim names at least one passage (ClaimVerification refuses one that names none). Stated in
    # the schema as its own branch, so constrained decoding cannot produce it: SmolLM2-135M on vLLM's CPU
    # build otherwise marks every claim grounded with no source, and every verdict fails validation.
    claim = {"anyOf": [_claim_schema(["grounded"], min_sources=1),
                       _claim_schema(["inferred", "unsupported"], min_sources=0)]}
    conflict = {
        "type": "object",
        "properties": {
            "claim": {"type": "string"},
            "values": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": MAX_CONFLICT_VALUES},
            "source_ids": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1},
            "detail": {"type": "string"},
        },
        "required": ["claim", "values", "source_ids", "detail"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "verified_claims": {"type": "array", "items": claim, "maxItems": MAX_CLAIMS},
            "overall_groundedness": {"type": "number", "minimum": 0, "maximum": 1},
            "flags": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_FLAGS},
            "conflicts": {"type": "array", "items": conflict, "maxItems": MAX_FLAGS},
        },
        "required": ["verified_claims", "overall_groundedness", "flags", "conflicts"],
        "additionalProperties": False,
    }


def answer_verdict_json_schema() -> dict[str, Any]:
    """JSON schema of AnswerVerdict (closed, for constrained decoding like the critic's)."""
    return {
        "type": "object",
        "properties": {"correct": {"type": "boolean"}, "reason": {"type": "string"}},
        "required": ["correct", "reason"],
        "additionalProperties": False,
    }
