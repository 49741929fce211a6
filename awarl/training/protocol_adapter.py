"""The agent protocol taught to a released checkpoint with LoRA, and the adapter folded back in.

A released instruct model answers in prose: SmolLM2-135M-Instruct never opens a `<search>` with the awarl
prompt (12 of 12 shipped questions `invalid`). The same supervised warm-up as the tiny model's
(awarl/training/warmup.py: the evidence-checking teacher's trajectories, loss on model tokens only, whole
trajectories alternating with first turns) trains LoRA adapters instead of every weight, so the result is a
few MB that ships under data/ and is merged into the converted checkpoint in seconds. On 2 CPU cores the
training itself takes tens of minutes, too long for `make demo-real`; `awarl model protocol-adapter`
reproduces it and `adapter_info.json` beside the adapter records its command, seed, data and measured cost.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from awarl.agent.templates import Template
from awarl.data.types import QAExample
from awarl.io import atomic_write_folder, atomic_write_json, file_sha256, loads_json
from awarl.retrieval.types import Retriever
from awarl.training.warmup import build_sequences, supervised_warmup

log = logging.getLogger(__name__)

ADAPTER_INFO = "adapter_info.json"
MERGED_INFO = "awarl_adapter.json"


def _base_identity(base_dir: Path) -> dict[str, Any]:
    """What names the base weights: the conversion record (GGUF sha256) when there is one, else a hash of
    the weight files."""
    from awarl.models.pretrained import read_source

    src = read_source(base_dir)
    if src:
        return {"gguf_sha256": src["sha256"], "file": src["file"], "package": src.get("package")}
    files = sorted(base_dir.glob("*.safetensors"))
    return {"weights_sha256": {f.name: file_sha256(f) for f in files}}


def train_protocol_adapter(base_dir: str | Path, out_dir: str | Path, examples: list[QAExample], retriever: Retriever,
                           template: Template, *, topk: int, steps: int, batch_size: int, lr: float, seed: int,
                           max_len: int, r: int, alpha: int, target_modules: list[str],
                           abstain_phrase: str = "not enough information", command: str = "") -> dict[str, Any]:
    """LoRA adapters for `base_dir` trained on the teacher trajectories of `examples`; saved to `out_dir`
    (adapter_model.safetensors, adapter_config.json, adapter_info.json), atomically. Returns the info."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, out = Path(base_dir), Path(out_dir)
    t0 = time.time()
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    seqs = build_sequences(examples, retriever, template, tokenizer, topk, abstain_phrase)
    long = sum(len(s.input_ids) > max_len for s in seqs)
    seqs = [s for s in seqs if len(s.input_ids) <= max_len]
    model = get_peft_model(model, LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0,
                                             target_modules=list(target_modules), task_type="CAUSAL_LM"))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("protocol adapter: %d teacher trajectories (%d answer), %d trainable parameters, %d steps",
             len(seqs), sum(s.answered for s in seqs), trainable, steps)
    t_train = time.time()
    losses = supervised_warmup(model, tokenizer, seqs, steps=steps, batch_size=batch_size, lr=lr, seed=seed)
    train_s = time.time() - t_train
    info = {
        "base": _base_identity(base), "template": template.name, "topk": topk, "seed": seed,
        "sequences": len(seqs), "left_out_too_long": long, "teacher_answered": sum(s.answered for s in seqs),
        "steps": steps, "batch_size": batch_size, "lr": lr, "max_len": max_len,
        "lora": {"r": r, "alpha": alpha, "target_modules": list(target_modules)}, "trainable_parameters": trainable,
        "first_loss": losses[0] if losses else None,
        "final_loss": sum(losses[-10:]) / len(losses[-10:]) if losses else None,
        "losses": [round(x, 4) for x in losses],
        "cost": {"train_seconds": round(train_s, 1), "total_seconds": round(time.time() - t0, 1),
                 "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count()},
        "command": command,
    }

    def fill(tmp: Path) -> None:
        model.save_pretrained(str(tmp), safe_serialization=True)
        (tmp / "README.md").unlink(missing_ok=True)  # peft's blank model card
        # The adapter names its base by what identifies the weights, not by this machine's path to them.
        cfg_path = tmp / "adapter_config.json"
        cfg = loads_json(cfg_path.read_text())
        cfg["base_model_name_or_path"] = (info["base"].get("package") or {}).get("shortcut") or base.name
        atomic_write_json(cfg_path, cfg)
        atomic_write_json(tmp / ADAPTER_INFO, info)

    atomic_write_folder(out, ADAPTER_INFO, fill)
    return info


def merge_adapter(base_dir: str | Path, adapter_dir: str | Path, out_dir: str | Path) -> Path:
    """`base_dir` with the LoRA adapters of `adapter_dir` folded in, as a full folder at `out_dir` (atomic; an
    `out_dir` already holding this merge is kept). Refuses an adapter trained on other base weights."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, adapter, out = Path(base_dir), Path(adapter_dir), Path(out_dir)
    info_path = adapter / ADAPTER_INFO
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{adapter}: no adapter_config.json (not a LoRA adapter folder)")
    info = loads_json(info_path.read_text()) if info_path.is_file() else {}
    want, have = info.get("base"), _base_identity(base)
    if want and {k: v for k, v in want.items() if k != "package"} != {k: v for k, v in have.items()
                                                                      if k != "package"}:
        raise ValueError(f"{adapter}: trained on other base weights ({want}) than {base} ({have})")
    record = {"base": have, "adapter": str(adapter),
              "adapter_sha256": file_sha256(adapter / "adapter_model.safetensors")}
    done = out / MERGED_INFO
    if done.is_file():
        kept = loads_json(done.read_text())
        # this adapter on these base weights (an adapter without adapter_info.json names no base of its own)
        if kept.get("adapter_sha256") == record["adapter_sha256"] and kept.get("base") == record["base"]:
            return out
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    try:
        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    except RuntimeError as e:  # peft's size mismatch: an adapter of another architecture
        raise ValueError(f"{adapter}: does not fit the base model {base} "
                         f"({' '.join(str(e).split())[:300]})") from None
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    def write(tmp: Path) -> None:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        atomic_write_json(tmp / MERGED_INFO, record)

    atomic_write_folder(out, MERGED_INFO, write)
    return out
