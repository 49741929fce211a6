"""Multi-turn search rollouts, shared by evaluation and TRL training (`rollout_func`).

Each search's result comes back as an information block appended as token ids with env_mask 0 (masked
out of the policy loss). The ids the model produced are kept as produced: generated text is never decoded
and re-encoded, so the trainer scores exactly the tokens that were sampled.

Two ways to drive a backend, with the same trajectories (tests/test_rollout_equivalence.py):
- continuous, for a backend that opens a `Session` (the transformers backend): every trajectory advances on
  its own, its context kept between turns (only the new information block is prefilled); a turn that ends
  with `</search>` pauses it while the others keep generating; the searches that became ready in one tick
  go to the retriever in ONE `retriever.search(queries, k)` call on a worker thread; a finished
  trajectory's slot goes to the next waiting question;
- one `generate` per turn for the others (scripted, vLLM): all active trajectories generate together until
  `</search>`, `</answer>` or eos, and the turn's searches go out in one call.

A failed search (`RetrievalClientError`: the server unreachable after the client's retries, an error answer,
a malformed one) costs only itself: a batched call that fails is retried query by query, and a query that
still fails gets an empty information block, counted in the trajectory's `failed_searches` (and
`last_stats`). `retrieval.max_failed_searches` failures in a row stop the run with the last error.

Endings (`stop_reason`): "answer" (the model closed `</answer>`), "eos" (it ended its message),
"max_turns" (a search beyond `agent.max_turns`: no retrieval, invalid), "token_budget" (the turn hit
`max_new_tokens_per_turn` or the response hit `max_trajectory_tokens`: truncated, invalid).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from awarl.agent.backends import make_backend
from awarl.agent.backends.base import Backend, Seed, Session, stream_seed
from awarl.agent.parser import ParsedTrajectory, parse_trajectory
from awarl.agent.templates import (
    Template,
    abstention_phrases,
    encode_environment,
    load_template,
    render_prompt,
)
from awarl.config import AgentConfig, GenerationConfig, RetrievalConfig
from awarl.retrieval.client import RetrievalClientError
from awarl.retrieval.types import Passage, Retriever

log = logging.getLogger(__name__)

# Stop strings are short; decoding this many trailing ids covers one (more for a long tag name: _tail_tokens).
_TAIL_TOKENS = 16


@dataclass
class Trajectory:
    prompt_ids: list[int]
    completion_ids: list[int]   # model tokens and environment tokens, in order, exactly as produced
    env_mask: list[int]         # 1 = model-generated (trainable), 0 = environment-inserted
    logprobs: list[float]       # per completion token (sampling logprob; 0.0 at env tokens)
    response_text: str          # decode(completion_ids) (skip special tokens)
    parsed: ParsedTrajectory
    passages: list[dict]        # all shown passages: {"number", "id", "title", "text"} in original text
    stop_reason: str            # "answer" | "eos" | "max_turns" | "token_budget"
    failed_searches: int = 0    # searches whose retrieval failed (shown an empty information block)


@dataclass
class _State:
    prompt: list[int]
    completion: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    passages: list[dict] = field(default_factory=list)
    searches: int = 0
    failed_searches: int = 0
    budget: int = 0             # max new tokens of the current turn
    stop_reason: str | None = None
    # The response as the parser reads it, one piece per model turn / information block: a turn that ended
    # at a stop string is cut right after it (the token that completed it may carry more text, `>.`).
    text_parts: list[str] = field(default_factory=list)

    def add(self, ids: list[int], lps: list[float] | None, model: bool) -> None:
        self.completion.extend(ids)
        self.mask.extend([1 if model else 0] * len(ids))
        self.logprobs.extend(lps if lps is not None else [0.0] * len(ids))


def _as_passage(p: Any) -> Passage:
    if isinstance(p, Passage):
        return p
    if isinstance(p, dict):  # Search-R1 server shape: {"document": {"id", "contents"}, "score"}
        doc = p.get("document", p)
        if "contents" in doc:
            return Passage.from_contents(str(doc.get("id", "")), str(doc["contents"]), float(p.get("score", 0.0)))
        return Passage(str(doc.get("id", "")), str(doc.get("title", "")), str(doc.get("text", "")))
    raise TypeError(f"retriever returned {type(p).__name__}, expected Passage or dict")


class _Searches:
    """The searches of paused trajectories: those that became ready since the last call go out together, one
    `retriever.search` call at a time, on a worker thread (generation goes on meanwhile).

    When the passages rejoin is the schedule (`generation.search_lag_steps`): with a lag of N, N ticks of the
    rollout loop after the call went out, waiting for it then if it is not back, so every batch the model
    sees is a function of the tokens alone; with None, at the first tick after the call is back, which never
    waits but makes the batches, hence the floating-point sums and rarely a sampled token, depend on timing."""

    def __init__(self, search: Callable[[list[str]], list[list[Passage] | None]], lag: int | None = 1) -> None:
        self.search = search
        self.lag = lag
        self.ready: list[tuple[int, str]] = []
        self.flight: tuple[list[tuple[int, str]], Future, int] | None = None   # (batch, call, tick sent)
        self.waited_s = 0.0   # time the loop stood still for a due call (with a lag)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="awarl-search")

    def __enter__(self) -> _Searches:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def put(self, key: int, query: str) -> None:
        self.ready.append((key, query))

    def in_flight(self) -> bool:
        return self.flight is not None

    def dispatch(self, tick: int) -> None:
        if self.ready and self.flight is None:
            batch, self.ready = self.ready, []
            self.flight = (batch, self.pool.submit(self.search, [q for _, q in batch]), tick)

    def collect(self, tick: int, *, idle: bool) -> list[tuple[int, str, list[Passage] | None]]:
        """The results of the call in flight if they rejoin at `tick` (waiting for the call when they do):
        with a lag, once `lag` ticks have passed since it went out; without, once it is back (waiting for it
        when the loop is `idle`: nothing else to run). What became ready meanwhile goes out at once."""
        if self.flight is None:
            return []
        batch, future, sent = self.flight
        if (tick - sent < self.lag) if self.lag is not None else (not idle and not future.done()):
            return []
        self.flight = None
        t0 = time.monotonic()
        hits = future.result()
        if self.lag is not None:
            self.waited_s += time.monotonic() - t0
        self.dispatch(tick)
        return [(key, query, h) for (key, query), h in zip(batch, hits, strict=True)]


_WAIT_NOTED: list[bool] = []   # once per process: training builds an engine per step


def _note_search_wait(waited_s: float, total_s: float, lag: int | None) -> None:
    """Warn (once) when the lagged schedule made a rollout stand still for a large share of its time: the
    retriever is slower than `lag` decode steps, and a larger lag, or none, would keep generating."""
    if _WAIT_NOTED or waited_s < 1.0 or waited_s < 0.25 * total_s:
        return
    _WAIT_NOTED.append(True)
    log.warning("rollout: generation stood still %.1f of %.1f s waiting for searches due after %s decode step(s) "
                "(generation.search_lag_steps): the retriever is slower than that; raise search_lag_steps to about "
                "its latency over one decode step's, or set it to null (as soon as back, not repeatable run to run)",
                waited_s, total_s, lag)


class RolloutSettings(Protocol):
    """The sections of a run config an engine is built from (`RolloutEngine.from_config`); an AwarlConfig
    is one."""

    agent: AgentConfig
    retrieval: RetrievalConfig
    generation: GenerationConfig


class RolloutEngine:
    def __init__(self, backend: Backend, tokenizer: Any, retriever: Retriever, template: Template,
                 agent_cfg: AgentConfig, topk: int, max_failed_searches: int = 8,
                 search_lag_steps: int | None = 1) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.retriever = retriever
        self.template = template
        self.cfg = agent_cfg
        self.topk = int(topk)
        self.max_failed_searches = int(max_failed_searches)
        if search_lag_steps is not None and search_lag_steps < 1:
            raise ValueError(f"search_lag_steps must be >= 1 or None, got {search_lag_steps}")
        self.search_lag_steps = search_lag_steps
        self._failed_in_a_row = 0
        self._failed = 0   # failed searches of the running `run`
        tags = template.tags
        self.search_open, self.search_close = tags.open("search"), tags.close("search")
        self.answer_close = tags.close("answer")
        # enough trailing ids to hold either stop string (a token is at least one character), as the backends'
        # StopMatcher reads: a long tag name took more than 16 tokens, and its search was read as an eos
        self._tail_tokens = max(_TAIL_TOKENS, 2 * len(self.answer_close), 2 * len(self.search_close))
        self.stop_strings = [self.search_close, self.answer_close]
        if hasattr(backend, "use_template"):  # a replaying backend counts this template's information blocks
            backend.use_template(template)
        context = getattr(backend, "context_len", None)
        self.context_len: int | None = context if isinstance(context, int) else None
        # The template's phrases (what its prompt teaches) plus the run's configured ones.
        self.abstention_phrases = abstention_phrases(template, agent_cfg.abstention_phrases)
        self._tag_map = {r: getattr(tags, r) for r in ("think", "search", "information", "cite", "answer")}
        self._number_re = template.passage_number_pattern()
        # Counters of the latest run (engine kind; decode steps, slot use, ... for a session), for benchmarks.
        self.last_stats: dict[str, Any] = {}

    @classmethod
    def from_config(cls, cfg: RolloutSettings, tokenizer: Any, retriever: Retriever, *, model: Any = None,
                    backend: Backend | None = None, template: Template | None = None) -> RolloutEngine:
        """The engine of a run config, used by evaluation, estimation and training alike: `backend` as given
        (training builds it per step), else the `generation:` backend over `model` (a path / hub id or a
        loaded model object); the template of `agent.template` unless one is given."""
        if backend is None:
            backend = make_backend(cfg.generation, model, tokenizer)
        return cls(backend, tokenizer, retriever, template or load_template(cfg.agent.template), cfg.agent,
                   cfg.retrieval.topk, cfg.retrieval.max_failed_searches, cfg.generation.search_lag_steps)

    # ------------------------------------------------------------------ public
    def parse(self, response_text: str) -> ParsedTrajectory:
        """Parse a response with this engine's template, limits and abstention phrases."""
        return parse_trajectory(response_text, max_turns=self.cfg.max_turns, phrases=self.abstention_phrases,
                                tags=self._tag_map, passage_pattern=self._number_re)

    def run(self, questions: list[str], *, temperature: float, top_p: float = 1.0, seed: Seed = None,
            prompt_ids: list[list[int]] | None = None) -> list[Trajectory]:
        """One trajectory per question. `seed`: one seed for the call (trajectory i samples from its stream
        `sequence_seed(seed, i)`: its position), or one seed per question (its stream whatever else is in the
        batch: `question_seed`, so a resumed question is sampled as in an uninterrupted run)."""
        if prompt_ids is not None and len(prompt_ids) != len(questions):
            raise ValueError(f"prompt_ids has {len(prompt_ids)} entries for {len(questions)} questions")
        if seed is not None and not isinstance(seed, int) and len(seed) != len(questions):
            raise ValueError(f"{len(seed)} seeds for {len(questions)} questions")
        prompts = prompt_ids if prompt_ids is not None else [render_prompt(self.template, q, self.tokenizer)
                                                             for q in questions]
        states = [_State(list(p)) for p in prompts]
        full = sum(len(p) >= self.context_len for p in prompts) if self.context_len is not None else 0
        if full:  # each ends at once as an empty, invalid token_budget trajectory: said, not left to be found
            log.warning("rollout: %d of %d prompts fill the backend's context (%d tokens) on their own; their "
                        "trajectories end empty (token_budget): raise the engine's max_model_len or shorten "
                        "the prompt", full, len(prompts), self.context_len)
        self._failed = 0
        session = self._open_session(states, temperature, top_p, seed)
        if session is None:
            self._run_turns(states, temperature, top_p, seed)
            self.last_stats = {"engine": "turns", "failed_searches": self._failed}
        else:
            t0, waited_s = time.monotonic(), 0.0
            try:
                waited_s = self._run_continuous(states, session)
            finally:
                self.last_stats = {"engine": "continuous", **session.close(), "failed_searches": self._failed,
                                   "search_wait_s": round(waited_s, 3)}
            _note_search_wait(waited_s, time.monotonic() - t0, self.search_lag_steps)
        return [self._finish(s) for s in states]

    # ------------------------------------------------------------------ one generate per turn
    def _run_turns(self, states: list[_State], temperature: float, top_p: float, seed: Seed) -> None:
        """All active trajectories generate one turn together; the turn's searches go out in one call."""
        turn = 0
        while True:
            running = [i for i, s in enumerate(states) if s.stop_reason is None]
            if not running:
                break
            for i in running:
                states[i].budget = self._turn_budget(states[i])
            running = [i for i in running if not self._out_of_room(states[i])]
            if not running:
                break
            active = [states[i] for i in running]
            turn_seed: Seed
            if seed is None:
                turn_seed = None
            elif isinstance(seed, int):  # by the trajectory's place in the call, not among those still running
                turn_seed = [seed + 7919 * turn + i for i in running]
            else:   # each trajectory's own stream, at this turn
                turn_seed = [stream_seed(int(seed[i]), turn) for i in running]
            gens = self.backend.generate(
                [s.prompt + s.completion for s in active], max_new_tokens=max(s.budget for s in active),
                temperature=temperature, top_p=top_p, stop_strings=self.stop_strings, seed=turn_seed)
            if len(gens) != len(active):
                raise RuntimeError(f"backend returned {len(gens)} generations for {len(active)} prompts")
            pending: list[tuple[_State, str]] = []
            for s, g in zip(active, gens, strict=True):
                query = self._model_turn(s, g.token_ids, g.logprobs, g.finish_reason)
                if query is not None:
                    pending.append((s, query))
            if pending:
                for (s, q), hits in zip(pending, self._search([q for _, q in pending]), strict=True):
                    self._insert(s, q, hits)
            turn += 1

    # ------------------------------------------------------------------ continuous
    def _open_session(self, states: list[_State], temperature: float, top_p: float, seed: Seed) -> Any:
        opener = getattr(self.backend, "open_session", None)
        if opener is None or not states:
            return None
        budget = self.cfg.max_trajectory_tokens
        return opener(n_sequences=len(states), max_len=max(len(s.prompt) for s in states) + budget,
                      max_new_total=budget, temperature=temperature, top_p=top_p, stop_strings=self.stop_strings,
                      seed=seed)

    def _run_continuous(self, states: list[_State], session: Session) -> float:
        """Each trajectory advances on its own: a turn that ends with a search pauses it until its passages
        are back, the others keep generating, and a finished trajectory's slot goes to the next waiting one.
        The searches that became ready in one tick go out together, on a worker thread. Returns the seconds
        generation stood still for searches due under the lag."""
        waiting = deque(range(len(states)))
        live = tick = 0
        # a session whose steps are timed (a server's replies) cannot repeat its batches: waiting buys nothing
        lag = None if getattr(session, "timed_steps", False) else self.search_lag_steps
        with _Searches(self._search, lag) as searches:
            while waiting or live:
                tick += 1
                live += self._admit(states, waiting, session)
                for end in session.step():
                    s = states[end.key]
                    query = self._model_turn(s, end.token_ids, end.logprobs, end.finish_reason)
                    if query is None:
                        session.release(end.key)
                        live -= 1
                    else:
                        searches.put(end.key, query)
                searches.dispatch(tick)
                idle = not session.busy() and not (waiting and session.free_slots())
                if idle and not searches.in_flight():
                    if live:
                        raise RuntimeError(f"rollout: {live} trajectories neither running nor searching")
                    continue
                for key, query, hits in searches.collect(tick, idle=idle):
                    live -= self._resume(states[key], key, query, hits, session)
        return searches.waited_s

    def _admit(self, states: list[_State], waiting: deque, session: Session) -> int:
        admitted = 0
        while waiting and session.free_slots():
            key = waiting.popleft()
            s = states[key]
            s.budget = self._turn_budget(s)
            if self._out_of_room(s):
                continue
            session.add(key, s.prompt, max_new_tokens=s.budget)
            admitted += 1
        return admitted

    def _resume(self, s: _State, key: int, query: str, hits: list[Passage] | None, session: Session) -> int:
        """Append the search's block; 1 when that ends the trajectory (its slot is released), else 0."""
        block = self._insert(s, query, hits)
        if s.stop_reason is not None:
            session.release(key)
            return 1
        s.budget = self._turn_budget(s)
        if self._out_of_room(s):
            session.release(key)
            return 1
        session.add(key, block, max_new_tokens=s.budget)
        return 0

    @staticmethod
    def _out_of_room(s: _State) -> bool:
        """A turn with no token left to generate (a prompt that fills the backend's context) ends the
        trajectory as `token_budget`, as the trajectory budget does, instead of a request the engine refuses."""
        if s.budget > 0:
            return False
        s.stop_reason = "token_budget"
        return True

    # ------------------------------------------------------------------ steps
    def _left(self, s: _State) -> int:
        """Tokens the trajectory may still add: its budget, and the backend's context (a vLLM engine's
        max_model_len) after its prompt and what it holds."""
        left = self.cfg.max_trajectory_tokens - len(s.completion)
        if self.context_len is not None:
            left = min(left, self.context_len - len(s.prompt) - len(s.completion))
        return left

    def _turn_budget(self, s: _State) -> int:
        return min(self.cfg.max_new_tokens_per_turn, self._left(s))

    def _model_turn(self, s: _State, token_ids: list[int], logprobs: list[float], reason: str) -> str | None:
        """Record a model turn (cut to its budget); returns its search query, or None when it ended the
        trajectory."""
        ids, lps = list(token_ids), list(logprobs)
        if len(lps) != len(ids):  # env_mask and logprobs must stay aligned with completion_ids
            raise RuntimeError(f"{type(self.backend).__name__} returned {len(lps)} logprobs for {len(ids)} tokens")
        if len(ids) > s.budget:
            ids, lps, reason = ids[:s.budget], lps[:s.budget], "length"
        s.add(ids, lps, model=True)
        return self._turn_action(s, ids, reason)

    def _turn_action(self, s: _State, ids: list[int], reason: str) -> str | None:
        """Set the stop reason of a finished trajectory, or return the query of a search turn."""
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        s.text_parts.append(self._turn_text(text, reason))
        if reason == "length":
            s.stop_reason = "token_budget"
            return None
        if reason == "eos":
            s.stop_reason = "eos"
            return None
        # The stop string need not end the text: a BPE token can complete it and carry more (`>.`, `><`,
        # `>\n\n` in Qwen's vocabulary), and the ids are kept as produced. The turn was cut at its first
        # stop string, so the one found last in the tail is the one that ended it.
        tail = self.tokenizer.decode(ids[-self._tail_tokens:], skip_special_tokens=False)
        at_answer, at_search = tail.rfind(self.answer_close), tail.rfind(self.search_close)
        if at_answer < 0 and at_search < 0:  # a backend reported "stop" without a stop string
            s.stop_reason = "eos"
            return None
        if at_answer > at_search:
            s.stop_reason = "answer"
            return None
        if s.searches >= self.cfg.max_turns:
            s.stop_reason = "max_turns"
            return None
        s.searches += 1
        body = text[: text.rfind(self.search_close)]
        start = body.rfind(self.search_open)
        return (body[start + len(self.search_open):] if start >= 0 else body).strip()

    def _turn_text(self, text: str, reason: str) -> str:
        """A model turn's text (decoded) for the parser: cut right after its stop string when one ended it. The
        ids stay as produced (the trainer scores the sampled tokens); only the trailing characters of the token
        that completed the stop string are not protocol text (`</answer>.` is a valid answer)."""
        if reason != "stop":
            return text
        ends = [text.find(stop) + len(stop) for stop in self.stop_strings if stop in text]
        return text[:min(ends)] if ends else text

    def _search(self, queries: list[str]) -> list[list[Passage] | None]:
        """The passages of each query, from ONE retriever call (None: its retrieval failed). An empty query is
        not sent: it gets an empty block and the parser marks it invalid."""
        sent = [q for q in queries if q]
        found = self._retrieve(sent) if sent else []
        if len(found) != len(sent):
            raise RuntimeError(f"retriever returned {len(found)} result lists for {len(sent)} queries")
        results = iter(found)
        out: list[list[Passage] | None] = []
        for q in queries:
            hits = next(results) if q else []
            out.append(None if hits is None else [_as_passage(p) for p in hits][: self.topk])
        return out

    def _retrieve(self, queries: list[str]) -> list[list[Passage] | None]:
        """`retriever.search` of the queries; when the call fails, each query alone, so one bad answer costs
        only its own search (None)."""
        try:
            found: list[list[Passage] | None] = list(self.retriever.search(queries, self.topk))
        except RetrievalClientError as e:
            if len(queries) == 1:
                self._search_failed(queries[0], e)
                return [None]
            log.warning("a search call of %d queries failed (%s); searching them one by one", len(queries), e)
            found = []
            for q in queries:
                try:
                    (hits,) = self.retriever.search([q], self.topk)
                except RetrievalClientError as e1:
                    self._search_failed(q, e1)
                    found.append(None)
                else:
                    self._failed_in_a_row = 0
                    found.append(hits)
            return found
        self._failed_in_a_row = 0
        return found

    def _search_failed(self, query: str, error: Exception) -> None:
        self._failed += 1
        self._failed_in_a_row += 1
        if self._failed_in_a_row > self.max_failed_searches:
            raise RetrievalClientError(f"{self._failed_in_a_row} searches in a row failed "
                                       f"(retrieval.max_failed_searches={self.max_failed_searches}); last: {error}")
        log.warning("search %r failed, shown no passages: %s", query[:80], error)

    def _insert(self, s: _State, query: str, hits: list[Passage] | None) -> list[int]:
        """Append a search's information block (cut at the trajectory budget; empty when its retrieval failed:
        `hits` None); returns its ids. A block that reaches the budget ends the trajectory (`token_budget`): no
        token is left for another turn."""
        if hits is None:
            s.failed_searches += 1
            hits = []
        numbered = []
        cumulative = self.template.information.numbering == "cumulative"
        for j, p in enumerate(hits):
            number = len(s.passages) + 1 if cumulative else j + 1
            s.passages.append({"number": number, "id": p.id, "title": p.title, "text": p.text})
            numbered.append((number, p.title, p.text, p.id, p.title_line))
        block = encode_environment(self.tokenizer, self.template.information_block(numbered))
        left = self._left(s)
        if len(block) >= left:
            block = block[:max(left, 0)]
            s.stop_reason = "token_budget"
        s.add(block, None, model=False)
        s.text_parts.append(self.tokenizer.decode(block, skip_special_tokens=True))
        return block

    def _finish(self, s: _State) -> Trajectory:
        text = self.tokenizer.decode(s.completion, skip_special_tokens=True)
        parsed = self.parse("".join(s.text_parts))
        forced = {"token_budget": "token budget exceeded", "max_turns": "search beyond max turns"}.get(
            s.stop_reason or "")
        if forced and (parsed.valid or s.stop_reason == "token_budget"):
            parsed = replace(parsed, valid=False, invalid_reason=forced)
        return Trajectory(prompt_ids=s.prompt, completion_ids=s.completion, env_mask=s.mask,
                          logprobs=s.logprobs, response_text=text, parsed=parsed, passages=s.passages,
                          stop_reason=s.stop_reason or "eos", failed_searches=s.failed_searches)
