"""AWA-RL GRPO training through TRL on CPU: a tiny real Qwen2 model, a real BM25 index over the context
paragraphs of real HotpotQA questions, the real multi-turn rollout engine and the real AWA-RL reward.

Generation in most tests replays written turns per trajectory (a correct, an abstaining and a wrong path
per question, rotating), so every GRPO group has reward variance and the searches really insert
environment tokens; the policy is still scored and updated on those tokens by TRL. One test generates
with the live (random) policy through the transformers backend.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROUND4_REWARD

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from awarl.config import config_from_dict  # noqa: E402
from awarl.io import DataError, shipped_data_dir  # noqa: E402

DIST = Path(__file__).parent / "dist"
sys.path.insert(0, str(DIST))
from train_two_proc import VariantBackend, variants_for  # noqa: E402

HOTPOT = shipped_data_dir() / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"
N_TRAIN = 4


@pytest.fixture(scope="session")
def train_examples():
    from awarl.data.loaders import load_examples

    return load_examples(HOTPOT, format="hotpotqa", dataset="hotpotqa", limit=N_TRAIN, seed=0).examples


@pytest.fixture(scope="session")
def closed_index(tmp_path_factory, train_examples):
    """BM25 over the training questions' own context paragraphs (a real closed corpus)."""
    from awarl.data.corpus import build_corpus, write_corpus
    from awarl.retrieval import build_index

    d = tmp_path_factory.mktemp("closed")
    write_corpus(build_corpus(train_examples), d / "corpus.jsonl")
    return build_index(d / "corpus.jsonl", "bm25", d / "bm25", show_progress=False)


def make_cfg(tmp_path: Path, tiny_dir: Path, index: Path, **over) -> object:
    data = {
        "run": {"name": "t", "out_dir": str(tmp_path / "run"), "seed": 0},
        "data": {"train": [{"path": str(HOTPOT), "format": "hotpotqa", "dataset": "hotpotqa", "limit": N_TRAIN}],
                 "eval": [{"path": str(HOTPOT), "format": "hotpotqa", "dataset": "hotpotqa", "limit": 2}]},
        "retrieval": {"kind": "bm25", "index_dir": str(index), "topk": 2},
        "agent": {"max_turns": 2, "max_new_tokens_per_turn": 48, "max_trajectory_tokens": 700},
        "generation": {"temperature": 1.0, "batch_size": 16},
        # round 4's reward (conftest.ROUND4_REWARD): these tests replay its formulas call by call; the gate, the
        # group's p and the warm-up have tests of their own, and test_demo trains with today's defaults
        "reward": {"lambda_cite": 0.1, **ROUND4_REWARD},
        "critic": {"judge": "lexical"},
        "estimate": {"k": 2, "out": str(tmp_path / "p.jsonl")},
        "eval": {"limit": 2, "every_steps": 0},
        "train": {"model": str(tiny_dir), "num_generations": 4, "per_device_train_batch_size": 4,
                  "max_steps": 2, "save_steps": 1, "learning_rate": 5e-3, "report_to": ["none"],
                  "bf16": False, "gradient_checkpointing": False},
    }
    for key, value in over.items():
        sec, name = key.split("__")
        data[sec][name] = value
    return config_from_dict(data)


def write_estimates(cfg, examples, ps):
    from awarl.data.estimates import estimate_row

    lines = []
    for ex, p in zip(examples, ps, strict=True):
        k = 10
        c = round(p * k)
        row = estimate_row(ex, ["correct"] * c + ["wrong"] * (k - c))
        lines.append(json.dumps(row))
    Path(cfg.estimate.out).write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_dir, closed_index, train_examples):
    """Two real GRPO steps (checkpoint after each), instrumented: loss gradients, reward calls, params."""
    import torch
    from transformers import AutoTokenizer

    from awarl.stages.train import run_train

    tmp = tmp_path_factory.mktemp("train")
    cfg = make_cfg(tmp, tiny_dir, closed_index)
    ps = [0.0, 0.9, 0.5, 0.2]
    write_estimates(cfg, train_examples, ps)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    backend = VariantBackend(tok, variants_for(train_examples))
    rec: dict = {"reward_calls": [], "grad": None}

    def on_trainer(trainer):
        rec["before"] = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        reward = trainer.reward_funcs[0]
        orig_reward = reward.__call__

        class Spy:
            __name__ = "awarl_reward"

            def __call__(self, *a, **kw):
                r = orig_reward(*a, **kw)
                rec["reward_calls"].append({"kw": {k: kw[k] for k in ("outcome", "qid", "p_i")},
                                            "rewards": r, "stats": dict(reward.last_stats)})
                return r

        trainer.reward_funcs[0] = Spy()
        orig_loss = trainer._compute_loss

        def loss_with_grad_probe(model, inputs):
            if rec["grad"] is not None:
                return orig_loss(model, inputs)
            store = {}
            norm = model.model.norm
            h = norm.register_forward_hook(lambda m, i, o: store.__setitem__("h", o))
            loss = orig_loss(model, inputs)
            h.remove()
            (g,) = torch.autograd.grad(loss, store["h"], retain_graph=True)
            # environment positions as the rollout engine produced them (not as TRL received them)
            # (TRL shuffles the generation batch, so rows are matched by their completion tokens)
            env = torch.zeros_like(inputs["completion_mask"], dtype=torch.bool)
            for i, row in enumerate(inputs["completion_ids"].tolist()):
                t = next(t for t in trainer.rollout_func.last
                         if row[: len(t.completion_ids)] == list(t.completion_ids)
                         and int(inputs["completion_mask"][i].sum()) == len(t.completion_ids))
                env[i, : len(t.env_mask)] = torch.tensor([m == 0 for m in t.env_mask])
            rec["grad"] = {"g": g.detach(), "env": env, "tool_mask": inputs["tool_mask"].detach().clone(),
                           "completion_mask": inputs["completion_mask"].detach().clone(),
                           "prompt_len": inputs["prompt_ids"].shape[1],
                           "advantages": inputs["advantages"].detach().clone()}
            return loss

        trainer._compute_loss = loss_with_grad_probe

    summary = run_train(cfg, tokenizer=tok, backend_factory=lambda trainer: backend, on_trainer=on_trainer,
                        final_eval=False)
    return {"cfg": cfg, "summary": summary, "rec": rec, "examples": train_examples, "ps": ps, "tok": tok,
            "backend": backend}


@pytest.mark.slow
def test_loss_gradient_is_zero_on_environment_tokens(trained):
    g = trained["rec"]["grad"]
    assert g is not None, "the loss was never computed"
    tool, comp, plen, env = g["tool_mask"], g["completion_mask"], g["prompt_len"], g["env"]
    assert bool((env == ((tool == 0) & (comp == 1))).all())  # TRL received our env_mask
    model_tok = ~env & (comp == 1)
    assert env.any(), "no environment tokens: the searches did not insert information blocks"
    # hidden state at sequence position plen+j-1 predicts completion token j (final norm is per position,
    # so this gradient is exactly the gradient through that token's log-prob)
    grad_norm = g["g"].norm(dim=-1)[:, plen - 1: plen - 1 + tool.shape[1]]
    assert bool((grad_norm[env] == 0).all()), "environment tokens received policy-loss gradient"
    rows = g["advantages"].abs() > 1e-6
    assert rows.any()
    assert (grad_norm[model_tok & rows.unsqueeze(1)] > 0).float().mean() > 0.9


@pytest.mark.slow
def test_parameters_change_and_checkpoints_written(trained):
    summary, rec = trained["summary"], trained["rec"]
    trainer = summary["trainer"]
    after = dict(trainer.model.named_parameters())
    changed = [n for n, p in rec["before"].items() if not (after[n].detach() == p).all()]
    assert len(changed) >= len(rec["before"]) // 2
    out = Path(summary["out_dir"])
    assert summary["global_step"] == 2
    for step in (1, 2):
        ck = out / f"checkpoint-{step}"
        assert (ck / "trainer_state.json").is_file() and (ck / "optimizer.pt").is_file()
        state = json.loads((ck / "awarl_reward_state.json").read_text())
        assert state["updates"] == step
    assert (out / "final" / "config.json").is_file()
    assert (out / "resolved_config.yaml").is_file()


@pytest.mark.slow
def test_reward_statistics_are_logged(trained):
    trainer = trained["summary"]["trainer"]
    logs = [h for h in trainer.state.log_history if "awarl/rho" in h]
    assert len(logs) == 2
    for h in logs:
        shares = sum(h[f"awarl/share_{o}"] for o in ("correct", "wrong", "abstain", "invalid"))
        assert shares == pytest.approx(1.0)
        for k in ("awarl/rho_hat", "awarl/E", "awarl/E_bar", "awarl/penalty", "awarl/r_ref_mean",
                  "awarl/r_cite_mean", "rollout/env_token_share"):
            assert k in h
    # the replayed paths rotate correct / abstain / wrong, so all three outcomes occur
    calls = trained["rec"]["reward_calls"]
    outcomes = {o for c in calls for o in c["kw"]["outcome"]}
    assert {"correct", "abstain", "wrong"} <= outcomes


@pytest.mark.slow
def test_p_from_estimate_file_sets_refusal_reward(trained):
    from awarl.data.types import example_key
    from awarl.rewards import abstention as A

    cfg = trained["cfg"]
    r = cfg.reward
    p_of = {example_key(ex.dataset, ex.id): p for ex, p in zip(trained["examples"], trained["ps"], strict=True)}
    seen, updates = 0, 0
    cap, floor = A.refusal_cap(r.r_correct, r.r_ref_margin), A.refusal_floor(r.r_wrong, r.r_ref_floor_margin)
    for call in trained["rec"]["reward_calls"]:
        kw, rewards, stats = call["kw"], call["rewards"], call["stats"]
        updates += bool(stats["updated"])
        for o, q, p, rew in zip(kw["outcome"], kw["qid"], kw["p_i"], rewards, strict=True):
            assert p == pytest.approx(p_of[q])  # the estimate file's p_i reached the reward
            if o == "abstain":
                # the query's group pays the step at Ē + u (reward.penalty_dither), u drawn from its id and the step
                pen = A.group_penalty(stats["E_bar"], q, updates, r.penalty_steps, r.penalty_max, r.penalty_dither)
                expected = min(max(1 - max(p, r.p_min) ** r.gamma - pen, r.r_clip[0]), r.r_clip[1])
                expected = max(min(expected, cap if cap is not None else 1.0), floor if floor is not None else -1.0)
                assert rew == pytest.approx(expected)
                assert expected == pytest.approx(
                    A.refusal_reward(A.base_refusal_reward(p, r.gamma, r.p_min), pen, r.r_clip, cap, floor))
                seen += 1
    assert seen >= 2


@pytest.mark.slow
def test_finished_message_says_where_the_outputs_are(trained):
    from types import SimpleNamespace

    from awarl.commands.train import finished_message

    summary = trained["summary"]
    msg = finished_message(summary)
    out = summary["out_dir"]
    assert f"{summary['global_step']} steps done in {out}" in msg and f"awarl eval --model {out}/final" in msg
    assert Path(out, "checkpoint-2").is_dir() and f"{out}/checkpoint-*" in msg
    assert "tensorboard" not in msg  # report_to: [none]
    with_tb = {**summary, "trainer": SimpleNamespace(args=SimpleNamespace(report_to=["tensorboard"])),
               "eval": {"eval/macro_ra_f1": 0.25, "eval/macro_abstention_rate": 0.5}}
    msg = finished_message(with_tb)
    assert f"tensorboard --logdir {out}/runs" in msg and "macro RA-F1 0.250, abstention 0.500" in msg


@pytest.mark.slow
def test_a_relaunch_without_resume_is_refused_over_an_earlier_run(trained, tmp_path, tiny_dir, closed_index):
    """TRL would write checkpoint-N and final/ over the earlier run's from step 0: the run folder of a finished
    (or checkpointed) run is refused unless --resume, dry run included, before anything loads; a folder with
    only an incomplete checkpoint holds nothing to resume, and is trained in."""
    import shutil

    from awarl.cli import main
    from awarl.stages.train import run_train

    cfg = trained["cfg"]
    before = sorted(p.name for p in Path(cfg.run.out_dir).iterdir())
    with pytest.raises(FileExistsError, match=r"holds an earlier run \(checkpoints up to checkpoint-2\); training "
                                              r"from step 0 would overwrite it\. Continue it with --resume"):
        run_train(cfg)
    assert sorted(p.name for p in Path(cfg.run.out_dir).iterdir()) == before
    other = make_cfg(tmp_path, tiny_dir, closed_index)
    final = Path(other.run.out_dir) / "final"
    final.mkdir(parents=True)
    (final / "model.safetensors").write_bytes(b"weights")
    with pytest.raises(FileExistsError, match=r"a final model \(final/\)"):
        run_train(other, dry_run=True)
    shutil.rmtree(final)
    shutil.copytree(Path(cfg.run.out_dir) / "checkpoint-1", Path(other.run.out_dir) / "checkpoint-1")
    (Path(other.run.out_dir) / "checkpoint-1" / "model.safetensors").unlink()  # a save a kill cut short
    write_estimates(other, trained["examples"], trained["ps"])
    assert run_train(other, dry_run=True)["steps"]["max_steps"] == 2
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    assert main(["train", "--config", str(cfg_file), "--dry-run"]) == 2


@pytest.mark.slow
def test_resuming_a_run_at_max_steps_trains_nothing_and_keeps_the_reward_state(trained, tmp_path, tiny_dir):
    """The Trainer's stop check comes after a step, so a resume at max_steps ran one more (learning rate 0:
    weights unchanged, but a batch sampled and scored, Ē moved, checkpoint-(N+1) written, and each rerun of a
    finished run or demo added another). Now the checkpoint's weights are the final policy and nothing runs."""
    import shutil

    from transformers import AutoTokenizer

    from awarl.stages.train import run_train
    from awarl.training.checkpoints import newest_complete

    src = Path(trained["cfg"].run.out_dir)
    out = tmp_path / "run"
    shutil.copytree(src, out)
    ckpt = newest_complete(out)
    step = json.loads((ckpt / "trainer_state.json").read_text())["global_step"]
    cfg0 = trained["cfg"]
    cfg = cfg0.model_copy(update={"run": cfg0.run.model_copy(update={"out_dir": str(out)}),
                                  "train": cfg0.train.model_copy(update={"max_steps": step})})
    saved = json.loads((ckpt / "awarl_reward_state.json").read_text())
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    backend = VariantBackend(tok, variants_for(trained["examples"]))
    summary = run_train(cfg, resume="latest", tokenizer=tok, backend_factory=lambda t: backend, final_eval=False)
    assert summary["global_step"] == step
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert summary["trainer"].state.log_history == state["log_history"]  # what the demo's dynamics plot reads
    assert summary["reward_state"]["e_bar"] == saved["e_bar"] and summary["reward_state"]["updates"] == saved["updates"]
    assert not (out / f"checkpoint-{step + 1}").exists() and backend.counter == 0  # nothing sampled
    assert (out / "final" / "model.safetensors").read_bytes() == (ckpt / "model.safetensors").read_bytes()


@pytest.mark.slow
def test_resume_continues_step_and_ema_state(trained, tiny_dir, closed_index, caplog):
    from transformers import AutoTokenizer

    from awarl.stages.train import run_train

    cfg0 = trained["cfg"]
    out = Path(cfg0.run.out_dir)
    saved = json.loads((out / "checkpoint-2" / "awarl_reward_state.json").read_text())
    cfg = cfg0.model_copy(update={"train": cfg0.train.model_copy(update={"max_steps": 3})})
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    backend = VariantBackend(tok, variants_for(trained["examples"]))
    with caplog.at_level("WARNING", logger="awarl.stages.train"):
        summary = run_train(cfg, resume="latest", tokenizer=tok, backend_factory=lambda t: backend, final_eval=False)
    assert summary["global_step"] == 3
    # the longer max_steps is named, and the run's own resolved config is kept beside this resume's
    assert "1 setting(s) other than the run's" in caplog.text and "train.max_steps: 2 -> 3" in caplog.text
    kept = yaml.safe_load((out / "resolved_config.until-checkpoint-2.yaml").read_text())
    assert kept["train"]["max_steps"] == 2
    assert yaml.safe_load((out / "resolved_config.yaml").read_text())["train"]["max_steps"] == 3
    assert summary["reward_state"]["updates"] == saved["updates"] + 1
    log3 = [h for h in summary["trainer"].state.log_history if "awarl/E_bar" in h and h.get("step") == 3]
    assert len(log3) == 1
    beta = cfg.reward.beta
    # Ē_3 = β·Ē_2 + (1-β)·E_3 only if Ē_2 came back from the checkpoint
    assert log3[0]["awarl/E_bar"] == pytest.approx(beta * saved["e_bar"] + (1 - beta) * log3[0]["awarl/E"])


@pytest.mark.slow
def test_live_policy_rollout_one_step(tmp_path, tiny_dir, closed_index, train_examples):
    """The real generation path: transformers on the trainer's own (random) policy."""
    from transformers import AutoTokenizer

    from awarl.stages.train import run_train

    cfg = make_cfg(tmp_path, tiny_dir, closed_index, train__max_steps=1, train__save_steps=50,
                   agent__max_new_tokens_per_turn=12, agent__max_trajectory_tokens=60,
                   eval__limit=1)
    write_estimates(cfg, train_examples, [0.5] * len(train_examples))
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    seen = {}

    def on_trainer(trainer):
        adapter = trainer.rollout_func
        orig = adapter.collate

        def spy(rows, trajs, tr=None, grades=None):
            seen["training_mode_after"] = trainer.model.training
            seen["trajs"] = trajs
            return orig(rows, trajs, tr, grades)

        adapter.collate = spy

    summary = run_train(cfg, tokenizer=tok, on_trainer=on_trainer, final_eval=True)
    assert summary["global_step"] == 1
    assert seen["training_mode_after"] is True  # generation ran in eval mode and restored train mode
    assert len(seen["trajs"]) == 4 and all(len(t.completion_ids) <= 60 for t in seen["trajs"])
    assert "eval/macro_ra_f1" in summary["eval"]
    assert (Path(cfg.run.out_dir) / "eval" / "final" / "predictions.jsonl").is_file()


def test_missing_estimates_is_an_error_for_awarl_and_counted_when_partial(tmp_path, tiny_dir, closed_index,
                                                                           train_examples, caplog):
    from awarl.stages.train import run_train, training_rows

    cfg = make_cfg(tmp_path, tiny_dir, closed_index)
    with pytest.raises(FileNotFoundError, match="awarl estimate"):
        run_train(cfg)
    write_estimates(cfg, train_examples[:1], [0.3])
    with caplog.at_level("WARNING"):
        rows, info = training_rows(cfg)
    assert info["missing_p"] == N_TRAIN - 1 and info["with_p"] == 1
    assert [r["p_i"] for r in rows].count(None) == N_TRAIN - 1
    assert f"{N_TRAIN - 1} of {N_TRAIN} training questions have no p_i" in caplog.text
    # a file of other questions (or an empty one) is as bad as none: it used to be a warning, and every
    # question trained on reward.default_p
    for other in ("", json.dumps({"qid": "x", "dataset": "hotpotqa", "p_i": 0.5}) + "\n"):
        Path(cfg.estimate.out).write_text(other)
        with pytest.raises(DataError, match=f"none of the {N_TRAIN} training questions has a p_i"):
            training_rows(cfg)
        assert training_rows(cfg, strict=False)[1]["missing_p"] == N_TRAIN  # a dry run warns


def test_p_sampled_with_another_model_or_not_finished_is_named_before_training(tmp_path, tiny_dir, closed_index,
                                                                               train_examples, caplog):
    """train.p_estimates pointing at a file that `awarl estimate` sampled with another model than this run's
    standard checkpoint (estimate.model, else train.model): training on it would weigh refusal by another model's
    p_i, so the file's settings record is read and the mismatch named; the same model is silent."""
    from awarl.data.estimates import settings_path
    from awarl.stages.train import training_rows

    cfg = make_cfg(tmp_path, tiny_dir, closed_index)
    write_estimates(cfg, train_examples, [0.3] * N_TRAIN)
    record = settings_path(cfg.estimate.out)
    record.write_text(json.dumps({"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}, "k": 8}))
    with caplog.at_level("WARNING"):
        _, info = training_rows(cfg)
    assert info["estimates_model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert (f"were sampled with Qwen/Qwen2.5-7B-Instruct ({record.name}), but this run's standard checkpoint is "
            f"{tiny_dir}") in caplog.text
    caplog.clear()
    record.write_text(json.dumps({"model": {"name": str(tiny_dir)}, "k": 8}))
    with caplog.at_level("WARNING"):
        _, info = training_rows(cfg)
    assert info["estimates_model"] == str(tiny_dir) and "were sampled with" not in caplog.text
    # an estimate still being written (a cluster launch that did not wait for it) or cut short by a kill
    record.write_text(json.dumps({"model": {"name": str(tiny_dir)}, "k": 8, "status": "running"}))
    with pytest.raises(DataError, match=rf"has not finished \({record.name} says status: running\)"):
        training_rows(cfg)
    with caplog.at_level("WARNING"):
        training_rows(cfg, strict=False)  # a dry run plans, and says so
    assert "has not finished" in caplog.text
    record.write_text(json.dumps({"model": {"name": str(tiny_dir)}, "k": 8, "status": "complete"}))
    assert training_rows(cfg)[1]["with_p"] == N_TRAIN


@pytest.mark.slow
def test_two_process_training_with_torchrun(tmp_path, tiny_dir, closed_index, train_examples):
    """torchrun --nproc_per_node=2 (gloo, CPU): DDP keeps both replicas equal and the reward statistics
    cover the whole generation batch of both processes."""
    local = Path(sys.executable).parent / "torchrun"
    torchrun = str(local) if local.exists() else shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not installed")
    cfg = make_cfg(tmp_path, tiny_dir, closed_index)
    write_estimates(cfg, train_examples, [0.1, 0.4, 0.6, 0.9])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([torchrun, "--standalone", "--nproc_per_node=2", str(DIST / "train_two_proc.py"),
                           str(tmp_path), str(tiny_dir), str(closed_index), cfg.estimate.out],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2] and [r["global_step"] for r in ranks] == [2, 2]
    assert ranks[0]["checksum"] == pytest.approx(ranks[1]["checksum"], rel=1e-9)
    assert ranks[0]["reward_state"] == ranks[1]["reward_state"]
    assert ranks[0]["reward_state"]["updates"] == 2
    per_rank = ranks[0]["local_completions"]
    for h in ranks[0]["logs"]:
        assert h["awarl/n"] == 2 * per_rank  # all-reduced over both processes
    assert ranks[0]["eval"] is not None and "eval/macro_ra_f1" in ranks[0]["eval"]
    assert (tmp_path / "run" / "checkpoint-2" / "awarl_reward_state.json").is_file()


def lora_cfg(tmp_path, tiny_dir, closed_index, train_examples):
    """One LoRA step (rank 4 on q/v), with estimates."""
    cfg = make_cfg(tmp_path, tiny_dir, closed_index, train__max_steps=1, train__save_steps=50,
                   train__learning_rate=5e-2,
                   train__lora={"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0,
                                "target_modules": ["q_proj", "v_proj"]})
    write_estimates(cfg, train_examples, [0.1, 0.4, 0.6, 0.9])
    return cfg


@pytest.mark.slow
def test_lora_run_saves_a_merged_full_model(tmp_path, tiny_dir, closed_index, train_examples):
    """With LoRA the trainer saved only adapter files to final/, which vLLM (`awarl eval ... backend=vllm`,
    `trl vllm-serve`, a warm start) cannot load; final/ now holds the merged model, final/adapter the adapters."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from awarl.stages.train import run_train

    cfg = lora_cfg(tmp_path, tiny_dir, closed_index, train_examples)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    backend = VariantBackend(tok, variants_for(train_examples))
    summary = run_train(cfg, tokenizer=tok, backend_factory=lambda t: backend, final_eval=False)
    final = Path(summary["final"])
    assert (final / "adapter" / "adapter_config.json").is_file()
    assert not (final / "adapter_config.json").exists() and (final / "config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(final)
    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert not any("lora" in n for n, _ in merged.named_parameters())
    ids = torch.tensor([tok("Which city is the capital of France?")["input_ids"]])
    with torch.no_grad():
        live = summary["trainer"].model(input_ids=ids).logits  # the trained policy (adapters folded in)
        got = merged(input_ids=ids).logits
        assert not torch.allclose(base(input_ids=ids).logits, got)  # the adapters changed the weights
    assert torch.allclose(live, got, atol=1e-5)


def test_too_few_questions_for_one_generation_batch_is_refused_before_training(tmp_path, tiny_dir, closed_index,
                                                                             train_examples):
    """TRL samples a generation batch as per-device batch x gradient accumulation x processes / group size
    distinct questions and drops one it cannot fill: 4 questions with a batch of 8 x 4 / 2 = 16 trained 0 steps
    and wrote the untrained model as final/, without an error (only 4 x 2 < 8 was checked)."""
    from awarl.config import ConfigError
    from awarl.stages.train import run_train

    cfg = make_cfg(tmp_path, tiny_dir, closed_index, train__num_generations=2, train__per_device_train_batch_size=8,
                   train__gradient_accumulation_steps=4)
    write_estimates(cfg, train_examples, [0.0, 0.9, 0.5, 0.2])
    with pytest.raises(ConfigError, match=r"only 4 training question\(s\), but one generation batch takes 16"):
        run_train(cfg, dry_run=True)
    with pytest.raises(ConfigError, match="takes 16 distinct"):
        run_train(cfg)
    assert not Path(cfg.run.out_dir).exists()  # refused before anything was written
    ok = make_cfg(tmp_path, tiny_dir, closed_index, train__num_generations=2, train__per_device_train_batch_size=8)
    assert run_train(ok, dry_run=True)["steps"]["questions_per_step"] == 4  # 8 x 1 / 2: four questions suffice


@pytest.mark.slow
def test_rerunning_a_finished_lora_run_trains_nothing(tmp_path, tiny_dir, closed_index, train_examples):
    """The finished-run shortcut excluded LoRA, so every rerun of a finished LoRA run (every `awarl demo-real`)
    went back through the Trainer, whose stop check comes after a step: one more step sampled and scored,
    Ē moved, checkpoint-(N+1) written. Now the checkpoint's adapters on the base are the final policy."""
    from transformers import AutoTokenizer

    from awarl.stages.train import run_train

    cfg = lora_cfg(tmp_path, tiny_dir, closed_index, train_examples)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    first = run_train(cfg, tokenizer=tok, backend_factory=lambda t: VariantBackend(tok, variants_for(train_examples)),
                      final_eval=False)
    out = Path(cfg.run.out_dir)
    merged = (out / "final" / "model.safetensors").read_bytes()
    backend = VariantBackend(tok, variants_for(train_examples))
    again = run_train(cfg, resume="latest", tokenizer=tok, backend_factory=lambda t: backend, final_eval=False)
    assert again["global_step"] == first["global_step"] == 1 and backend.counter == 0  # nothing sampled
    assert not (out / "checkpoint-2").exists()
    assert again["reward_state"]["updates"] == first["reward_state"]["updates"]
    assert (out / "final" / "model.safetensors").read_bytes() == merged  # the same adapters, merged again


def test_checkpoint_rotation_and_the_policy_evaluation_batch_reach_the_trainer(tmp_path, monkeypatch):
    """A 7B ZeRO-3 checkpoint is ~110 GB and the recipe saves 12: without a limit the disk filled hours into a
    run (train.save_total_limit did not exist). The in-training evaluation decoded generation.batch_size (256)
    slots with transformers on rank 0 beside its shards; eval.policy_batch_size bounds it."""
    from awarl.config import load_config
    from awarl.io import repo_root
    from awarl.stages import train as train_stage
    from awarl.training.trainer import grpo_config

    cfg = load_config(repo_root() / "configs" / "qwen2.5-7b_cold_8gpu.yaml", [f"run.out_dir={tmp_path}"])
    assert grpo_config(cfg, cpu=True, output_dir=str(tmp_path)).save_total_limit == 2
    assert grpo_config(load_config(None, [f"run.out_dir={tmp_path}"]), cpu=True).save_total_limit is None
    seen = {}
    monkeypatch.setattr(train_stage, "run_eval", lambda c, *a, **k: seen.setdefault("gen", c.generation) and {})

    class Model:
        training = True

        def eval(self): self.training = False   # noqa: E704
        def train(self, mode): self.training = mode   # noqa: E704

    train_stage.evaluate_policy(cfg, Model(), None, None, tmp_path / "ev", step=3)
    assert (seen["gen"].backend, seen["gen"].batch_size) == ("hf", 32)
    assert cfg.generation.batch_size == 256   # vLLM's batch for the rollouts is left alone


def test_a_dry_run_plans_for_the_launchs_processes_and_an_offline_hub_file(tmp_path, capsys, monkeypatch):
    """The dry run planned for its own single process (questions per step 4 where the 6-process launch takes
    24), and the GPU recipes trained 14 passes over the 512-row sample: they now name the full Search-R1 mix on
    the Hub, which an offline dry run plans without and a launch refuses to go without."""
    import pytest

    from awarl.cli import main
    from awarl.config import load_config
    from awarl.io import DataError, repo_root
    from awarl.stages.train import training_rows

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    base = repo_root() / "configs" / "base.yaml"
    assert main(["train", "--config", str(base), "--dry-run", "--processes", "6", f"run.out_dir={tmp_path / 'a'}",
                 "train.per_device_train_batch_size=8", "train.gradient_accumulation_steps=4"]) == 0
    out = capsys.readouterr().out
    assert "processes: 6" in out and "questions_per_step: 24" in out
    assert main(["train", "--config", str(base), "--processes", "6", f"run.out_dir={tmp_path / 'b'}"]) == 2
    assert "--processes N (N >= 1) goes with --dry-run" in capsys.readouterr().err
    recipe = repo_root() / "configs" / "qwen2.5-7b_cold_8gpu.yaml"
    assert load_config(recipe).data.train[0].path.startswith("hf://")
    assert main(["train", "--config", str(recipe), "--dry-run", f"run.out_dir={tmp_path / 'c'}"]) == 0
    assert "questions: 0" in capsys.readouterr().out
    with pytest.raises(DataError, match="not in the local Hub cache"):
        training_rows(load_config(recipe, [f"run.out_dir={tmp_path / 'd'}"]), strict=True)


def abstain_script(path: Path, examples) -> Path:
    """A replay in which every trajectory searches once and abstains: the state a refusal reward that beats
    answering drives a policy to, reached at step 1 and the same on every machine."""
    path.write_text("".join(json.dumps({"question": ex.question, "turns": [
        f"<search> {ex.context[0].title} </search>", "<answer> not enough information </answer>"]}) + "\n"
        for ex in examples))
    return path


@pytest.mark.slow
def test_a_run_made_to_collapse_is_stopped_with_a_checkpoint_and_resumes(tmp_path, tiny_dir, closed_index,
                                                                         train_examples, capsys):
    """A static refusal reward of 0.9, every trajectory abstaining: refusal stuck at 1 and no reward spread in any
    group. With a 3-step window both alarms fire at step 3; train.stop_on_collapse saves checkpoint-3 (complete,
    reward state included) and `awarl train` exits 3 without final/. --resume rebuilds the alarm state from the
    checkpoint's log: the run trains on to max_steps without raising the same alarms again, and its summary
    lists them."""
    from awarl.cli import main
    from awarl.training.checkpoints import checkpoint_folders, incomplete_reason

    cfg = make_cfg(tmp_path, tiny_dir, closed_index, reward__strategy="static", reward__static_value=0.9,
                   reward__lambda_cite=0.0, generation__backend="scripted",
                   generation__script=str(abstain_script(tmp_path / "abstain.jsonl", train_examples)),
                   train__max_steps=5, train__save_steps=100, train__collapse={"window": 3},
                   train__stop_on_collapse=True)
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    out = Path(cfg.run.out_dir)
    assert main(["train", "--config", str(cfg_file)]) == 3
    printed = capsys.readouterr().out
    assert "STOPPED at step 3 by a collapse alarm (refusal_high; train.stop_on_collapse), exit status 3" in printed
    assert "awarl/share_abstain >= 0.95 on every logged step of steps 1-3 (mean 1, range 1..1" in printed
    rows = [json.loads(line) for line in (out / "alarms.jsonl").read_text().splitlines()]
    assert [(r["signal"], r["step"], r["first_step"], r["action"]) for r in rows] == [
        ("refusal_high", 3, 1, "stop"), ("reward_flat", 3, 1, "stop")]
    assert [p.name for p in checkpoint_folders(out)] == ["checkpoint-3"] and not (out / "final").exists()
    ckpt = out / "checkpoint-3"
    assert incomplete_reason(ckpt) is None and (ckpt / "awarl_reward_state.json").is_file()
    logged = json.loads((ckpt / "trainer_state.json").read_text())["log_history"]
    assert [h["awarl/share_abstain"] for h in logged if "awarl/share_abstain" in h] == [1.0, 1.0, 1.0]
    assert [h["frac_reward_zero_std"] for h in logged if "frac_reward_zero_std" in h] == [1.0, 1.0, 1.0]

    assert main(["train", "--config", str(cfg_file), "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "5 steps done" in printed and "2 collapse alarm(s)" in printed and "step 3: refusal stuck near 1" in printed
    assert [json.loads(line) for line in (out / "alarms.jsonl").read_text().splitlines()] == rows
    assert (out / "final" / "config.json").is_file()
    final = json.loads((out / "checkpoint-5" / "trainer_state.json").read_text())["log_history"]
    assert [h["awarl/share_abstain"] for h in final if "awarl/share_abstain" in h] == [1.0] * 5


def first_held(log: list[dict], key: str, level: float, window: int) -> int | None:
    """The first step at which `key` was >= level on each of the last `window` steps (every step logged)."""
    vals = {h["step"]: h[key] for h in log if h.get(key) is not None}
    return next((s for s in sorted(vals) if all(vals.get(t, -1) >= level for t in range(s - window + 1, s + 1))),
                None)


@pytest.mark.slow
def test_a_live_policy_that_blows_up_raises_the_alarms_at_the_logged_steps(tmp_path, protocol_dir, shipped_bm25_dir,
                                                                            capsys):
    """The warmed-up tiny policy sampling its own trajectories, with a learning rate far too large (1e-2): from
    step 2 its entropy jumps and every trajectory is invalid, every group's reward the same. The invalid and
    reward_flat alarms fire (warn only) at the first step their 3-step window holds in the trainer's own log,
    and the run trains on to max_steps."""
    from transformers import AutoTokenizer

    from awarl.commands.train import finished_message
    from awarl.stages.train import run_train

    cfg = config_from_dict({
        "run": {"name": "blowup", "out_dir": str(tmp_path / "run"), "seed": 0},
        "data": {"train": [{"path": str(HOTPOT), "format": "hotpotqa", "dataset": "hotpotqa", "limit": 3}]},
        "retrieval": {"kind": "bm25", "index_dir": str(shipped_bm25_dir), "topk": 1},
        "agent": {"max_turns": 2, "max_new_tokens_per_turn": 48, "max_trajectory_tokens": 400},
        "generation": {"temperature": 1.0, "batch_size": 16},
        "reward": {"strategy": "static", "static_value": 0.9, "lambda_cite": 0.0},
        "critic": {"judge": "none"},
        "train": {"model": str(protocol_dir), "num_generations": 4, "per_device_train_batch_size": 8,
                  "max_steps": 6, "save_steps": 100, "learning_rate": 1e-2, "kl_beta": 0.0, "report_to": ["none"],
                  "bf16": False, "gradient_checkpointing": False, "collapse": {"window": 3}}})
    summary = run_train(cfg, tokenizer=AutoTokenizer.from_pretrained(protocol_dir), final_eval=False)
    log = summary["trainer"].state.log_history
    assert summary["global_step"] == 6 and summary["stopped"] is None
    expected = {"invalid": first_held(log, "awarl/share_invalid", 0.5, 3),
                "reward_flat": first_held(log, "frac_reward_zero_std", 0.9, 3)}
    assert all(s is not None and s <= 6 for s in expected.values()), expected  # the run did blow up
    got = {r["signal"]: r for r in summary["alarms"]}
    assert {k: got[k]["step"] for k in expected} == expected
    assert all(r["action"] == "warn" for r in summary["alarms"])
    assert [json.loads(line) for line in (tmp_path / "run" / "alarms.jsonl").read_text().splitlines()] == \
        summary["alarms"]
    msg = finished_message(summary)
    assert f"step {expected['invalid']}: invalid trajectories (awarl/share_invalid mean" in msg


def test_vllm_importance_sampling_correction_reaches_trls_grpo_config(tmp_path):
    from awarl.training.trainer import grpo_config

    for value in (True, False):
        cfg = config_from_dict({"run": {"out_dir": str(tmp_path)},
                                "train": {"use_vllm": True, "bf16": False, "report_to": ["none"],
                                          "vllm_importance_sampling_correction": value}})
        args = grpo_config(cfg, cpu=False)   # the GPU path: use_vllm kept
        assert args.use_vllm and args.vllm_importance_sampling_correction is value
    assert config_from_dict({}).train.vllm_importance_sampling_correction is True   # TRL's default


def test_scale_rewards_reaches_trls_grpo_config(tmp_path):
    from awarl.config import ConfigError
    from awarl.training.trainer import grpo_config

    assert config_from_dict({}).train.scale_rewards == "group"  # TRL's default, what awarl trained with before
    for value in ("group", "batch", "none"):
        cfg = config_from_dict({"run": {"out_dir": str(tmp_path)},
                                "train": {"scale_rewards": value, "report_to": ["none"]}})
        assert grpo_config(cfg, cpu=True).scale_rewards == value
    with pytest.raises(ConfigError, match="train.scale_rewards"):
        config_from_dict({"train": {"scale_rewards": "std"}})


@pytest.mark.slow
def test_scale_rewards_sets_the_advantages_trl_trains_on_and_a_resume_under_another_is_refused(
        tmp_path, tiny_dir, closed_index, train_examples):
    """One real GRPO step per value, two groups of 4 with correct / abstain / wrong completions: the advantages
    TRL computes from the reward's own rewards are (r - group mean) / (group std + 1e-4) under group, the same
    over the batch's std under batch, r - group mean under none. Resuming the group run under none is refused
    before anything loads; a run from before the key (no scale_rewards in its resolved config) counts as group."""
    import statistics

    from transformers import AutoTokenizer

    from awarl.config import ConfigError
    from awarl.stages.train import run_train

    tok = AutoTokenizer.from_pretrained(tiny_dir)

    def one_step(scale: str) -> tuple:
        (tmp_path / scale).mkdir()
        cfg = make_cfg(tmp_path / scale, tiny_dir, closed_index, train__max_steps=1, train__save_steps=1,
                       train__per_device_train_batch_size=8, train__scale_rewards=scale)
        write_estimates(cfg, train_examples, [0.1, 0.4, 0.6, 0.9])
        backend = VariantBackend(tok, variants_for(train_examples))
        rec: dict = {}

        def on_trainer(trainer):
            reward, gen = trainer.reward_funcs[0], trainer._generate_and_score_completions

            class Spy:
                __name__ = "awarl_reward"

                def __call__(self, *a, **kw):
                    rec["rewards"], rec["qid"] = reward(*a, **kw), list(kw["qid"])
                    return rec["rewards"]

            def scored(inputs):
                out = gen(inputs)
                rec["advantages"] = out["advantages"].tolist()  # generation order, before TRL shuffles
                return out

            trainer.reward_funcs[0], trainer._generate_and_score_completions = Spy(), scored

        run_train(cfg, tokenizer=tok, backend_factory=lambda t: backend, on_trainer=on_trainer, final_eval=False)
        return cfg, rec

    results = {scale: one_step(scale) for scale in ("group", "batch", "none")}
    for scale, (_, rec) in results.items():
        r, qids = rec["rewards"], rec["qid"]
        groups = [r[i:i + 4] for i in range(0, len(r), 4)]
        assert len(groups) == 2 and all(len(set(qids[i:i + 4])) == 1 for i in (0, 4))
        assert all(len(set(g)) > 1 for g in groups)  # the replay gives every group reward spread
        expect = []
        for g in groups:
            mean = sum(g) / len(g)
            scale_by = {"group": statistics.stdev(g) + 1e-4, "batch": statistics.stdev(r) + 1e-4, "none": 1.0}[scale]
            expect += [(x - mean) / scale_by for x in g]
        assert rec["advantages"] == pytest.approx(expect, rel=1e-5, abs=1e-6), scale
    assert results["group"][1]["advantages"] != pytest.approx(results["none"][1]["advantages"])

    group_cfg = results["group"][0]
    none_cfg = group_cfg.model_copy(update={"train": group_cfg.train.model_copy(update={"scale_rewards": "none"})})
    for dry in (True, False):
        with pytest.raises(ConfigError, match=r"train.scale_rewards: the run in .* trained with 'group' advantages "
                                              r".* resuming it under 'none' would change the objective"):
            run_train(none_cfg, resume="latest", dry_run=dry, tokenizer=tok)
    resolved = Path(group_cfg.run.out_dir) / "resolved_config.yaml"
    old = yaml.safe_load(resolved.read_text())
    del old["train"]["scale_rewards"]  # a run of an awarl before the key: TRL's default, group
    resolved.write_text(yaml.safe_dump(old))
    with pytest.raises(ConfigError, match="trained with 'group' advantages"):
        run_train(none_cfg, resume="latest", dry_run=True)
    assert run_train(group_cfg, resume="latest", dry_run=True)["optim"]["scale_rewards"] == "group"
