"""A short AWA-RL training run for the fault-injection tests (tests/test_fault_injection.py), resumable.

Usage: python tests/faults/train_job.py OUT_DIR TINY_MODEL INDEX_DIR P_FILE MAX_STEPS [live]

Generation replays the training tests' written paths (tests/dist/train_two_proc.py), with the path of each
trajectory chosen by the global step and its position in the batch, so a resumed run draws exactly what an
uninterrupted one draws; with `live`, the trainer's own policy generates (the transformers backend, short
turns), so a resumed run draws the same only if the trainer's random state and the rollout's batches are
restored exactly. Resumes from the newest complete checkpoint when there is one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dist"))

from test_train import make_cfg  # noqa: E402
from train_two_proc import VariantBackend, variants_for  # noqa: E402

from awarl.stages.questions import load_train_examples  # noqa: E402
from awarl.stages.train import run_train  # noqa: E402
from awarl.training.checkpoints import newest_complete  # noqa: E402


def main() -> int:
    from transformers import AutoTokenizer

    out, tiny, index, p_file, steps = sys.argv[1:6]
    live = sys.argv[6:7] == ["live"]
    limits = {"agent__max_new_tokens_per_turn": 12, "agent__max_trajectory_tokens": 60} if live else {}
    cfg = make_cfg(Path(out).parent, Path(tiny), Path(index), run__out_dir=out, estimate__out=p_file,
                   train__max_steps=int(steps), **limits)
    tok = AutoTokenizer.from_pretrained(tiny)
    if live:
        run_train(cfg, tokenizer=tok, final_eval=False, resume="latest" if newest_complete(out) else None)
        return 0
    variants = variants_for(load_train_examples(cfg.data, cfg.run.seed))
    per_step = cfg.train.per_device_train_batch_size * cfg.train.gradient_accumulation_steps

    def backend(trainer):
        b = VariantBackend(tok, variants)
        b.counter = trainer.state.global_step * per_step  # a function of the step, not of the process
        return b

    run_train(cfg, tokenizer=tok, backend_factory=backend, final_eval=False,
              resume="latest" if newest_complete(out) else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
