"""Resume never trusts a partial checkpoint (awarl/training/checkpoints.py): a kill during a save used to leave
checkpoint-N with the model but no trainer_state.json, and `--resume` failed instead of falling back to
checkpoint-N-1; a checkpoint without the reward state resumed with a warning and Ē restarted at 0."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import test_train
from test_train import VariantBackend, make_cfg, variants_for, write_estimates

from awarl.rewards.trl_reward import STATE_FILE
from awarl.training.checkpoints import (
    MARKER,
    incomplete_reason,
    mark_complete,
    newest_complete,
    resolve_resume,
)

# The training tests' session fixtures (four real HotpotQA questions and the BM25 index of their contexts).
closed_index = test_train.closed_index
train_examples = test_train.train_examples


def fake_checkpoint(root: Path, step: int, *, state: bool = True, reward: bool = True, mark: bool = True) -> Path:
    ckpt = root / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"x" * 100)
    if state:
        (ckpt / "trainer_state.json").write_text("{}")
    if reward:
        (ckpt / STATE_FILE).write_text("{}")
    if mark:
        mark_complete(ckpt, step)
    return ckpt


def test_newest_complete_skips_a_save_that_did_not_finish(tmp_path, caplog):
    fake_checkpoint(tmp_path, 1)
    fake_checkpoint(tmp_path, 10)
    fake_checkpoint(tmp_path, 20, state=False, reward=False, mark=False)  # killed inside the save
    assert newest_complete(tmp_path) == tmp_path / "checkpoint-10"
    assert "checkpoint-20" in caplog.text and "trainer_state.json" in caplog.text
    # a file truncated after the save (or a marker from another save) is not trusted either
    (tmp_path / "checkpoint-10" / "model.safetensors").write_bytes(b"x")
    assert "model.safetensors" in incomplete_reason(tmp_path / "checkpoint-10")
    assert resolve_resume(tmp_path, "latest") == tmp_path / "checkpoint-1"


def test_no_complete_checkpoint_is_an_error_that_lists_the_incomplete_ones(tmp_path):
    fake_checkpoint(tmp_path, 5, mark=False)
    with pytest.raises(FileNotFoundError, match=r"no complete checkpoint-N .*checkpoint-5"):
        resolve_resume(tmp_path, "latest")


def test_a_named_checkpoint_without_reward_state_is_refused_with_the_override(tmp_path):
    ckpt = fake_checkpoint(tmp_path, 3, reward=False, mark=False)
    with pytest.raises(FileNotFoundError, match=r"awarl_reward_state.json.*--reset-reward-state"):
        resolve_resume(tmp_path, str(ckpt))
    assert resolve_resume(tmp_path, str(ckpt), reset_reward_state=True) == ckpt
    assert resolve_resume(tmp_path, str(ckpt), reward_state_needed=False) == ckpt  # e.g. plain GRPO
    with pytest.raises(FileNotFoundError, match="trainer_state.json"):
        resolve_resume(tmp_path, str(fake_checkpoint(tmp_path, 4, state=False, mark=False)))


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory, tiny_dir, closed_index, train_examples):
    """Two real GRPO steps, a checkpoint after each, under linear decay (TRL's default; the shipped schedule is
    constant): a decaying schedule is what extending a finished run must recompute."""
    from transformers import AutoTokenizer

    from awarl.stages.train import run_train

    cfg = make_cfg(tmp_path_factory.mktemp("ckpt"), tiny_dir, closed_index, train__lr_scheduler_type="linear")
    write_estimates(cfg, train_examples, [0.0, 0.9, 0.5, 0.2])
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    backend = VariantBackend(tok, variants_for(train_examples))
    run_train(cfg, tokenizer=tok, backend_factory=lambda t: backend, final_eval=False)
    return cfg, tok, backend


def resume(cfg, tok, backend, out: Path, steps: int, **kw):
    from awarl.stages.train import run_train

    cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"out_dir": str(out)}),
                                 "train": cfg.train.model_copy(update={"max_steps": steps})})
    return run_train(cfg, tokenizer=tok, backend_factory=lambda t: backend, final_eval=False, **kw)


@pytest.mark.slow
def test_training_marks_checkpoints_complete_and_resume_falls_back_past_a_killed_save(two_steps, tmp_path):
    cfg, tok, backend = two_steps
    src = Path(cfg.run.out_dir)
    for n in (1, 2):
        assert incomplete_reason(src / f"checkpoint-{n}") is None
        assert STATE_FILE in json.loads((src / f"checkpoint-{n}" / MARKER).read_text())["files"]
    out = tmp_path / "run"
    shutil.copytree(src, out)
    for name in ("trainer_state.json", MARKER, STATE_FILE):  # a kill after the weights, before the rest
        (out / "checkpoint-2" / name).unlink()
    state1 = json.loads((out / "checkpoint-1" / STATE_FILE).read_text())
    summary = resume(cfg, tok, backend, out, 3, resume="latest")
    assert summary["global_step"] == 3
    assert summary["reward_state"]["updates"] == state1["updates"] + 2  # steps 2 and 3 ran again from 1


@pytest.mark.slow
def test_resuming_without_reward_state_is_refused_then_restarts_e_bar_only_when_asked(two_steps, tmp_path):
    cfg, tok, backend = two_steps
    out = tmp_path / "run"
    shutil.copytree(Path(cfg.run.out_dir), out)
    ckpt = out / "checkpoint-2"
    (ckpt / STATE_FILE).unlink()
    (ckpt / MARKER).unlink()
    with pytest.raises(FileNotFoundError, match="--reset-reward-state"):
        resume(cfg, tok, backend, out, 3, resume=str(ckpt))
    summary = resume(cfg, tok, backend, out, 3, resume=str(ckpt), reset_reward_state=True)
    step3 = next(h for h in summary["trainer"].state.log_history if h.get("step") == 3 and "awarl/E_bar" in h)
    assert step3["awarl/E_bar"] == pytest.approx((1 - cfg.reward.beta) * step3["awarl/E"])  # Ē_2 taken as 0
    assert summary["reward_state"]["updates"] == 1


def test_the_override_is_a_train_flag(capsys):
    from awarl.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    assert "--reset-reward-state" in capsys.readouterr().out


@pytest.mark.slow
def test_the_final_evaluation_is_of_the_policy_at_the_final_step_after_any_resume(two_steps, tmp_path):
    """The final evaluation used to be identified by the base model's name alone. A run extended from 3 to 4
    steps resumed the step-3 predictions in eval/final and reported them as its own (generated_now 0), and
    on a finished run's resume (the checkpoint's weights loaded by path) the name changed, the resume of a
    killed final evaluation was refused and the evaluation skipped, so a sweep run could never finish."""
    from awarl.stages.train import run_train

    cfg0, tok, backend = two_steps
    out = tmp_path / "run"
    shutil.copytree(Path(cfg0.run.out_dir), out)
    final = out / "eval" / "final"

    def train_to(steps: int) -> dict:
        cfg = cfg0.model_copy(update={"run": cfg0.run.model_copy(update={"out_dir": str(out)}),
                                      "train": cfg0.train.model_copy(update={"max_steps": steps})})
        return run_train(cfg, resume="latest", tokenizer=tok, backend_factory=lambda t: backend)

    def manifest() -> dict:
        return json.loads((final / "manifest.json").read_text())

    n_eval = cfg0.eval.limit
    summary = train_to(3)  # trains step 3, then evaluates the live policy
    assert "eval" in summary and manifest()["model"]["global_step"] == 3 and manifest()["generated_now"] == n_eval
    # a kill during that evaluation: one prediction written, no results
    pred = final / "predictions.jsonl"
    pred.write_text(pred.read_text().splitlines()[0] + "\n")
    (final / "results.json").unlink()
    summary = train_to(3)  # nothing left to train: the checkpoint's weights are loaded and the evaluation resumes
    assert "eval" in summary and (final / "results.json").is_file()
    assert manifest()["generated_now"] == n_eval - 1 and manifest()["model"]["global_step"] == 3
    summary = train_to(4)  # a longer run: its final policy is evaluated afresh, step 3's kept beside it
    assert manifest()["model"]["global_step"] == 4 and manifest()["generated_now"] == n_eval
    kept = json.loads((out / "eval" / "final.step-3" / "manifest.json").read_text())
    assert kept["model"]["global_step"] == 3 and kept["status"] == "complete"


@pytest.mark.slow
def test_extending_a_finished_run_takes_its_first_extra_step_at_the_new_schedules_rate(two_steps, tmp_path):
    """The Trainer restores the optimizer's learning rate as saved (the linear schedule's end, 0) and the
    scheduler recomputes it only after a step: extending a 2-step run to 4 took step 3 at learning rate 0."""
    cfg, tok, backend = two_steps
    out = tmp_path / "run"
    shutil.copytree(Path(cfg.run.out_dir), out)
    summary = resume(cfg, tok, backend, out, 4, resume="latest")
    lr = {h["step"]: h["learning_rate"] for h in summary["trainer"].state.log_history if "learning_rate" in h}
    base = cfg.train.learning_rate
    # linear decay over the new 4 steps, from the resumed step on: steps 3 and 4 at base x 2/4 and x 1/4
    assert lr[3] == pytest.approx(base * 2 / 4) and lr[4] == pytest.approx(base * 1 / 4)
