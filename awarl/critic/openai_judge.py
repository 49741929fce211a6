"""Judges backed by any OpenAI-compatible `/v1/chat/completions` endpoint (vLLM, a provider, ...): the
citation critic (`verify`) and, for `metrics.correctness: judge`, the answer grader (`grade_answers`).

The prompt follows the critic-loop article: the critic is a narrow verifier, not a second writer; it checks
every claim of the answer against the ORIGINAL retrieved passages (never summaries) and labels it grounded,
inferred or unsupported, naming the supporting passage. The reply must be JSON matching
`critic_output_json_schema()` (also sent as `response_format`, so constrained decoding can enforce it).

Failure policy: a transport error, timeout, HTTP 429/5xx is retried with exponential backoff; a reply that
is not valid JSON or violates the schema is not retried (at temperature 0 it would repeat). Whatever fails
yields None for that item and increments `failures`; nothing raises into training. Verdicts are cached on
disk as JSON (atomic writes, keyed by a hash of the exact request and model), so a rerun or resume pays once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import ValidationError

from awarl.config import CriticConfig
from awarl.critic.schema import (
    AnswerCheck,
    AnswerVerdict,
    CriticInput,
    CriticOutput,
    answer_verdict_json_schema,
    critic_output_json_schema,
)
from awarl.io import atomic_write_json

log = logging.getLogger(__name__)

PROMPT_VERSION = "awarl-critic/1"  # part of the cache key: changing the prompt invalidates old verdicts
Verdict = TypeVar("Verdict", CriticOutput, AnswerVerdict)

SYSTEM_PROMPT = """You are a citation critic for a question-answering search agent. You do not write or \
improve answers; you only verify them.

Split the ANSWER into its atomic factual claims (a short answer such as a name or a date is one claim). \
For each claim, check it against the ORIGINAL text of the retrieved passages below, not against your own \
knowledge and not against any summary:
- "grounded": the claim is stated, literally or as a close paraphrase, in one passage. Set source_id to \
that passage's id (prefer a passage the answer cites).
- "inferred": the claim follows logically from the passages taken together but no single passage states \
it. Set source_id to the most relevant passage id, or null.
- "unsupported": no retrieved passage supports it (for example it comes from background knowledge). \
source_id is null.
confidence is your confidence in the label, between 0 and 1. overall_groundedness is the fraction of \
claims labelled grounded. In flags, list concrete problems: passages that give conflicting values for the \
same fact (name both ids; report the conflict, do not average it), supporting passages the answer did not \
cite, cited passages that support nothing.

Reply with one JSON object and nothing else, matching this JSON schema:
{schema}"""


def _format_passages(items) -> str:
    return "\n\n".join(f"[{p.number}] id={p.id} Title: {p.title}\n{p.text}" for p in items) or "(none)"


def build_messages(item: CriticInput) -> list[dict]:
    schema = json.dumps(critic_output_json_schema(), separators=(",", ":"))
    cited = ", ".join(f"[{p.number}] id={p.id}" for p in item.cited) or "(none)"
    user = (f"QUESTION:\n{item.question}\n\nANSWER:\n{item.answer}\n\nCITED PASSAGES: {cited}\n\n"
            f"ALL RETRIEVED PASSAGES (original text):\n{_format_passages(item.passages)}")
    return [{"role": "system", "content": SYSTEM_PROMPT.format(schema=schema)},
            {"role": "user", "content": user}]


GRADER_PROMPT = """You grade a question-answering system. Decide whether the PREDICTION gives the same \
answer to the QUESTION as at least one of the GOLD ANSWERS.

Count as the same answer: differences of spelling, capitalisation, punctuation, articles, abbreviations, \
word order, units written differently, or extra words that do not change the answer (for example "the \
city of Paris" for "Paris"). Count as a different answer: another entity, number or date; a prediction \
that hedges between several answers; one that adds a claim contradicting the gold answer. Judge against \
the gold answers only, not against what you believe the true answer is.

Reply with one JSON object and nothing else, matching this JSON schema:
{schema}"""


def build_grader_messages(item: AnswerCheck) -> list[dict]:
    schema = json.dumps(answer_verdict_json_schema(), separators=(",", ":"))
    golds = "\n".join(f"- {a}" for a in item.answers)
    user = f"QUESTION:\n{item.question}\n\nGOLD ANSWERS:\n{golds}\n\nPREDICTION:\n{item.prediction}"
    return [{"role": "system", "content": GRADER_PROMPT.format(schema=schema)},
            {"role": "user", "content": user}]


def _extract_json(text: str) -> object:
    text = text.strip()
    if text.startswith("```"):  # some models fence JSON even when asked not to
        text = text.strip("`")
        if text.lower().startswith("json"):
            text = text[4:]
    return json.loads(text)


class JudgeResponseError(ValueError):
    """The endpoint answered, but not with a schema-valid verdict (not retried)."""


class OpenAIJudge:
    def __init__(self, cfg: CriticConfig, cache_dir: str | os.PathLike | None = None,
                 api_key: str | None = None) -> None:
        self.cfg = cfg
        self.cache_dir = Path(cache_dir) if cache_dir else (Path(cfg.cache_dir) if cfg.cache_dir else None)
        self.url = cfg.base_url.rstrip("/") + "/chat/completions"
        key = api_key if api_key is not None else os.environ.get(cfg.api_key_env)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(headers=headers, timeout=httpx.Timeout(cfg.timeout_s))
        self._lock = threading.Lock()
        self.failures = 0
        self.failure_reasons: Counter[str] = Counter()
        self.requests = 0
        self.cache_hits = 0

    def close(self) -> None:
        self._client.close()

    # ------------------------------------------------------------------------------------ cache
    def cache_key(self, messages: list[dict]) -> str:
        blob = json.dumps({"v": PROMPT_VERSION, "model": self.cfg.model, "messages": messages,
                           "max_tokens": self.cfg.max_tokens}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _cache_path(self, key: str) -> Path | None:
        return self.cache_dir / key[:2] / f"{key}.json" if self.cache_dir else None

    def _cache_get(self, key: str, kind: type[Verdict]) -> Verdict | None:
        path = self._cache_path(key)
        if path is None or not path.is_file():
            return None
        try:
            return kind.model_validate(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, ValidationError, OSError):
            log.warning("ignoring unreadable critic cache entry %s", path)
            return None

    def _cache_put(self, key: str, out: CriticOutput | AnswerVerdict) -> None:
        path = self._cache_path(key)
        if path is not None:
            atomic_write_json(path, out.model_dump(mode="json"))

    # ---------------------------------------------------------------------------------- request
    def _request(self, messages: list[dict], kind: type[Verdict], schema_name: str, schema: dict) -> Verdict:
        body = {
            "model": self.cfg.model,
            "messages": messages,
            "temperature": 0.0,
            "max_tokens": self.cfg.max_tokens,
            "response_format": {"type": "json_schema", "json_schema": {"name": schema_name, "schema": schema}},
        }
        delay = self.cfg.backoff_s
        last: Exception | None = None
        for attempt in range(self.cfg.retries + 1):
            if attempt:
                time.sleep(delay)
                delay *= 2
            with self._lock:
                self.requests += 1
            try:
                resp = self._client.post(self.url, json=body)
            except httpx.HTTPError as e:  # timeouts, refused connections, broken streams
                last = e
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                last = RuntimeError(f"HTTP {resp.status_code}")
                continue
            if resp.status_code != 200:
                raise JudgeResponseError(f"HTTP {resp.status_code}: {resp.text[:200]}")
            if len(resp.content) > self.cfg.max_response_bytes:
                raise JudgeResponseError(f"response of {len(resp.content)} bytes exceeds max_response_bytes")
            try:
                content = resp.json()["choices"][0]["message"]["content"]
                return kind.model_validate(_extract_json(content))
            except (ValueError, KeyError, IndexError, TypeError, ValidationError) as e:
                raise JudgeResponseError(f"reply does not match the verdict schema: {str(e)[:300]}") from None
        raise TimeoutError(f"no answer after {self.cfg.retries + 1} attempt(s): {last}")

    def _call(self, messages: list[dict], kind: type[Verdict], schema_name: str, schema: dict) -> Verdict | None:
        """The cached verdict, or a new one; None when it failed (counted, never raised into training)."""
        key = self.cache_key(messages)
        cached = self._cache_get(key, kind)
        if cached is not None:
            with self._lock:
                self.cache_hits += 1
            return cached
        try:
            out = self._request(messages, kind, schema_name, schema)
        except Exception as e:  # never raise into training: count and move on
            reason = type(e).__name__
            with self._lock:
                self.failures += 1
                self.failure_reasons[reason] += 1
            log.warning("%s judge failed (%s): %s", schema_name, reason, e)
            return None
        self._cache_put(key, out)
        return out

    def _map(self, fn: Callable[[Any], Any], items: list) -> list:
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=min(self.cfg.concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

    def verify(self, items: list[CriticInput]) -> list[CriticOutput | None]:
        """Citation verdicts (SPEC section 5), one per item; None where the judge failed."""
        return self._map(lambda it: self._call(build_messages(it), CriticOutput, "critic_output",
                                               critic_output_json_schema()), items)

    def grade_answers(self, items: list[AnswerCheck]) -> list[bool | None]:
        """Whether each prediction is the same answer as a gold one; None where the judge failed."""
        verdicts = self._map(lambda it: self._call(build_grader_messages(it), AnswerVerdict, "answer_verdict",
                                                   answer_verdict_json_schema()), items)
        return [None if v is None else v.correct for v in verdicts]
