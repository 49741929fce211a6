"""torchrun script (gloo, CPU): two processes run real AWA-RL GRPO steps through `run_train`.

Usage: torchrun --standalone --nproc_per_node=2 tests/dist/train_two_proc.py OUT_DIR TINY_MODEL INDEX_DIR P_FILE

Each rank writes OUT_DIR/rank<r>.json with its final step, reward state, the logged reward statistics and
a checksum of its parameters; tests/test_train.py checks the ranks agree (DDP kept the replicas equal, the
reward statistics were all-reduced over the whole generation batch).

Also home of the replay backend the training tests use: it replays one of several written paths per
trajectory (correct / abstain / wrong, round-robin on the first turn, recognised from the first search on
later turns), so GRPO groups have reward variance and the searches insert real retrieved passages.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from awarl.agent.backends.base import Generation, finish
from awarl.io import shipped_data_dir

HOTPOT = shipped_data_dir() / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"


class VariantBackend:
    """Replays written model turns; which path a trajectory follows is picked on its first turn."""

    def __init__(self, tokenizer, variants: dict[str, list[list[str]]]):
        self.tok = tokenizer
        self.variants = variants
        self.counter = 0
        self.eos = int(tokenizer.eos_token_id)

    def generate(self, prompts, *, max_new_tokens, temperature, top_p=1.0, stop_strings=(), seed=None):
        out = []
        for p in prompts:
            ctx = self.tok.decode(p, skip_special_tokens=False)
            q = max((q for q in self.variants if q in ctx), key=len)
            after = ctx[ctx.find(q) + len(q):]
            turn = after.count("</information>")
            if turn == 0:
                path = self.variants[q][self.counter % len(self.variants[q])]
                self.counter += 1
            else:
                path = next(v for v in self.variants[q] if v[0] in after)
            ids = self.tok.encode(path[turn], add_special_tokens=False) if turn < len(path) else []
            g = finish(ids, [0.0] * len(ids), self.tok, stop_strings, {self.eos})
            if g.finish_reason == "length":  # a written turn without a stop string ends the message
                g = Generation(g.token_ids + [self.eos], g.logprobs + [0.0], "eos")
            out.append(g)
        return out


def variants_for(examples) -> dict[str, list[list[str]]]:
    """Per question: search the first context title then answer right (citing [1]); search another title
    then abstain; answer wrong at once."""
    out = {}
    for ex in examples:
        t0, t1 = ex.context[0].title, ex.context[1].title
        out[ex.question] = [
            [f"<search> {t0} </search>", f"<cite> 1 </cite> <answer> {ex.answers[0]} </answer>"],
            [f"<search> about {t1} </search>", "<answer> not enough information </answer>"],
            ["<answer> zebra crossing </answer>"],
        ]
    return out


def main() -> None:
    out_dir, tiny, index, p_file = (Path(a) for a in sys.argv[1:5])
    import torch
    from transformers import AutoTokenizer

    from awarl.config import config_from_dict
    from awarl.data.loaders import load_examples
    from awarl.stages.train import run_train

    n_train = 4
    cfg = config_from_dict({
        "run": {"name": "dist", "out_dir": str(out_dir / "run"), "seed": 0},
        "data": {"train": [{"path": str(HOTPOT), "format": "hotpotqa", "dataset": "hotpotqa", "limit": n_train}]},
        "retrieval": {"kind": "bm25", "index_dir": str(index), "topk": 2},
        "agent": {"max_turns": 2, "max_new_tokens_per_turn": 48, "max_trajectory_tokens": 700},
        "eval": {"limit": 1},
        "train": {"model": str(tiny), "num_generations": 4, "per_device_train_batch_size": 2,
                  "gradient_accumulation_steps": 2, "max_steps": 2, "save_steps": 2, "learning_rate": 5e-3,
                  "report_to": ["none"], "p_estimates": str(p_file)},
    })
    examples = load_examples(HOTPOT, format="hotpotqa", dataset="hotpotqa", limit=n_train, seed=0).examples
    tok = AutoTokenizer.from_pretrained(tiny)
    backend = VariantBackend(tok, variants_for(examples))
    summary = run_train(cfg, tokenizer=tok, backend_factory=lambda trainer: backend, final_eval=True)
    trainer = summary["trainer"]
    rank = trainer.accelerator.process_index
    with torch.no_grad():
        checksum = float(sum(p.double().sum() for p in trainer.model.parameters()))
    logs = [{k: v for k, v in h.items() if k.startswith("awarl/")} for h in trainer.state.log_history
            if "awarl/n" in h]
    (out_dir / f"rank{rank}.json").write_text(json.dumps({
        "rank": rank, "world": trainer.accelerator.num_processes, "global_step": summary["global_step"],
        "reward_state": {k: summary["reward_state"][k] for k in ("e_bar", "updates")},
        "checksum": checksum, "logs": logs, "eval": summary.get("eval"),
        "local_completions": len(trainer.rollout_func.last),
    }))


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
