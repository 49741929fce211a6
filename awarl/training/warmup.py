"""Supervised warm-up: teach a fresh model the agent protocol before RL.

A random-init model never emits `<search>` or `<answer>`, so GRPO would see only invalid trajectories
and learn nothing. The warm-up imitates a simple, honest teacher on the training questions:

    <search> question </search>  ->  [the real retriever's top-k passages]  ->
    <cite> n </cite> <answer> gold </answer>   if a gold answer appears in passage n
    <answer> not enough information </answer> otherwise

so the policy starts out answering when the retrieved evidence contains the answer and abstaining when
it does not; RL then calibrates that choice. Sequences are built exactly as the rollout engine builds
them (same prompt rendering, same information block tokens), and the loss covers model tokens only:
prompt and environment tokens are masked, as in GRPO.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awarl.agent.templates import Template, encode_environment, render_prompt
from awarl.data.types import QAExample
from awarl.io import atomic_write_folder, atomic_write_json, loads_json
from awarl.metrics import normalize_answer
from awarl.retrieval.types import Retriever

log = logging.getLogger(__name__)

# Written last into a warm-up model folder, with the warm-up's figures: the folder is complete.
WARMUP_INFO = "awarl_warmup.json"


@dataclass
class WarmupSequence:
    input_ids: list[int]
    loss_mask: list[int]  # 1 where the model is trained to produce the token
    answered: bool  # the teacher answered (evidence found) rather than abstained


def teacher_turns(template: Template, ex: QAExample, passages: list[Any], abstain_phrase: str
                  ) -> tuple[str, list[tuple[int, str, str, str, str]], str, bool]:
    """(first model turn, numbered passages, final model turn, answered) of the teacher trajectory."""
    tags = template.tags
    search = f"{tags.open('search')} {ex.question} {tags.close('search')}"
    numbered = [(i + 1, p.title, p.text, p.id, p.title_line) for i, p in enumerate(passages)]
    golds = [g for g in (normalize_answer(a) for a in ex.gold_answers) if g]
    support = next((n for n, title, text, *_ in numbered
                    if any(f" {g} " in f" {normalize_answer(title + ' ' + text)} " for g in golds)), None)
    answer = f"{tags.open('answer')} {ex.gold_answers[0] if support else abstain_phrase} {tags.close('answer')}"
    if support and template.citations:
        answer = f"{tags.open('cite')} {support} {tags.close('cite')}\n{answer}"
    # No leading newline: the information block already ends with one, and a tiny model that learns
    # "newline after a block" tends to loop on it.
    return search, numbered, answer, support is not None


def build_sequences(examples: list[QAExample], retriever: Retriever, template: Template, tokenizer: Any, topk: int,
                    abstain_phrase: str = "not enough information") -> list[WarmupSequence]:
    """Teacher trajectories as token ids with their loss masks (one batched retriever call)."""
    hits = retriever.search([ex.question for ex in examples], topk)
    out = []
    for ex, passages in zip(examples, hits, strict=True):
        first, numbered, final, answered = teacher_turns(template, ex, list(passages)[:topk], abstain_phrase)
        prompt = render_prompt(template, ex.question, tokenizer)
        model1 = tokenizer.encode(first, add_special_tokens=False)
        env = encode_environment(tokenizer, template.information_block(numbered))
        model2 = tokenizer.encode(final, add_special_tokens=False)
        ids = prompt + model1 + env + model2
        mask = [0] * len(prompt) + [1] * len(model1) + [0] * len(env) + [1] * len(model2)
        out.append(WarmupSequence(ids, mask, answered))
    return out


def first_turn(seq: WarmupSequence) -> WarmupSequence:
    """The prompt and the first model turn only (the search call): a short sequence."""
    start = seq.loss_mask.index(1)
    end = start
    while end < len(seq.loss_mask) and seq.loss_mask[end]:
        end += 1
    return WarmupSequence(seq.input_ids[:end], seq.loss_mask[:end], seq.answered)


def _collate(batch: list[WarmupSequence], pad: int) -> tuple[Any, Any, Any]:
    import torch

    length = max(len(s.input_ids) for s in batch)
    ids = torch.full((len(batch), length), pad, dtype=torch.long)
    labels = torch.full((len(batch), length), -100, dtype=torch.long)
    attn = torch.zeros((len(batch), length), dtype=torch.long)
    for i, s in enumerate(batch):
        n = len(s.input_ids)
        ids[i, :n] = torch.tensor(s.input_ids)
        attn[i, :n] = 1
        keep = torch.tensor(s.loss_mask, dtype=torch.bool)
        labels[i, :n] = torch.where(keep, ids[i, :n], torch.full_like(ids[i, :n], -100))
    return ids, attn, labels


def supervised_warmup(model: Any, tokenizer: Any, sequences: list[WarmupSequence], *, steps: int,
                      batch_size: int = 8, lr: float = 2e-3, seed: int = 0, progress: bool = True) -> list[float]:
    """Train `model` in place on the masked sequences; returns the loss of each step.

    Steps alternate between whole trajectories and their first turn alone: the search call is the hard
    part for a tiny model (it copies the question), and the short sequences teach it at a fraction of
    the cost, so twice as many of them go in a batch. AdamW, linear warm-up, cosine decay."""
    import torch
    from tqdm.auto import tqdm

    if not sequences:
        raise ValueError("supervised warm-up needs at least one sequence")
    if steps <= 0:
        return []
    torch.manual_seed(seed)
    rng = random.Random(seed)
    device = next(model.parameters()).device
    pools = [(sequences, batch_size), ([first_turn(s) for s in sequences], 2 * batch_size)]
    orders: list[list[int]] = [[], []]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    model.train()
    losses = []
    bar = tqdm(range(steps), desc="warm-up", unit="step", disable=not progress)
    for step in bar:
        pool, size = pools[step % 2]
        order = orders[step % 2]
        if len(order) < size:  # reshuffle once an epoch of this pool is used up
            order += rng.sample(range(len(pool)), len(pool))
        ids, attn, labels = _collate([pool[order.pop()] for _ in range(min(size, len(pool)))], pad)
        out = model(input_ids=ids.to(device), attention_mask=attn.to(device), labels=labels.to(device))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(out.loss.detach()))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return losses


def warmup_to_dir(model_dir: str | Path, out_dir: str | Path, examples: list[QAExample], retriever: Retriever,
                  template: Template, *, topk: int, steps: int, batch_size: int = 8, lr: float = 2e-3,
                  seed: int = 0, max_len: int = 1024, abstain_phrase: str = "not enough information") -> dict:
    """Load a checkpoint, warm it up on teacher trajectories of `examples`, save it to `out_dir`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    seqs = build_sequences(examples, retriever, template, tokenizer, topk, abstain_phrase)
    # A cut sequence would lose its final answer turn, the part the warm-up exists to teach.
    long = sum(len(s.input_ids) > max_len for s in seqs)
    seqs = [s for s in seqs if len(s.input_ids) <= max_len]
    if long:
        log.info("warm-up: %d teacher trajectories longer than %d tokens left out", long, max_len)
    answered = sum(s.answered for s in seqs)
    log.info("warm-up on %d teacher trajectories (%d answer, %d abstain)", len(seqs), answered,
             len(seqs) - answered)
    losses = supervised_warmup(model, tokenizer, seqs, steps=steps, batch_size=batch_size, lr=lr, seed=seed)
    info = {"sequences": len(seqs), "left_out_too_long": long, "teacher_answered": answered,
            "first_loss": losses[0] if losses else None,
            "final_loss": sum(losses[-10:]) / len(losses[-10:]) if losses else None, "steps": steps}

    def fill(tmp: Path) -> None:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        atomic_write_json(tmp / WARMUP_INFO, info)  # last: the folder is complete

    # Atomic (a temporary sibling renamed): a kill between the model and the tokenizer used to leave a folder
    # with config.json, which a rerun took as done and failed on (a tokenizer of one token).
    atomic_write_folder(out_dir, WARMUP_INFO, fill)
    return info


def read_warmup(out_dir: str | Path) -> dict | None:
    """The info of a complete warm-up folder (`WARMUP_INFO`, written last), or None when there is none."""
    path = Path(out_dir) / WARMUP_INFO
    if not path.is_file():
        return None
    try:
        data = loads_json(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return None
    return data if isinstance(data, dict) else None
