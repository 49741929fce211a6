"""`awarl sweep`: grid expansion into valid run configs, launch scripts, and the comparison of results."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from awarl.config import ConfigError, load_config
from awarl.stages.sweep import aggregate, expand, load_sweep, run_sweep

REPO = Path(__file__).resolve().parents[1]


def sweep_file(tmp_path: Path, **over) -> Path:
    spec = {"name": "g", "base": str(REPO / "configs" / "base.yaml"), "out_dir": str(tmp_path / "sw"),
            "grid": {"reward.gamma": [0.25, 1.0], "reward.p_min": [0.1, 0.2]}, "mode": "local"}
    spec.update(over)
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"sweep": spec}))
    return p


def fresh_start_commands(script: Path) -> list[list[str]]:
    """The commands a launch script runs for a run without a checkpoint: its plain lines and the `else` branch
    of its resume test."""
    cmds, branch = [], None
    for line in script.read_text().splitlines()[2:]:  # after the shebang and `set -euo pipefail`
        if line.startswith("if "):
            branch = "then"
        elif line in ("else", "fi"):
            branch = "else" if line == "else" else None
        elif branch != "then":
            cmds.append(shlex.split(line))
    return cmds


def test_expand_writes_one_valid_config_per_grid_point(tmp_path):
    spec, base_dir = load_sweep(sweep_file(tmp_path))
    runs = expand(spec, base_dir)
    assert len(runs) == 4 and len({r["name"] for r in runs}) == 4
    seen = set()
    for r in runs:
        cfg = load_config(r["config"])  # each written config is complete and valid on its own
        assert (cfg.reward.gamma, cfg.reward.p_min) == (r["point"]["reward.gamma"], r["point"]["reward.p_min"])
        assert cfg.run.out_dir == r["out_dir"]
        assert cfg.train.p_estimates == str(tmp_path / "sw" / "p_estimates.jsonl")  # shared estimate
        seen.add((cfg.reward.gamma, cfg.reward.p_min))
    assert seen == {(0.25, 0.1), (0.25, 0.2), (1.0, 0.1), (1.0, 0.2)}


def test_invalid_grid_value_names_the_point(tmp_path):
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid={"reward.gamma": [0.5, 2.0]}))
    with pytest.raises(ConfigError, match=r"reward\.gamma"):
        expand(spec, base_dir)
    with pytest.raises(ConfigError, match="unknown key"):
        load_sweep(sweep_file(tmp_path, gird={"reward.gamma": [1]}))
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid={"reward.gamma": [0.5, 0.25, 0.50]}))
    with pytest.raises(ConfigError, match=r"are one run \(gamma=0.5\); list each value of sweep.grid once"):
        expand(spec, base_dir)  # 0.5 and 0.50 would train twice into one folder and be compared as two runs
    for over in ({"grid": {"run.out_dir": ["a", "b"]}}, {"overrides": ["train.p_estimates=mine.jsonl"]}):
        spec, base_dir = load_sweep(sweep_file(tmp_path, **over))
        with pytest.raises(ConfigError, match=r"set by sweep.grid or sweep.overrides; the sweep sets them"):
            expand(spec, base_dir)  # the sweep's own value would replace it without a word


def test_scripts_mode_writes_quoted_launch_scripts(tmp_path):
    f = sweep_file(tmp_path, mode="scripts", grid={"reward.gamma": [0.5]},
                   launcher=["accelerate", "launch", "--config_file", "my configs/a b.yaml"])
    res = run_sweep(f)
    scripts = [Path(p) for p in res["scripts"]]
    assert [p.name for p in scripts] == ["launch_estimate.sh", "launch_gamma=0.5.sh"]
    argv = fresh_start_commands(scripts[-1])[-1]  # the path with spaces survives as one argument
    assert argv[:4] == ["accelerate", "launch", "--config_file", "my configs/a b.yaml"]
    assert argv[4:8] == ["-m", "awarl.cli", "train", "--config"]
    assert (tmp_path / "sw" / "launch_all.sh").read_text().count("bash ") == 2


def test_aggregate_compares_finished_runs_and_marks_missing(tmp_path):
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid={"reward.gamma": [0.25, 0.5, 1.0]}))
    runs = expand(spec, base_dir)
    for r, (p, a) in zip(runs[:2], [(0.8, 0.4), (0.6, 0.5)], strict=False):
        d = Path(r["out_dir"]) / "eval" / "final"
        d.mkdir(parents=True)
        ra = 2 * p * a / (p + a)
        (d / "results.json").write_text(json.dumps({"macro": {"ra_f1": ra, "precision": p, "accuracy": a,
                                                              "abstention_rate": 1 - a / p}}))
    table = aggregate(spec, runs)
    rows = {r["reward.gamma"]: r for r in table["runs"]}
    assert rows[0.25]["status"] == "done" and rows[0.25]["precision"] == 0.8
    assert rows[0.5]["ra_f1"] == pytest.approx(2 * 0.6 * 0.5 / 1.1)
    assert rows[1.0]["status"] == "missing"
    md = (tmp_path / "sw" / "comparison.md").read_text()
    assert "0.533" in md and "—" in md  # RA-F1 of the first run; the missing run has dashes
    assert (tmp_path / "sw" / "comparison.png").stat().st_size > 1000


@pytest.mark.slow
def test_local_dry_run_checks_every_run_with_train(tmp_path):
    """Each grid point goes through `awarl train --dry-run` in its own process (no weights loaded)."""
    res = run_sweep(sweep_file(tmp_path, grid={"reward.gamma": [0.25, 1.0]}), dry_run=True)
    assert res["exit_codes"] == {"gamma=0.25": 0, "gamma=1.0": 0}
    bad = sweep_file(tmp_path, grid={"reward.gamma": [0.5]}, overrides=["agent.template=no-such-template"])
    assert run_sweep(bad, dry_run=True)["exit_codes"] == {"gamma=0.5": 2}  # the bad template is caught


def test_aggregate_adds_paired_differences_when_predictions_are_there(tmp_path):
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid={"reward.gamma": [0.25, 1.0]}))
    runs = expand(spec, base_dir)
    preds = {0: ["Paris", "Lyon", "Rome", "Paris"],                                      # 2 C, 2 W
             1: ["Paris", "not enough information", "not enough information", "Paris"]}  # 2 C, 2 A
    for i, r in enumerate(runs):
        d = Path(r["out_dir"]) / "eval" / "final"
        d.mkdir(parents=True)
        (d / "predictions.jsonl").write_text("".join(json.dumps(
            {"id": str(k), "dataset": "hotpotqa", "question": f"q{k}?", "prediction": p, "answers": ["Paris"]}) + "\n"
            for k, p in enumerate(preds[i])))
        (d / "results.json").write_text(json.dumps({"macro": {"ra_f1": 0.5}}))
    table = aggregate(spec, runs)
    first, second = table["runs"]
    assert first["delta_ra_f1"] is None
    # gamma=1.0: P = 1, A = 1/2 -> RA-F1 2/3; gamma=0.25: P = A = 1/2 -> RA-F1 1/2
    assert second["delta_ra_f1"]["delta"] == pytest.approx(2 / 3 - 1 / 2)
    assert len(second["delta_ra_f1"]["ci"]) == 2
    assert "+0.167" in (tmp_path / "sw" / "comparison.md").read_text()
    assert (tmp_path / "sw" / "paired" / "compare.md").is_file()


def test_launcher_is_found_in_an_environment_that_is_not_activated(monkeypatch):
    import sys

    from awarl.stages.sweep import resolve_launcher

    prog = Path(sys.executable).name
    monkeypatch.setenv("PATH", "")  # like `.venv/bin/awarl sweep ...` without `source .venv/bin/activate`
    assert resolve_launcher([prog, "launch", "x"]) == [str(Path(sys.executable).parent / prog), "launch", "x"]
    assert resolve_launcher(["/bin/echo", "hi"]) == ["/bin/echo", "hi"]  # a path is taken as it is
    with pytest.raises(ConfigError, match="sweep.launcher: 'no-such-launcher' is not on PATH"):
        resolve_launcher(["no-such-launcher", "launch"])


def test_shipped_gamma_sweep_crosses_gamma_with_every_expected_rate_reading(tmp_path, capsys):
    """configs/sweep_gamma.yaml is the confirming experiment of docs/method.md: γ × the expected-rate readings; the
    command lists the grid (here with --aggregate, which runs nothing)."""
    from awarl.cli import main
    from awarl.config import RewardConfig, load_config
    from awarl.io import repo_root

    shipped = repo_root() / "configs" / "sweep_gamma.yaml"
    assert main(["sweep", "--config", str(shipped), "--aggregate", f"sweep.out_dir={tmp_path / 'sw'}"]) == 0
    out = capsys.readouterr().out
    import yaml

    grid = yaml.safe_load(shipped.read_text())["sweep"]["grid"]
    n = len(grid["reward.gamma"]) * len(grid["reward.expected_rate"])
    assert n >= 15 and f"{n} runs over reward.gamma x reward.expected_rate:" in out
    runs = json.loads((tmp_path / "sw" / "runs.json").read_text())
    points = {(r["point"]["reward.gamma"], r["point"]["reward.expected_rate"]) for r in runs}
    assert {rate for _, rate in points} == {"posterior", "threshold", "r_base_mean"} and len(points) == n
    assert RewardConfig().gamma in {g for g, _ in points}  # the shipped γ is on the grid
    for r in runs:
        cfg = load_config(r["config"])
        assert (cfg.reward.gamma, cfg.reward.expected_rate) == (r["point"]["reward.gamma"],
                                                                r["point"]["reward.expected_rate"])
        assert f"reward.gamma={cfg.reward.gamma}, reward.expected_rate={cfg.reward.expected_rate}" in out


def test_shipped_dither_sweep_crosses_the_spec_step_with_the_shipped_dither(tmp_path, capsys):
    """configs/sweep_dither.yaml: the SPEC's batch-wide step (penalty_dither 0) against the shipped per-group draw,
    at the shipped γ and round 5's; every run's resolved config carries its point."""
    from awarl.cli import main
    from awarl.config import RewardConfig, load_config
    from awarl.io import repo_root

    shipped = repo_root() / "configs" / "sweep_dither.yaml"
    assert main(["sweep", "--config", str(shipped), "--aggregate", f"sweep.out_dir={tmp_path / 'sw'}"]) == 0
    assert "4 runs over reward.penalty_dither x reward.gamma:" in capsys.readouterr().out
    runs = json.loads((tmp_path / "sw" / "runs.json").read_text())
    points = {(r["point"]["reward.penalty_dither"], r["point"]["reward.gamma"]) for r in runs}
    assert {d for d, _ in points} == {0.0, RewardConfig().penalty_dither} and RewardConfig().gamma in {g for _, g in points}
    for r in runs:
        cfg = load_config(r["config"])
        assert (cfg.reward.penalty_dither, cfg.reward.gamma) == (r["point"]["reward.penalty_dither"],
                                                                 r["point"]["reward.gamma"])


@pytest.mark.parametrize("grid", [{"estimate.k": [4, 8]}, {"train.model": ["Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-7B"]},
                                  {"retrieval.topk": [3, 5]}, {"agent.max_turns": [2, 4]}])
def test_a_shared_estimate_is_refused_for_a_grid_over_what_it_is_sampled_under(tmp_path, grid):
    """Every run of a shared estimate trains on the first point's p_i; a grid over the model, k, retrieval or
    agent limits would hand one setting's p_i to another. Refused before any config is written."""
    key = next(iter(grid))
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid={"reward.gamma": [0.02], **grid}))
    with pytest.raises(ConfigError, match=rf"share_estimate is on, but grid point .*{key}.*share_estimate: false"):
        expand(spec, base_dir)
    assert not (tmp_path / "sw").exists()
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid={"reward.gamma": [0.02], **grid}, share_estimate=False))
    runs = expand(spec, base_dir)  # each run estimates its own p_i instead
    assert [r["estimate"] for r in runs] == [True, True]
    assert {load_config(r["config"]).train.p_estimates for r in runs} == {None}


def test_a_shared_estimate_allows_a_seed_grid_unless_the_seed_picks_the_questions(tmp_path):
    """The p_i of the standard checkpoint do not depend on the training run's seed, so seeds share them; but
    with a `limit` the seed subsamples the training questions, and the other seeds' questions would lack p_i."""
    entry = {"path": "data/hotpotqa/hotpot_dev_distractor_v1.sample200.json", "format": "hotpotqa",
             "dataset": "hotpotqa"}
    seeds = {"run.seed": [0, 1]}
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid=seeds, overrides=[f"data.train=[{json.dumps(entry)}]"]))
    assert len(expand(spec, base_dir)) == 2
    limited = json.dumps({**entry, "limit": 20})
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid=seeds, overrides=[f"data.train=[{limited}]"]))
    with pytest.raises(ConfigError, match=r"run\.seed: 0 -> 1"):
        expand(spec, base_dir)


def test_without_a_shared_estimate_each_run_estimates_into_the_file_it_trains_on(tmp_path):
    """share_estimate false: every run that reads p_i gets its own `awarl estimate` before its `train`, in
    one launch script; a run with a train.p_estimates of its own, or a reward without p_i, estimates nothing."""
    from awarl.data.estimates import estimates_path
    from awarl.stages.sweep import run_commands

    f = sweep_file(tmp_path, grid={"reward.strategy": ["awarl", "bapo"]}, share_estimate=False, mode="scripts")
    res = run_sweep(f)
    scripts = {Path(p).name: fresh_start_commands(Path(p)) for p in res["scripts"]}
    assert set(scripts) == {"launch_strategy=awarl.sh", "launch_strategy=bapo.sh"}  # no shared estimate
    est, train = scripts["launch_strategy=awarl.sh"]
    assert est[-3:-1] == ["estimate", "--config"] and train[-3:] == ["train", "--config", est[-1]]
    assert [x[3] for x in scripts["launch_strategy=bapo.sh"]] == ["train"]
    cfg = load_config(est[-1])
    assert estimates_path(cfg.estimate.out, cfg.run.out_dir) == \
        estimates_path(cfg.estimate.out, cfg.run.out_dir, train_file=cfg.train.p_estimates)
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid={"reward.gamma": [0.5]}, share_estimate=False,
                                           overrides=[f"train.p_estimates={tmp_path / 'mine.jsonl'}"]))
    assert [cmds for _, cmds in run_commands(spec, expand(spec, base_dir))][0][0][3] == "train"


def _finish(run: dict) -> None:
    """What `awarl train` leaves in a finished run: its resolved config and the final evaluation."""
    d = Path(run["out_dir"])
    (d / "resolved_config.yaml").write_text((d / "config.yaml").read_text())
    (d / "eval" / "final").mkdir(parents=True)
    (d / "eval" / "final" / "results.json").write_text(json.dumps({"macro": {"ra_f1": 0.5}}))


def test_a_finished_run_under_other_settings_is_refused_not_skipped(tmp_path, caplog):
    """A rerun skips finished runs; after an edit of the sweep's settings that would put the old results in the
    comparison under the new settings. Refused before any config is rewritten; --aggregate warns and keeps
    the finished run's config."""
    f = sweep_file(tmp_path, grid={"reward.gamma": [0.25, 1.0]})
    spec, base_dir = load_sweep(f)
    runs = expand(spec, base_dir)
    _finish(runs[0])
    assert len(expand(spec, base_dir)) == 2  # unchanged settings: the finished run is simply skipped later
    before = {r["name"]: Path(r["config"]).read_bytes() for r in runs}
    edited = sweep_file(tmp_path, grid={"reward.gamma": [0.25, 1.0]}, overrides=["train.max_steps=321"])
    with pytest.raises(ConfigError, match=r"1 finished or partly trained run\(s\).*gamma=0.25 \(finished\): train\.max_steps: \d+ -> 321"):
        run_sweep(edited)
    assert {r["name"]: Path(r["config"]).read_bytes() for r in runs} == before
    res = run_sweep(edited, aggregate_only=True)
    assert "run gamma=0.25 (finished) was trained with other settings" in caplog.text
    assert Path(runs[0]["config"]).read_bytes() == before["gamma=0.25"]
    assert load_config(runs[1]["config"]).train.max_steps == 321  # the unfinished point takes the edit
    assert [r["status"] for r in res["comparison"]["runs"]] == ["done", "missing"]
    scripts = run_sweep(sweep_file(tmp_path, grid={"reward.gamma": [0.25, 1.0]}, mode="scripts"))["scripts"]
    assert [Path(p).name for p in scripts] == ["launch_estimate.sh", "launch_gamma=1.0.sh"]  # not the finished one


@pytest.mark.slow
def test_a_local_sweep_without_a_shared_estimate_estimates_trains_and_compares_each_run(tmp_path, tiny_dir,
                                                                                         bm25_index):
    """The whole local mode on a real tiny model: per run `awarl estimate` then `awarl train` (one GRPO step and
    the final evaluation) in their own processes, the comparison of both; a rerun skips both finished runs, and a
    rerun under an edited setting is refused with the runs left as they were."""
    hotpot = REPO / "data" / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json"
    entry = {"path": str(hotpot), "format": "hotpotqa", "dataset": "hotpotqa", "limit": 2}
    base = {"run": {"name": "b", "out_dir": str(tmp_path / "unused"), "seed": 0},
            "data": {"train": [entry], "eval": [{**entry, "limit": 1}]},
            "retrieval": {"kind": "bm25", "index_dir": str(bm25_index), "topk": 1},
            "agent": {"max_turns": 1, "max_new_tokens_per_turn": 8, "max_trajectory_tokens": 200},
            "generation": {"batch_size": 8}, "critic": {"judge": "lexical"},
            "estimate": {"k": 2}, "eval": {"limit": 1, "datasets": ["hotpotqa"]},
            "train": {"model": str(tiny_dir), "num_generations": 2, "per_device_train_batch_size": 2,
                      "max_steps": 1, "save_steps": 1, "report_to": ["none"], "bf16": False,
                      "gradient_checkpointing": False}}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    f = sweep_file(tmp_path, base="base.yaml", grid={"reward.gamma": [0.02, 0.5]}, share_estimate=False,
                   launcher=[])
    res = run_sweep(f)
    assert res["exit_codes"] == {"gamma=0.02": 0, "gamma=0.5": 0}
    for r in res["runs"]:
        d = Path(r["out_dir"])
        assert len((d / "p_estimates.jsonl").read_text().splitlines()) == 2  # its own p_i, both questions
        assert (d / "p_estimates.manifest.json").is_file() and (d / "eval" / "final" / "results.json").is_file()
    assert [r["status"] for r in res["comparison"]["runs"]] == ["done", "done"]
    stamps = {r["name"]: (Path(r["out_dir"]) / "eval" / "final" / "results.json").stat().st_mtime_ns
              for r in res["runs"]}
    again = run_sweep(f)  # the finished runs are skipped: nothing is trained again
    assert again["exit_codes"] == {"gamma=0.02": 0, "gamma=0.5": 0}
    assert stamps == {r["name"]: (Path(r["out_dir"]) / "eval" / "final" / "results.json").stat().st_mtime_ns
                      for r in again["runs"]}
    edited = sweep_file(tmp_path, base="base.yaml", grid={"reward.gamma": [0.02, 0.5]}, share_estimate=False,
                        launcher=[], overrides=["reward.lambda_cite=0.3"])
    with pytest.raises(ConfigError, match=r"2 finished or partly trained run\(s\).*reward\.lambda_cite"):
        run_sweep(edited)


def _final_eval(run: dict, predictions: list[str], *, finished: bool = True) -> None:
    """A run's final evaluation: its predictions (question k answered with predictions[k]; gold "Paris") and,
    when `finished`, its results.json (a run killed during the evaluation has only part of the predictions)."""
    d = Path(run["out_dir"]) / "eval" / "final"
    d.mkdir(parents=True)
    (d / "predictions.jsonl").write_text("".join(json.dumps(
        {"id": str(k), "dataset": "hotpotqa", "question": f"q{k}?", "prediction": p, "answers": ["Paris"]}) + "\n"
        for k, p in enumerate(predictions)))
    if finished:
        (d / "results.json").write_text(json.dumps({"macro": {"ra_f1": 0.5}}))


def test_the_paired_comparison_leaves_out_a_run_without_final_results(tmp_path):
    """Before: a run killed during its final evaluation (a partial predictions.jsonl, no results.json) took part
    in the paired comparison: every finished run's ΔRA-F1 was computed on its 2 questions instead of the 4 both
    finished runs answered, the `missing` row got a ΔRA-F1 of its own, and comparison.md said "the questions
    both answered"."""
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid={"reward.gamma": [0.25, 0.5, 1.0]}))
    runs = expand(spec, base_dir)
    _final_eval(runs[0], ["Paris", "Lyon", "Rome", "Paris"])                                       # 2 C, 2 W
    _final_eval(runs[1], ["Paris", "not enough information", "not enough information", "Paris"])  # 2 C, 2 A
    _final_eval(runs[2], ["Paris", "Paris"], finished=False)                                       # killed
    table = aggregate(spec, runs)
    rows = {r["name"]: r for r in table["runs"]}
    assert rows["gamma=1.0"]["status"] == "missing" and rows["gamma=1.0"]["delta_ra_f1"] is None
    assert rows["gamma=0.25"]["delta_ra_f1"] is None  # the baseline
    assert rows["gamma=0.5"]["delta_ra_f1"]["delta"] == pytest.approx(2 / 3 - 1 / 2)  # on all 4 questions
    paired = json.loads((tmp_path / "sw" / "paired" / "compare.json").read_text())
    assert paired["common_questions"] == 4 and [r["name"] for r in paired["runs"]] == ["gamma=0.25", "gamma=0.5"]
    md = (tmp_path / "sw" / "comparison.md").read_text()
    assert "difference to `gamma=0.25`, the baseline" in md
    assert "on the 4 questions every compared run answered" in md and "both answered" not in md


def test_a_null_grid_value_stays_null_and_other_values_round_trip(tmp_path):
    """Before: grid values went through str() into KEY=VALUE overrides, so `null` reached the run config as the
    string "None" (refused for a number field, a model named "None" for estimate.model), and a string with a
    colon was read back as a mapping."""
    grid = {"reward.r_ref_floor_margin": [None, 0.1], "estimate.model": [None, "org/model: v2 #1"],
            "train.learning_rate": [1e-06], "agent.abstention_phrases": [["not enough: info", "i don't know"]]}
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid=grid, share_estimate=False))
    runs = expand(spec, base_dir)
    assert len(runs) == 4
    for r in runs:
        cfg = load_config(r["config"])
        got = {"reward.r_ref_floor_margin": cfg.reward.r_ref_floor_margin, "estimate.model": cfg.estimate.model,
               "train.learning_rate": cfg.train.learning_rate,
               "agent.abstention_phrases": list(cfg.agent.abstention_phrases)}
        assert got == r["point"]
    assert {load_config(r["config"]).estimate.model for r in runs} == {None, "org/model: v2 #1"}
    assert "None" not in {load_config(r["config"]).estimate.model for r in runs}


def test_without_a_shared_estimate_each_run_writes_its_own_p_i_even_when_the_base_names_one(tmp_path):
    """Before: with share_estimate false the sweep never set estimate.out, so a base config's estimate.out made
    every run's own `awarl estimate` write, and its train read, one and the same file."""
    from awarl.data.estimates import estimates_path

    (tmp_path / "base.yaml").write_text(yaml.safe_dump({"extends": str(REPO / "configs" / "base.yaml"),
                                                        "estimate": {"out": str(tmp_path / "one.jsonl")}}))
    spec, base_dir = load_sweep(sweep_file(tmp_path, base="base.yaml", grid={"estimate.k": [4, 8]},
                                           share_estimate=False))
    runs = expand(spec, base_dir)
    for r in runs:
        cfg = load_config(r["config"])
        own = Path(r["out_dir"]) / "p_estimates.jsonl"
        assert estimates_path(cfg.estimate.out, cfg.run.out_dir) == own  # what its `awarl estimate` writes
        assert estimates_path(cfg.estimate.out, cfg.run.out_dir, train_file=cfg.train.p_estimates) == own
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid={"estimate.k": [4]}, share_estimate=False,
                                           overrides=[f"estimate.out={tmp_path / 'x.jsonl'}"]))
    with pytest.raises(ConfigError, match=r"estimate\.out set by sweep.grid or sweep.overrides"):
        expand(spec, base_dir)  # the sweep sets it per run: an override would be dropped without a word


def test_a_launch_script_resumes_once_the_run_has_a_checkpoint(tmp_path):
    """Before: whether `train` got --resume was decided when the script was written, so a job pre-empted after
    its first checkpoint and requeued with the same script ran train without --resume, which refuses to
    overwrite the run. The launcher is `printf` here: the script prints the train command it would run, one argument a line."""
    import subprocess

    from awarl.training.checkpoints import mark_complete

    f = sweep_file(tmp_path, mode="scripts", grid={"reward.gamma": [0.5]}, launcher=["printf", r"%s\n"],
                   out_dir=str(tmp_path / "my sweep's runs"))
    script = Path(run_sweep(f)["scripts"][-1])
    assert script.name == "launch_gamma=0.5.sh"

    def train_argv() -> list[str]:
        done = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True)
        return done.stdout.splitlines()

    assert train_argv()[-3:] == ["train", "--config", str(tmp_path / "my sweep's runs" / "gamma=0.5" /
                                                          "config.yaml")]  # a fresh start: no --resume
    ckpt = tmp_path / "my sweep's runs" / "gamma=0.5" / "checkpoint-10"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 10}))
    mark_complete(ckpt, 10)
    assert train_argv()[-4:] == ["train", "--config", str(ckpt.parent / "config.yaml"), "--resume"]


def test_dry_run_in_scripts_mode_checks_every_run_with_train_and_writes_no_script(tmp_path, monkeypatch):
    """Before: `--dry-run` was ignored in scripts mode: no `train --dry-run` check ran and the launch scripts were
    written, so a bad config surfaced only on the cluster."""
    import awarl.stages.sweep as sweep_mod

    calls: list[list[str]] = []
    monkeypatch.setattr(sweep_mod.subprocess, "call", lambda cmd: calls.append(cmd) or 2)  # train refuses both
    res = run_sweep(sweep_file(tmp_path, mode="scripts", grid={"reward.gamma": [0.25, 1.0]},
                               launcher=["accelerate", "launch"]), dry_run=True)
    assert res["exit_codes"] == {"gamma=0.25": 2, "gamma=1.0": 2} and "scripts" not in res
    assert [c[3:5] + c[-1:] for c in calls] == [["train", "--config", "--dry-run"]] * 2
    assert all(c[0] != "accelerate" for c in calls)  # a config check needs no launcher
    assert not list((tmp_path / "sw").glob("launch_*.sh"))


def test_the_plot_of_a_two_key_grid_draws_one_line_per_value_of_the_second_key(tmp_path, monkeypatch):
    """Before: comparison.png joined the points of every combination into one line per metric, sorted by the first
    key only, so it zigzagged between the second key's values."""
    import matplotlib.figure

    figures = []
    save = matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig",
                        lambda fig, *a, **k: (figures.append(fig), save(fig, *a, **k))[1])
    spec, base_dir = load_sweep(sweep_file(tmp_path, grid={"reward.gamma": [0.02, 0.05, 0.1],
                                                           "reward.penalty_dither": [0.0, 0.2]}))
    runs = expand(spec, base_dir)
    ra = {}
    for r in runs:
        g, dither = r["point"]["reward.gamma"], r["point"]["reward.penalty_dither"]
        ra[(g, dither)] = (0.3 if dither == 0.0 else 0.7) + g
        d = Path(r["out_dir"]) / "eval" / "final"
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps({"macro": {"ra_f1": ra[(g, dither)], "precision": 0.5,
                                                              "accuracy": 0.5, "abstention_rate": 0.1}}))
    aggregate(spec, runs)
    assert len(figures) == 1
    lines = [(line.get_label(), list(line.get_xdata()), list(line.get_ydata()))
             for ax in figures[0].axes for line in ax.get_lines()]
    ra_lines = {label: (xs, ys) for label, xs, ys in lines if set(ys) <= set(ra.values())}  # the RA-F1 lines
    assert set(ra_lines) == {"penalty_dither=0.0", "penalty_dither=0.2"}
    for dither in (0.0, 0.2):
        xs, ys = ra_lines[f"penalty_dither={dither}"]
        assert xs == [0.02, 0.05, 0.1] and ys == pytest.approx([ra[(g, dither)] for g in xs])
    assert all(xs == sorted(xs) and len(xs) == 3 for _, xs, _ in lines)  # no line goes back along x


def test_a_partly_trained_run_under_other_settings_is_refused_not_resumed(tmp_path, caplog):
    """Before: only finished runs were checked against the sweep's settings; a run with a complete checkpoint and
    no final results was resumed under the edited settings, finished as a mix of both, and then passed the check
    (train rewrites resolved_config.yaml)."""
    from awarl.config import save_resolved
    from awarl.stages.sweep import run_commands
    from awarl.training.checkpoints import mark_complete

    spec, base_dir = load_sweep(sweep_file(tmp_path, grid={"reward.gamma": [0.25, 1.0]}))
    runs = expand(spec, base_dir)
    save_resolved(load_config(runs[1]["config"]), runs[1]["out_dir"])  # what train writes when it starts
    ckpt = Path(runs[1]["out_dir"]) / "checkpoint-10"
    ckpt.mkdir()
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 10}))
    mark_complete(ckpt, 10)
    assert len(expand(spec, base_dir)) == 2  # unchanged settings: it resumes
    assert "--resume" in run_commands(spec, runs)[-1][1][-1]
    before = Path(runs[1]["config"]).read_bytes()
    edited = sweep_file(tmp_path, grid={"reward.gamma": [0.25, 1.0]}, overrides=["reward.beta=0.123"])
    with pytest.raises(ConfigError, match=r"1 finished or partly trained run\(s\).*gamma=1\.0 \(partly trained, "
                                          r"checkpoint-10\): reward\.beta: .* -> 0\.123"):
        run_sweep(edited)
    assert Path(runs[1]["config"]).read_bytes() == before
    run_sweep(edited, aggregate_only=True)  # --aggregate warns and keeps that run's config, as for a finished one
    assert "run gamma=1.0 (partly trained, checkpoint-10) was trained with other settings" in caplog.text
    assert Path(runs[1]["config"]).read_bytes() == before


def test_a_point_name_too_long_for_a_folder_is_shortened_with_a_hash(tmp_path):
    """Before: a point whose name is over 255 bytes (long values) crashed the sweep with a raw OSError "File name
    too long" when its folder was created."""
    from awarl.stages.sweep import point_name

    long_a, long_b = ("org/" + "modèle-" * 40 + end for end in ("a", "b"))  # 2-byte characters: no half one kept
    f = sweep_file(tmp_path, mode="scripts", share_estimate=False,
                   grid={"estimate.model": [long_a, long_b, "org/small"]})
    res = run_sweep(f)
    names = [r["name"] for r in res["runs"]]
    assert names[2] == "model=org-small"  # a short name is kept as it is
    assert len(set(names)) == 3
    for r, model in zip(res["runs"][:2], (long_a, long_b), strict=True):
        assert len(f"launch_{r['name']}.sh".encode()) <= 255 and r["name"].startswith("model=org-modèle-")
        assert r["name"] == point_name({"estimate.model": model})  # the same on every rerun
        assert load_config(r["config"]).estimate.model == model
    assert len(res["scripts"]) == 3 and all(Path(p).is_file() for p in res["scripts"])


def test_the_command_prints_the_comparison_under_sweep_out_dir(tmp_path, monkeypatch, capsys):
    """Before: the printed comparison path was the first run's folder's parent as text, `gamma=0.25/comparison.md`
    for `out_dir: .`, where there is no comparison."""
    from awarl.cli import main

    monkeypatch.chdir(tmp_path)
    f = sweep_file(tmp_path, out_dir=".", grid={"reward.gamma": [0.25]})
    assert main(["sweep", "--config", str(f), "--aggregate"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed == "comparison: comparison.md" and (tmp_path / "comparison.md").is_file()
