"""Every shipped run config resolves, validates and plans with `awarl train --dry-run` (no weights loaded);
the accelerate / DeepSpeed files are well-formed and agree with the run configs; the launch scripts reject
bad arguments."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
import yaml

from awarl.config import load_config
from awarl.io import repo_root

CONFIGS = repo_root() / "configs"
RUN_CONFIGS = sorted(p for p in CONFIGS.glob("*.yaml") if not p.name.startswith("sweep"))


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=[p.name for p in RUN_CONFIGS])
def test_config_dry_run(path, tmp_path, capsys, monkeypatch):
    from awarl.cli import main

    monkeypatch.chdir(tmp_path)  # shipped data paths must resolve from any working directory
    text = path.read_text()
    assert "awarl " in text.split("\n\n")[0] or "awarl." in text.split("\n\n")[0], \
        f"{path.name}: the header comment must show the launch command"
    rc = main(["train", "--config", str(path), "--dry-run", f"run.out_dir={tmp_path / 'run'}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "dry run (no model weights loaded)" in out
    cfg = load_config(path)
    assert f"policy: {cfg.train.model}" in out
    assert f"num_generations (group size): {cfg.train.num_generations}" in out
    assert f"strategy: {cfg.reward.strategy}" in out
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").glob("checkpoint-*"))
    critic = out.split("[critic]\n", 1)[1].split("\n[", 1)[0]
    if cfg.train.use_vllm:  # every GPU recipe trains (or evaluates) with the LLM judge, endpoint not needed
        assert "judge: openai" in critic, critic
        assert f"endpoint: {cfg.critic.base_url}" in critic and f"model: {cfg.critic.model}" in critic
        assert "not contacted in a dry run" in critic
    else:
        assert f"judge: {cfg.critic.judge}" in critic


def test_dry_run_reports_p_join_and_loads_no_weights(tmp_path, capsys, monkeypatch):
    """The plan counts questions with and without p_i; a model path that does not exist is not touched."""
    from awarl.cli import main
    from awarl.data.estimates import estimate_row
    from awarl.data.loaders import load_examples

    monkeypatch.chdir(tmp_path)
    src = repo_root() / "data" / "searchr1" / "train_sample512_nq_hotpotqa.parquet"
    exs = load_examples(src, format="searchr1", limit=10, seed=0).examples
    est = tmp_path / "p.jsonl"
    est.write_text("".join(json.dumps(estimate_row(e, ["correct", "wrong"])) + "\n" for e in exs[:4]))
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(yaml.safe_dump({"extends": str(CONFIGS / "base.yaml"),
                                        "data": {"train": [{"path": str(src), "format": "searchr1", "limit": 10}]},
                                        "train": {"model": "/nonexistent/model", "p_estimates": str(est)}}))
    assert main(["train", "--config", str(cfg_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "questions: 10" in out and "with_p: 4" in out and "missing_p: 6" in out
    assert "mean_p: 0.5" in out


def test_an_override_right_after_resume_is_an_override_not_a_checkpoint(tmp_path, capsys, monkeypatch):
    """`--resume` takes an optional CKPT, so argparse gave it the override that followed; --dry-run then
    planned without it. A word with `=` that is no existing path goes back to the overrides."""
    from awarl.cli import main

    monkeypatch.chdir(tmp_path)
    argv = ["train", "--config", str(CONFIGS / "base.yaml"), "--dry-run", "--resume", "reward.gamma=0.37",
            f"run.out_dir={tmp_path / 'run'}"]
    assert main(argv) == 0
    assert "gamma: 0.37" in capsys.readouterr().out
    argv[argv.index("reward.gamma=0.37")] = "reward.gama=0.37"  # so it is validated like any override
    assert main(argv) == 2
    assert "reward.gama: unknown key" in capsys.readouterr().err
    # a checkpoint folder whose name has `=` in it (a sweep point's) is still a checkpoint
    from argparse import Namespace

    from awarl.commands.train import overrides_taken_by_resume

    ckpt = tmp_path / "gamma=0.25" / "checkpoint-2"
    ckpt.mkdir(parents=True)
    kept = overrides_taken_by_resume(Namespace(resume=str(ckpt), overrides=["a.b=1"]))
    assert (kept.resume, kept.overrides) == (str(ckpt), ["a.b=1"])
    moved = overrides_taken_by_resume(Namespace(resume="reward.gamma=0.3", overrides=["a.b=1"]))
    assert (moved.resume, moved.overrides) == ("latest", ["reward.gamma=0.3", "a.b=1"])


def test_accelerate_and_deepspeed_files_agree_with_run_configs():
    acc = {p.stem: yaml.safe_load(p.read_text()) for p in (CONFIGS / "accelerate").glob("*.yaml")}
    assert {"zero3_8gpu", "single_gpu", "cpu_2proc"} <= set(acc)
    for a in acc.values():
        ds_file = (a.get("deepspeed_config") or {}).get("deepspeed_config_file")
        if ds_file:
            ds = json.loads((repo_root() / ds_file).read_text())
            assert ds["zero_optimization"]["stage"] in (2, 3)
            # "auto" lets accelerate take batch sizes / clipping from the GRPOConfig the run builds
            assert ds["train_micro_batch_size_per_gpu"] == "auto" and ds["gradient_accumulation_steps"] == "auto"
    assert acc["cpu_2proc"]["use_cpu"] is True and acc["cpu_2proc"]["num_processes"] == 2
    # the 8-GPU recipes leave GPU 0 to `trl vllm-serve` and GPU 1 to the LLM judge: 6 training processes
    assert acc["zero3_8gpu"]["num_processes"] == 6 and acc["zero3_8gpu"]["distributed_type"] == "DEEPSPEED"
    for name, a in acc.items():
        # a header's CUDA_VISIBLE_DEVICES names the GPUs: one process each (zero2 had 7 for 6 GPUs: local rank 6
        # asked for a device that is not there); and no gpu_ids, which accelerate writes over that variable
        assert "gpu_ids" not in a, name
        gpus = re.findall(r"CUDA_VISIBLE_DEVICES=([\d,]+)", (CONFIGS / "accelerate" / f"{name}.yaml").read_text())
        assert all(len(g.split(",")) == a["num_processes"] for g in gpus), name
    for cfg_name in ("qwen2.5-7b_cold_8gpu.yaml", "qwen2.5-7b_warm_8gpu.yaml"):
        cfg = load_config(CONFIGS / cfg_name)
        assert cfg.train.use_vllm and cfg.train.vllm_mode == "server"
        per_step = cfg.train.per_device_train_batch_size * cfg.train.gradient_accumulation_steps * 6
        assert per_step % cfg.train.num_generations == 0
        assert "zero3_8gpu.yaml" in (CONFIGS / cfg_name).read_text()
    warm = load_config(CONFIGS / "qwen2.5-7b_warm_8gpu.yaml")
    assert warm.estimate.model == warm.train.model != "Qwen/Qwen2.5-7B-Instruct"  # warm start: both the plain-GRPO ckpt
    one = load_config(CONFIGS / "qwen2.5-3b_1gpu.yaml")
    assert one.train.use_vllm and one.train.vllm_mode == "colocate" and one.train.lora.enabled


SCRIPTS = repo_root() / "scripts"


@pytest.mark.parametrize("args,msg", [
    (["--model", "Qwen/Qwen2.5-7B-Instruct", "--gpus", "0;rm -rf /"], "--gpus must be"),
    (["--model", "$(reboot)"], "unexpected characters"),
    (["--model", "m", "--port", "99999"], "--port must be"),
    (["--model", "m", "--gpus", "0,1", "--tp", "1"], "must equal the number of --gpus"),
    (["--bogus"], "unknown argument"),
])
def test_serve_vllm_rejects_bad_arguments(args, msg):
    r = subprocess.run(["bash", str(SCRIPTS / "serve_vllm.sh"), *args], capture_output=True, text=True,
                       env={**os.environ, "PATH": os.environ.get("PATH", "")})
    assert r.returncode == 2 and msg in r.stderr


@pytest.mark.parametrize("args,msg", [
    ([], "--model is required"),
    (["--model", "Qwen/Qwen2.5-7B-Instruct", "--gpus", "0;rm -rf /"], "--gpus must be"),
    (["--model", "$(reboot)"], "unexpected characters"),
    (["--model", "m", "--gpus", "0,1"], "must equal the number of --gpus"),
    (["--model", "m", "--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization must be"),
])
def test_serve_judge_rejects_bad_arguments(args, msg):
    r = subprocess.run(["bash", str(SCRIPTS / "serve_judge.sh"), *args], capture_output=True, text=True)
    assert r.returncode == 2 and msg in r.stderr


def test_serve_judge_starts_vllm_openai_server_with_validated_words(tmp_path):
    """With a stub `vllm` on PATH, the script execs `vllm serve` on the requested GPUs, port and memory share."""
    stub = tmp_path / "vllm"
    stub.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$CUDA_VISIBLE_DEVICES" "$@" > "$STUB_OUT"\n')
    stub.chmod(0o755)
    out = tmp_path / "argv.txt"
    r = subprocess.run(["bash", str(SCRIPTS / "serve_judge.sh"), "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpus",
                        "2,3", "--tp", "2", "--port", "8011", "--gpu-memory-utilization", "0.45"],
                       capture_output=True, text=True,
                       env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "STUB_OUT": str(out)})
    assert r.returncode == 0, r.stderr
    argv = out.read_text().splitlines()
    assert argv[:3] == ["2,3", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    for flag, value in (("--port", "8011"), ("--tensor-parallel-size", "2"), ("--gpu-memory-utilization", "0.45"),
                        ("--host", "127.0.0.1"), ("--generation-config", "vllm")):
        assert argv[argv.index(flag) + 1] == value


@pytest.mark.parametrize("args,msg", [
    ([], "--config is required"),
    (["--config", "configs/base.yaml", "--num-machines", "2", "--machine-rank", "2"], "--machine-rank must be"),
    (["--config", "configs/base.yaml", "--main-ip", "a;b"], "unexpected characters"),
    (["--config", "configs/base.yaml", "--", "not-an-override"], "override must look like"),
    (["--config", "configs/nope.yaml"], "config file not found"),
])
def test_train_multinode_rejects_bad_arguments(args, msg):
    r = subprocess.run(["bash", str(SCRIPTS / "train_multinode.sh"), *args], capture_output=True, text=True,
                       cwd=repo_root())
    assert r.returncode == 2 and msg in r.stderr


def test_train_multinode_builds_the_accelerate_command(tmp_path):
    """With a stub `accelerate` on PATH, the script execs it with validated, separate arguments."""
    stub = tmp_path / "accelerate"
    stub.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$STUB_OUT"\n')
    stub.chmod(0o755)
    out = tmp_path / "argv.txt"
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "STUB_OUT": str(out)}
    r = subprocess.run(["bash", str(SCRIPTS / "train_multinode.sh"), "--config", "configs/qwen2.5-7b_cold_8gpu.yaml",
                        "--num-machines", "2", "--machine-rank", "1", "--main-ip", "10.0.0.1",
                        "--", "reward.gamma=0.25", "run.name=a b"], capture_output=True, text=True,
                       cwd=repo_root(), env=env)
    assert r.returncode == 0, r.stderr
    argv = out.read_text().splitlines()
    assert argv[:2] == ["launch", "--config_file"]
    assert argv[argv.index("--num_processes") + 1] == "12"  # 2 nodes x 6 training processes
    assert argv[argv.index("--machine_rank") + 1] == "1"
    assert argv[-2:] == ["reward.gamma=0.25", "run.name=a b"]  # one argument each, spaces intact


def test_wandb_without_the_package_is_a_clear_error_before_any_weights(tmp_path, capsys, monkeypatch):
    """Selecting wandb when it is not installed used to fail only when the Trainer was built, after the
    policy had loaded; now `--dry-run` (and a real launch, before loading) name the key and the fix."""
    import sys

    from awarl.cli import main

    monkeypatch.setitem(sys.modules, "wandb", None)  # not importable, whatever this machine has
    rc = main(["train", "--config", str(CONFIGS / "base.yaml"), "--dry-run", f"run.out_dir={tmp_path}",
               "train.report_to=[wandb]"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "train.report_to" in err and "'wandb'" in err and "pip install wandb" in err
    assert main(["train", "--config", str(CONFIGS / "base.yaml"), "--dry-run", f"run.out_dir={tmp_path}",
                 "train.report_to=[tensorbaord]"]) == 2
    assert "unknown logger 'tensorbaord'" in capsys.readouterr().err


def test_wandb_offline_only_without_any_credentials(tmp_path, monkeypatch):
    """WANDB_MODE=offline is set when no key is configured; a `wandb login` (netrc entry) or an explicit
    WANDB_MODE is respected instead of being silently forced offline."""
    from awarl.config import load_config
    from awarl.training.trainer import report_to

    stub = tmp_path / "site" / "wandb"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("WANDB_MODE", "")
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    cfg = load_config(None, ["train.report_to=[wandb, tensorboard]"])
    assert report_to(cfg.train) == ["wandb", "tensorboard"]
    assert os.environ["WANDB_MODE"] == "offline"

    monkeypatch.delenv("WANDB_MODE")
    netrc_file = tmp_path / "netrc"
    netrc_file.write_text("machine api.wandb.ai\n  login user\n  password not-a-real-key\n")
    netrc_file.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc_file))
    report_to(cfg.train)
    assert "WANDB_MODE" not in os.environ  # logged in: wandb decides (online)

    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    report_to(cfg.train)
    assert os.environ["WANDB_MODE"] == "disabled"
    assert report_to(load_config(None, ["train.report_to=[none]"]).train) == "none"


def _header_commands(path):
    """The shell commands of a config's header comment, continuation lines joined, env assignments dropped."""
    import re
    import shlex

    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    cmds = []
    for line in "\n".join(lines).replace("\\\n", " ").splitlines():
        line = re.sub(r"^([A-Z_][A-Z0-9_]*=\S*\s+)+", "", line.split(" # ")[0])  # CUDA_VISIBLE_DEVICES=...
        first = line.split()[:1]
        if first and (first[0] in ("awarl", "accelerate") or first[0].startswith("scripts/")):
            cmds.append(shlex.split(line))  # prose lines are skipped: they may hold unbalanced quotes
    return cmds


def _script_flags(script):
    import re

    return set(re.findall(r"^\s+(--[a-z-]+)\)", (SCRIPTS / script).read_text(), flags=re.M))


@pytest.mark.parametrize("path", [p for p in RUN_CONFIGS if p.name != "base.yaml"],
                         ids=[p.name for p in RUN_CONFIGS if p.name != "base.yaml"])
def test_header_launch_commands_use_real_flags_and_start_every_service(path):
    """Every command in a config's header parses with the real CLI / script flags, names files that exist,
    and the services the config connects to (retriever server, `trl vllm-serve`) are started on the ports
    the config expects. (The plain-GRPO header used to omit the retriever server its config needs.)"""
    from urllib.parse import urlparse

    from awarl.cli import build_parser

    cfg = load_config(path)
    cmds = _header_commands(path)
    assert cmds, f"{path.name}: no launch command in the header"
    parser = build_parser()
    started = {}
    for words in cmds:
        if words[0] == "accelerate":
            assert words[1] == "launch" and words[words.index("-m") + 1] == "awarl.cli"
            acc = words[words.index("--config_file") + 1]
            assert (repo_root() / acc).is_file(), acc
            words = ["awarl", *words[words.index("-m") + 2:]]
        if words[0] == "awarl":
            args, rest = parser.parse_known_args(words[1:])
            assert all("=" in r for r in rest), f"{path.name}: unknown arguments {rest}"
            if getattr(args, "config", None):
                assert (repo_root() / args.config).resolve() == path.resolve()
            continue
        script = words[0].split("/", 1)[1]
        assert (SCRIPTS / script).is_file(), script
        flags = [w for w in words[1:] if w.startswith("--")]
        assert set(flags) <= _script_flags(script), f"{path.name}: {script} has no {set(flags) - _script_flags(script)}"
        port = words[words.index("--port") + 1] if "--port" in words else None
        started[script] = port
        if script == "serve_vllm.sh":  # the server must hold the policy being trained
            assert words[words.index("--model") + 1] == cfg.train.model, path.name
        if script == "serve_judge.sh":  # and the judge server the judge model of critic:
            assert words[words.index("--model") + 1] == cfg.critic.model, path.name
    if cfg.retrieval.kind == "server":
        assert started.get("serve_retriever.sh") == str(urlparse(cfg.retrieval.server_url).port), path.name
    if cfg.train.use_vllm and cfg.train.vllm_mode == "server":
        assert started.get("serve_vllm.sh") == str(cfg.train.vllm_server_port), path.name
    if cfg.critic.judge == "openai":
        assert started.get("serve_judge.sh") == str(urlparse(cfg.critic.base_url).port), path.name
