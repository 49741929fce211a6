"""torchrun script (gloo, CPU): each rank scores a different slice of one generation batch.

Usage: torchrun --standalone --nproc_per_node=2 tests/dist/reward_allreduce.py OUT_DIR
Each rank writes OUT_DIR/rank<r>.json with its rewards and the batch statistics it computed; the test checks
that both ranks agree and match a single-process run over the whole batch.
"""

from __future__ import annotations

import json
import os
import sys

import torch.distributed as dist

from awarl.config import RewardConfig
from awarl.rewards.trl_reward import AwaRLReward

# One generation batch of 8 completions; the group of query "s" straddles the two ranks.
FULL = {
    "outcome": ["abstain", "abstain", "wrong", "abstain", "correct", "abstain", "abstain", "abstain"],
    "qid": ["h", "h", "s", "s", "s", "e", "e", "e"],
    "p_i": [0.04, 0.04, 0.3, 0.3, 0.3, 0.81, 0.81, 0.81],
}


def main() -> None:
    out_dir = sys.argv[1]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    half = len(FULL["qid"]) // world
    sl = slice(rank * half, (rank + 1) * half)
    results = {}
    for strategy in ("awarl", "bapo"):
        reward = AwaRLReward(RewardConfig(strategy=strategy, beta=0.5, p_online="ema", refusal_warmup=0.0))
        per_call = []
        for _ in range(3):  # three steps: Ē and the online p must stay identical on every rank
            kw = {k: v[sl] for k, v in FULL.items()}
            n = len(kw["qid"])
            rewards = reward(prompts=["p"] * n, completions=["c"] * n, **kw)
            per_call.append({"rewards": rewards, "stats": reward.last_stats, "p_online": dict(reward.p_online)})
        results[strategy] = per_call
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
