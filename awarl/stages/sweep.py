"""Sweeps: expand a grid (γ, or any config key) into run configs, run or script them, compare the results.

A sweep file is its own small YAML (see configs/sweep_gamma.yaml)::

    sweep:
      base: qwen2.5-3b_1gpu.yaml          # run config every point extends (relative to this file)
      out_dir: runs/sweep_gamma
      grid: {reward.gamma: [0.25, 0.5, 0.75, 1.0]}

Every grid point becomes `<out_dir>/<name>/config.yaml` (the resolved config, so each run is
self-contained), and the p_i estimate, which does not depend on the reward, is computed once and shared
(or per run, `share_estimate: false`, when the grid moves what it depends on).
Runs go through `awarl train` in a subprocess (optionally behind a launcher such as `accelerate launch`),
so a crash in one run never takes the others down; finished runs are skipped and partly trained ones
resumed on a rerun, unless the sweep now gives them other settings, which is refused before anything is
written.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from awarl.config import (
    AwarlConfig,
    ConfigError,
    ConfigModel,
    apply_overrides,
    config_changes,
    config_from_dict,
    format_validation_error,
    load_config,
    read_config_yaml,
    read_resolved,
    read_yaml_mapping,
    set_dotted,
)
from awarl.io import atomic_write_json, atomic_write_text, loads_json, save_figure
from awarl.locks import folder_lock
from awarl.stages.compare import compare_runs, write_comparison
from awarl.stages.predictions import PREDICTIONS
from awarl.training.checkpoints import checkpoint_folders, incomplete_reason, newest_complete

log = logging.getLogger(__name__)

# Where `awarl train` writes its final evaluation (awarl/stages/train.py).
FINAL_RESULTS = Path("eval") / "final" / "results.json"
# The longest point name kept as it is, in bytes: a folder name, and `launch_<name>.sh` (10 bytes more), must
# stay under the 255 bytes most filesystems allow; a longer one is shortened (point_name).
MAX_NAME_BYTES = 200


class SweepSpec(ConfigModel):

    base: str = Field(..., description="Run config (YAML) that every grid point starts from; relative to the "
                      "sweep file.")
    name: str = Field("sweep", description="Sweep name; prefixes run names.")
    out_dir: str = Field("runs/sweep", description="Folder of the sweep: one sub-folder per run, the shared "
                         "p_i estimate, launch scripts and the comparison.")
    grid: dict[str, list[Any]] = Field(..., description="Dotted config key -> values; the cartesian product "
                                       "of all keys is run.")
    overrides: list[str] = Field(default_factory=list, description="KEY=VALUE overrides applied to every run.")
    mode: Literal["local", "scripts"] = Field("local", description="local: run one after the other here; "
                                              "scripts: write one launch script per run (for a cluster).")
    launcher: list[str] = Field(default_factory=list, description="Command prefix for each run, as a list, e.g. "
                                "[accelerate, launch, --config_file, configs/accelerate/single_gpu.yaml]; "
                                "empty = plain python.")
    share_estimate: bool = Field(True, description="Estimate p_i once (with the first point's config) and point "
                                 "every run at it: p_i does not depend on the reward settings. A grid over what "
                                 "the estimate depends on (model, k, template, retrieval, training questions) is "
                                 "refused; false: each run estimates its own p_i in its folder before training, "
                                 "unless its config names a train.p_estimates file.")


class SweepFile(ConfigModel):
    sweep: SweepSpec


def load_sweep(path: str | Path, overrides: list[str] | None = None) -> tuple[SweepSpec, Path]:
    path = Path(path)
    data = apply_overrides(read_yaml_mapping(path, "sweep"), overrides or [])
    try:
        spec = SweepFile.model_validate(data).sweep
    except ValidationError as e:
        hint = ("\n  (a run config: train it with `awarl train --config FILE`, or name it as sweep.base of a sweep "
                "file, see configs/sweep_gamma.yaml)" if "sweep" not in data and set(data) & set(AwarlConfig.model_fields)
                else "")
        raise ConfigError(format_validation_error(e, str(path), SweepFile) + hint) from None
    if not spec.grid or any(not v for v in spec.grid.values()):
        raise ConfigError(f"{path}: sweep.grid needs at least one key with at least one value")
    return spec, path.parent


def _fmt(v: Any) -> str:
    return json.dumps(v) if isinstance(v, list | dict) else str(v)


def point_name(point: dict[str, Any]) -> str:
    """`reward.gamma=0.25,train.learning_rate=1e-06` -> `gamma=0.25_learning_rate=1e-06` (filesystem-safe).

    A name over MAX_NAME_BYTES (long list values) keeps its first bytes and ends in `-<12 hex digits>` of
    the sha256 of the whole name, so it is a valid folder name, the same on every rerun and distinct per
    point; the point itself is in runs.json and at the top of the run's config.yaml."""
    parts = [f"{k.split('.')[-1]}={_fmt(v)}" for k, v in point.items()]
    name = "_".join(parts).replace("/", "-").replace(" ", "")
    raw = name.encode("utf-8")
    if len(raw) <= MAX_NAME_BYTES:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:12]
    head = raw[:MAX_NAME_BYTES - len(digest) - 1].decode("utf-8", errors="ignore")  # no half character
    return f"{head}-{digest}"


def _set_key(data: dict, key: str, value: Any, what: str) -> None:
    """Set dotted `key` of config data to `value` as it is (no text round trip: a null stays null, a string
    stays a string), as an override would."""
    set_dotted(data, key.strip().split("."), value, f"{what} {key!r}")


def expand(spec: SweepSpec, base_dir: Path, *, finished_changed: Literal["refuse", "keep"] = "refuse"
           ) -> list[dict[str, Any]]:
    """Validate every grid point's config and write it to `<out_dir>/<name>/config.yaml`.

    Returns one entry per run: name, point (grid values), config path, out_dir, and `estimate` (the run
    estimates its own p_i: share_estimate off, no train.p_estimates of its own, a reward that reads p_i).
    Nothing is written when a point is refused: a shared estimate that the points would sample differently,
    or a finished run whose settings the sweep now changes (`finished_changed="refuse"`; with "keep", as
    `--aggregate` does, a warning and that run's config.yaml left as it was). A run counts as trained once
    it has final results or a complete checkpoint (a run of the sweep resumes from it)."""
    from awarl.rewards.strategies import strategy
    from awarl.stages.estimate import estimate_inputs

    base = read_config_yaml(base_dir / spec.base)
    out = Path(spec.out_dir)
    keys = list(spec.grid)
    owned = ["run.name", "run.out_dir", "estimate.out"] + (["train.p_estimates"] if spec.share_estimate else [])
    taken = [k for k in owned if k in keys or any(o.split("=", 1)[0].strip() == k for o in spec.overrides)]
    if taken:  # the sweep sets these per run: a grid value or an override of them would be dropped silently
        raise ConfigError(f"sweep {spec.name}: {', '.join(taken)} set by sweep.grid or sweep.overrides; the sweep "
                          "sets them for every run (sweep.name and sweep.out_dir name the runs"
                          + ("; share_estimate: false lets a run read its own train.p_estimates" if
                             "train.p_estimates" in taken else "") + ")")
    runs: list[dict[str, Any]] = []
    configs: list[AwarlConfig] = []
    for values in itertools.product(*(spec.grid[k] for k in keys)):
        point = dict(zip(keys, values, strict=True))
        name = point_name(point)
        run_dir = out / name
        data = apply_overrides(base, list(spec.overrides))
        for k, v in point.items():  # the values as the sweep file holds them: null stays null
            _set_key(data, k, v, "sweep.grid key")
        sets: dict[str, Any] = {"run.name": f"{spec.name}-{name}", "run.out_dir": str(run_dir)}
        if spec.share_estimate:  # the shared estimate writes it (run_commands), every run reads it
            sets["train.p_estimates"] = str(out / "p_estimates.jsonl")
        else:  # each run estimates into its own folder: the default <run.out_dir>/p_estimates.jsonl
            sets["estimate.out"] = None
        for k, v in sets.items():
            _set_key(data, k, v, "sweep")
        cfg = config_from_dict(data, f"{spec.base} + grid point {point}")
        twin = next((r for r in runs if r["name"] == name), None)
        if twin is not None:  # a value listed twice (0.5 and 0.50), or two that print alike: one folder for both
            raise ConfigError(f"sweep {spec.name}: grid points {twin['point']} and {point} are one run ({name}); "
                              "list each value of sweep.grid once")
        reads_p = strategy(cfg.reward.strategy).uses_r_ref
        runs.append({"name": name, "point": point, "config": str(run_dir / "config.yaml"), "out_dir": str(run_dir),
                     "reads_p": reads_p,
                     "estimate": reads_p and not spec.share_estimate and cfg.train.p_estimates is None})
        configs.append(cfg)
    sharing = [(r, cfg) for r, cfg in zip(runs, configs, strict=True) if spec.share_estimate and r["reads_p"]]
    for run, cfg in sharing[1:]:
        changes = config_changes(estimate_inputs(sharing[0][1]), estimate_inputs(cfg))
        if changes:
            raise ConfigError(
                f"sweep {spec.name}: share_estimate is on, but grid point {run['point']} changes what the shared "
                f"p_i estimate is sampled under ({'; '.join(c[:200] for c in changes)}), so it would train on "
                f"{sharing[0][0]['name']}'s p_i; set sweep.share_estimate: false (each run estimates its own) or "
                "take those keys out of the grid")
    changed = {r["name"]: c for r, cfg in zip(runs, configs, strict=True) if (c := _trained_changes(r, cfg))}
    if changed and finished_changed == "refuse":
        listed = "; ".join(f"{name} ({_progress(r)}): {', '.join(c[:200] for c in cs[:5])}"
                           + (" ..." if len(cs) > 5 else "")
                           for name, cs in changed.items() for r in runs if r["name"] == name)
        raise ConfigError(f"sweep {spec.name}: {len(changed)} finished or partly trained run(s) were trained with "
                          f"settings other than the sweep's now ({listed}); a rerun would skip a finished run and "
                          "compare its results under settings that did not make them, and resume a partly "
                          "trained one under the new settings, finishing it as a mix of both. Restore the "
                          "settings, set another sweep.out_dir, or delete those runs' folders to train them again")
    for run, cfg in zip(runs, configs, strict=True):
        if run["name"] in changed:
            log.warning("sweep %s: run %s (%s) was trained with other settings (%s); its config.yaml is "
                        "kept", spec.name, run["name"], _progress(run),
                        "; ".join(c[:200] for c in changed[run["name"]]))
            continue
        atomic_write_text(Path(run["config"]), f"# sweep {spec.name}, point {run['point']}\n"
                          + yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    atomic_write_json(out / "runs.json", runs)
    return runs


def _complete_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, found without newest_complete's warnings (nothing resumes
    here)."""
    return next((c for c in checkpoint_folders(run_dir) if incomplete_reason(c) is None), None)


def _progress(run: dict) -> str:
    """`finished` (final results), `partly trained, <checkpoint>`, or `not started`."""
    if find_results(run["out_dir"]):
        return "finished"
    ckpt = _complete_checkpoint(run["out_dir"])
    return f"partly trained, {ckpt.name}" if ckpt else "not started"


def _trained_changes(run: dict, cfg: AwarlConfig) -> list[str]:
    """The settings in which `cfg` differs from the resolved config a trained run was trained with: one with
    final results (skipped on a rerun) or a complete checkpoint (resumed on a rerun). None for a run that
    has neither, or whose resolved config is missing or unreadable."""
    if _progress(run) == "not started":
        return []
    resolved = read_resolved(run["out_dir"], "whether the trained run matches the sweep")
    return [] if resolved is None else config_changes(resolved[1], cfg.model_dump(mode="json"))


def _command(spec: SweepSpec, *args: str, direct: bool = False) -> list[str]:
    """`launcher -m awarl.cli ARGS`, or this Python's `-m awarl.cli ARGS` without a launcher (or `direct`)."""
    if spec.launcher and not direct:
        return [*spec.launcher, "-m", "awarl.cli", *args]
    return [sys.executable, "-m", "awarl.cli", *args]


def resolve_launcher(cmd: list[str]) -> list[str]:
    """The command with its program found on PATH or, for an environment that is not activated, next to
    this Python (`.venv/bin/accelerate`); a ConfigError naming `sweep.launcher` when it is nowhere."""
    import shutil

    prog = cmd[0]
    if os.sep in prog or shutil.which(prog):
        return cmd
    local = Path(sys.executable).parent / prog
    if local.is_file() and os.access(local, os.X_OK):
        return [str(local), *cmd[1:]]
    raise ConfigError(f"sweep.launcher: {prog!r} is not on PATH nor next to {sys.executable}; install it "
                      "(accelerate: pip install accelerate) or activate the environment that has it")


def run_commands(spec: SweepSpec, runs: list[dict], dry_run: bool = False, *, resume: bool | None = None
                 ) -> list[tuple[str, list[list[str]]]]:
    """The steps of the sweep in order, each a name and its commands (run one after the other, stopping at
    the first that fails): the shared estimate (once), then per run its own estimate (`run["estimate"]`)
    and its `train`, last. A dry run checks each run with `train --dry-run` and estimates nothing. `train`
    gets `--resume` when the run has a complete checkpoint now (`resume=None`), always (True) or never
    (False: launch scripts decide when they run, write_scripts)."""
    steps: list[tuple[str, list[list[str]]]] = []
    extra = ["--dry-run"] if dry_run else []
    first = next((r for r in runs if r.get("reads_p", True)), None)  # the point whose config samples the p_i
    if spec.share_estimate and first and not dry_run:
        steps.append(("estimate", [[sys.executable, "-m", "awarl.cli", "estimate", "--config", first["config"],
                                    f"estimate.out={Path(spec.out_dir) / 'p_estimates.jsonl'}"]]))
    for r in runs:
        own = [[sys.executable, "-m", "awarl.cli", "estimate", "--config", r["config"]]] \
            if r.get("estimate") and not dry_run else []
        wants = resume if resume is not None else newest_complete(r["out_dir"]) is not None
        resume_arg = ["--resume"] if wants else []  # a dry run too: without it train refuses a run it would overwrite
        # A dry run checks the config, which needs no launcher (nor the GPUs it would ask for).
        steps.append((r["name"], [*own, _command(spec, "train", "--config", r["config"], *resume_arg, *extra,
                                                 direct=dry_run)]))
    return steps


# The test a launch script runs before `train`: does the run have a complete checkpoint (exit 0) or not.
_HAS_CHECKPOINT = ("import sys; from awarl.training.checkpoints import newest_complete; "
                   "sys.exit(0 if newest_complete(sys.argv[1]) else 1)")


def _train_lines(train: list[str], run_dir: str) -> str:
    """The lines of a launch script that run `train`: with `--resume` when, at the time the script runs,
    the run has a complete checkpoint (a job pre-empted after a save and requeued with the same script),
    without it otherwise. Every value is shell-quoted."""
    test = shlex.join([sys.executable, "-c", _HAS_CHECKPOINT, run_dir])
    return (f"if {test}; then\n  {shlex.join([*train, '--resume'])}\nelse\n  {shlex.join(train)}\nfi\n")


def write_scripts(spec: SweepSpec, runs: list[dict]) -> list[Path]:
    """One launch script per step plus `launch_all.sh`; values are shell-quoted, nothing is evaluated. A
    finished run gets no script, as `local` mode skips it (its `train --resume` would redo the final eval).
    Whether `train` resumes is decided when the script runs, not when it is written (_train_lines)."""
    out = Path(spec.out_dir)
    paths = []
    finished = {r["name"] for r in runs if find_results(r["out_dir"])}
    by_name = {r["name"]: r for r in runs}
    for name, cmds in run_commands(spec, runs, resume=False):
        if name in finished:
            log.info("[%s] finished already; no launch script", name)
            (out / f"launch_{name}.sh").unlink(missing_ok=True)
            continue
        p = out / f"launch_{name}.sh"
        run = by_name.get(name)
        body = "".join(shlex.join(c) + "\n" for c in (cmds[:-1] if run else cmds))
        if run:  # the last command of a run's step is its train
            body += _train_lines(cmds[-1], run["out_dir"])
        atomic_write_text(p, "#!/usr/bin/env bash\nset -euo pipefail\n" + body)
        p.chmod(0o755)
        paths.append(p)
    allp = out / "launch_all.sh"
    atomic_write_text(allp, "#!/usr/bin/env bash\n# runs every point in sequence; submit the per-run scripts "
                      "to your scheduler instead to run them in parallel (the estimate first)\nset -euo pipefail\n"
                      + "".join(f"bash {shlex.quote(str(p))}\n" for p in paths))
    allp.chmod(0o755)
    return paths


def find_results(run_dir: str | Path) -> Path | None:
    p = Path(run_dir) / FINAL_RESULTS
    return p if p.is_file() else None


def run_local(spec: SweepSpec, runs: list[dict], dry_run: bool = False) -> dict[str, int]:
    """Run the sweep here, one command after the other; finished runs (final results present) are skipped."""
    codes: dict[str, int] = {}
    for name, cmds in run_commands(spec, runs, dry_run):
        run = next((r for r in runs if r["name"] == name), None)
        if run and not dry_run and find_results(run["out_dir"]):
            log.info("[%s] finished already; skipped", name)
            codes[name] = 0
            continue
        codes[name] = 0
        for cmd in cmds:
            cmd = resolve_launcher(cmd)
            log.info("[%s] %s", name, shlex.join(cmd))
            codes[name] = subprocess.call(cmd)  # list form: no shell, no interpolation of config strings
            if codes[name]:
                log.error("[%s] failed with exit code %d; continuing with the next run", name, codes[name])
                break
        if codes[name] and name == "estimate":
            break  # every run needs the shared estimate
    return codes


METRICS = ("ra_f1", "precision", "accuracy", "abstention_rate")


def aggregate(spec: SweepSpec, runs: list[dict]) -> dict:
    """Collect each finished run's final macro metrics into comparison.{json,md,png}."""
    rows = []
    for r in runs:
        path = find_results(r["out_dir"])
        if not path:
            rows.append({"name": r["name"], **r["point"], "status": "missing"})
            continue
        res = loads_json(path.read_text())
        macro = res.get("macro", {})
        rows.append({"name": r["name"], **r["point"], "status": "done",
                     **{m: macro.get(m) for m in METRICS}})
    out = Path(spec.out_dir)
    res = _paired(spec, runs, out)
    paired = {} if res is None else {res["baseline"]: None, **{n: d["ra_f1"] for n, d in res["deltas"].items()}}
    for row in rows:
        row["delta_ra_f1"] = paired.get(row["name"])
    table = {"sweep": spec.name, "grid": spec.grid, "runs": rows}
    atomic_write_json(out / "comparison.json", table)
    keys = list(spec.grid)
    head = "| run | " + " | ".join(keys) + " | RA-F1 | precision | accuracy | abstention | ΔRA-F1 (95% CI) |\n"
    head += "|---" * (len(keys) + 6) + "|\n"
    body = ""
    for row in rows:
        vals = [f"{row[m]:.3f}" if isinstance(row.get(m), float) else "—" for m in METRICS]
        d = row["delta_ra_f1"]
        vals.append("—" if d is None else f"{d['delta']:+.3f}" + (f" [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]"
                                                                   if d["ci"] else ""))
        body += f"| {row['name']} | " + " | ".join(_fmt(row[k]) for k in keys) + " | " + " | ".join(vals) + " |\n"
    note = (f" ΔRA-F1: difference to `{res['baseline']}`, the baseline (the first finished run), on the "
            f"{res['common_questions']} questions every compared run answered (the {len(paired)} finished runs "
            "that kept their predictions), with its paired-bootstrap 95% interval; details in paired/compare.md."
            if res is not None else "")
    atomic_write_text(out / "comparison.md", f"# Sweep `{spec.name}`\n\nMacro averages over the evaluation "
                      f"datasets of each run's final evaluation.{note}\n\n{head}{body}")
    _plot(rows, spec.grid, out / "comparison.png")
    return table


def _paired(spec: SweepSpec, runs: list[dict], out: Path) -> dict | None:
    """The paired comparison (awarl compare) of the finished runs that kept their predictions, the first
    of them the baseline, on the questions all of them answered; written to `out/paired/`. None with fewer
    than two such runs. A run without final results (one killed in its final evaluation leaves a partial
    predictions.jsonl) takes no part: it would shrink the shared questions of every other run."""
    done = [r for r in runs if find_results(r["out_dir"])
            and (Path(r["out_dir"]) / FINAL_RESULTS.parent / PREDICTIONS).is_file()]
    if len(done) < 2:
        return None
    cfg = load_config(done[0]["config"])
    try:
        res = compare_runs([Path(r["out_dir"]) / FINAL_RESULTS.parent for r in done], cfg,
                           names=[r["name"] for r in done])
    except ValueError as e:  # e.g. no shared question: the plain table still stands
        log.warning("sweep %s: no paired comparison (%s)", spec.name, e)
        return None
    write_comparison(res, out / "paired")
    return res


def plot_series(rows: list[dict], grid: dict[str, list[Any]]) -> tuple[list[Any], dict[str, list[tuple]]]:
    """What comparison.png draws: the x positions of the first grid key's values, and per metric one
    (label, xs, ys) line per combination of the other keys' values (label "" with one key), over the
    finished runs in grid order; a missing metric is NaN (a gap). Numeric values are their own x,
    others are placed 0, 1, 2, ... in grid order."""
    keys = list(grid)
    first, others = keys[0], keys[1:]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in grid[first])
    def key(v: Any) -> str:  # a grid value as a dict key (lists and dicts are values too)
        return json.dumps(v, sort_keys=True, default=str)

    xs_of = {key(v): (v if numeric else i) for i, v in enumerate(grid[first])}
    done = [r for r in rows if r["status"] == "done"]
    series: dict[str, list[tuple]] = {m: [] for m in METRICS}
    for combo in itertools.product(*(grid[k] for k in others)):
        members = [r for r in done if all(r[k] == v for k, v in zip(others, combo, strict=True))]
        if not members:
            continue
        members.sort(key=lambda r: xs_of[key(r[first])])
        label = ", ".join(f"{k.split('.')[-1]}={_fmt(v)}" for k, v in zip(others, combo, strict=True))
        xs = [xs_of[key(r[first])] for r in members]
        for m in METRICS:
            ys = [float(r[m]) if isinstance(r.get(m), int | float) else float("nan") for r in members]
            series[m].append((label, xs, ys))
    return [xs_of[k] for k in xs_of], series


def _plot(rows: list[dict], grid: dict[str, list[Any]], path: Path) -> None:
    """One panel per metric, x the first grid key, one labelled line per combination of the other keys."""
    ticks, series = plot_series(rows, grid)
    if not any(series.values()):
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = next(iter(grid))
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in grid[key])
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    for ax, m in zip(axes.flat, METRICS, strict=True):
        for label, xs, ys in series[m]:
            ax.plot(xs, ys, marker="o", label=label or None)
        if not numeric:
            ax.set_xticks(ticks, [_fmt(v) for v in grid[key]], rotation=30, ha="right")
        ax.set_title(m)
        ax.set_ylim(0, 1)
        ax.set_xlabel(key)
    legend_rows = 0
    if len(grid) > 1:  # one legend for the four panels: the combinations of the other keys
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize="small")
        legend_rows = -(-len(labels) // 3)
    fig.suptitle("sweep: macro metrics per run")
    fig.tight_layout(rect=(0, min(0.4, 0.035 * legend_rows + 0.01 * bool(legend_rows)), 1, 1))
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def run_sweep(path: str | Path, overrides: list[str] | None = None, *, aggregate_only: bool = False,
              dry_run: bool = False) -> dict:
    spec, base_dir = load_sweep(path, overrides)
    # one sweep at a time in its folder (awarl.locks): two wrote each other's run configs and launch scripts
    with folder_lock(spec.out_dir, f"sweep folder {spec.out_dir}", remedy="or set another sweep.out_dir"):
        return _sweep_locked(spec, base_dir, aggregate_only=aggregate_only, dry_run=dry_run)


def _sweep_locked(spec: SweepSpec, base_dir: Path, *, aggregate_only: bool, dry_run: bool) -> dict:
    runs = expand(spec, base_dir, finished_changed="keep" if aggregate_only else "refuse")
    log.info("sweep %s: %d runs in %s", spec.name, len(runs), spec.out_dir)
    result: dict[str, Any] = {"runs": runs, "out_dir": spec.out_dir}
    if aggregate_only:
        pass
    elif dry_run:  # the same checks in either mode; no launch script is written
        result["exit_codes"] = run_local(spec, runs, dry_run=True)
    elif spec.mode == "scripts":
        result["scripts"] = [str(p) for p in write_scripts(spec, runs)]
    else:
        result["exit_codes"] = run_local(spec, runs, dry_run)
    if not dry_run:
        result["comparison"] = aggregate(spec, runs)
    return result
