"""Fault injection, round 4 (issue 44): numbers at the edge are refused where they are read, naming the key.

A port past 65535 (uvicorn took it modulo 2**16: `serve --port 70000` said 70000 and listened on 4464), a
seed numpy does not take (`run.seed=-1` passed the dry run and failed the launch with numpy's words), a
timeout of 1e10 s (an OverflowError traceback from the socket layer, or every verdict failing as "looks down").
docs/reliability.md (round 4) gives what each did before.
"""

from __future__ import annotations

import re

import pytest

from awarl.cli import main
from awarl.config import MAX_PORT, MAX_SECONDS, MAX_SEED, ConfigError, load_config


@pytest.mark.parametrize("override,key", [
    ("retrieval.timeout_s=1e10", "retrieval.timeout_s"), ("critic.timeout_s=1e10", "critic.timeout_s"),
    ("retrieval.wait_s=1e10", "retrieval.wait_s"), ("critic.backoff_s=1e10", "critic.backoff_s"),
    ("critic.max_retry_after_s=1e10", "critic.max_retry_after_s"),
    ("critic.breaker_cooldown_s=1e10", "critic.breaker_cooldown_s"),
    ("run.seed=-1", "run.seed"), (f"run.seed={2**32}", "run.seed"), ("simulate.seed=-1", "simulate.seed"),
    ("train.vllm_server_port=70000", "train.vllm_server_port"), ("train.vllm_server_port=0", "train.vllm_server_port"),
    ("critic.base_url=http://127.0.0.1:70000/v1", "critic.base_url"),
    ("retrieval.server_url=http://127.0.0.1:0", "retrieval.server_url"),
    ("research.planner_base_url=http://h:99999/v1", "research.planner_base_url"),
])
def test_a_number_no_socket_or_generator_takes_is_refused_at_load_naming_its_key(override, key):
    with pytest.raises(ConfigError, match=re.escape(key) + ": "):
        load_config(None, [override])


def test_the_largest_seed_of_a_simulation_is_its_last_one():
    load_config(None, [f"simulate.seed={MAX_SEED}"])
    with pytest.raises(ConfigError, match=r"seed \+ seeds - 1 = 4294967296 is past 4294967295"):
        load_config(None, [f"simulate.seed={MAX_SEED}", "simulate.seeds=2"])


def test_the_bounds_themselves_are_accepted():
    cfg = load_config(None, [f"run.seed={MAX_SEED}", f"retrieval.timeout_s={MAX_SECONDS}",
                             f"critic.timeout_s={MAX_SECONDS}", f"train.vllm_server_port={MAX_PORT}",
                             "critic.base_url=http://127.0.0.1:65535/v1", "retrieval.server_url=http://h"])
    assert cfg.run.seed == MAX_SEED and cfg.train.vllm_server_port == MAX_PORT


@pytest.mark.parametrize("argv,says", [
    (["serve", "retriever", "--index", "x", "--port", "70000"], "argument --port: 70000 is outside 1-65535"),
    (["serve", "retriever", "--index", "x", "--port", "0"], "argument --port: 0 is outside 1-65535"),
    (["model", "tiny", "--out", "x", "--seed", "-1"], "argument --seed: -1 is outside 0-4294967295"),
    (["simulate", "--seed", "4294967296"], "argument --seed: 4294967296 is outside 0-4294967295"),
    (["data", "corpus", "--out", "x", "--seed", "-3"], "argument --seed: -3 is outside 0-4294967295"),
])
def test_a_port_or_seed_on_the_command_line_is_checked_by_the_parser(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_a_negative_seed_fails_the_dry_run_not_the_launch(tmp_path, capsys):
    """Before: `train --dry-run run.seed=-1` exited 0 and the launch failed with numpy's "Seed must be between
    0 and 2**32 - 1", naming no key."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train: {report_to: [none]}\n")
    assert main(["train", "--config", str(cfg), "--dry-run", "run.seed=-1"]) == 2
    assert "run.seed: Input should be greater than or equal to 0 (got -1)" in capsys.readouterr().err
