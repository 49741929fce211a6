"""`awarl train`: AWA-RL GRPO training with TRL (multi-turn search rollouts, the AWA-RL reward)."""

from __future__ import annotations

import argparse
from pathlib import Path

from awarl.commands.common import add_config_args, config_from_args, looks_like_override

EPILOG = """examples:
  awarl train --config configs/qwen2.5-3b_1gpu.yaml --dry-run        # check everything, load no weights
  accelerate launch --config_file configs/accelerate/zero3_8gpu.yaml \\
      -m awarl.cli train --config configs/qwen2.5-7b_cold_8gpu.yaml
  awarl train --config configs/qwen2.5-3b_1gpu.yaml --resume         # latest checkpoint of run.out_dir
  awarl train --config configs/qwen2.5-3b_1gpu.yaml reward.gamma=0.25 run.out_dir=runs/g025"""


def add_parser(sub: argparse._SubParsersAction, help_text: str) -> None:
    p = sub.add_parser("train", help=help_text, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=help_text + ". Checkpoints every train.save_steps into run.out_dir.")
    p.add_argument("--resume", nargs="?", const="latest", default=None, metavar="CKPT",
                   help="continue from a checkpoint folder (default: the newest complete checkpoint-N in run.out_dir), "
                        "restoring optimizer, scheduler, data position, RNG and the reward's EMA state (a KEY=VALUE right "
                        "after it stays an override)")
    p.add_argument("--reset-reward-state", action="store_true",
                   help="with --resume: continue from a checkpoint that lacks awarl_reward_state.json, restarting "
                        "the AWA-RL reward's smoothed excess Ē at 0 (refused without this flag)")
    p.add_argument("--dry-run", action="store_true",
                   help="resolve and check the config, build the dataset (with p_i) and the reward, print "
                        "the plan; loads no model weights")
    p.add_argument("--processes", type=int, default=None, metavar="N",
                   help="with --dry-run: plan for a launch on N processes (the accelerate config's num_processes "
                        "x num_machines; questions per step and epochs depend on it); default: this one's")
    add_config_args(p, required=True)
    p.set_defaults(func=run)


def overrides_taken_by_resume(args: argparse.Namespace) -> argparse.Namespace:
    """`--resume KEY=VALUE ...`: argparse gives `--resume` its optional CKPT from the next word, so the first
    override became a checkpoint path (silently dropped by --dry-run, a "not a checkpoint folder" error after
    the setup otherwise). A word that looks like an override and is no existing path goes back in front of
    the others and `--resume` means the newest checkpoint."""
    ckpt = args.resume
    if looks_like_override(ckpt) and not Path(ckpt).exists():
        args.overrides = [ckpt, *(args.overrides or [])]
        args.resume = "latest"
    return args


def run(args: argparse.Namespace) -> int:
    from awarl.stages.train import run_train
    from awarl.stages.train_preflight import print_plan

    args = overrides_taken_by_resume(args)
    if args.processes is not None and (not args.dry_run or args.processes < 1):
        raise ValueError("--processes N (N >= 1) goes with --dry-run: a launch runs on the processes accelerate "
                         "starts")
    cfg = config_from_args(args)
    result = run_train(cfg, resume=args.resume, dry_run=args.dry_run, reset_reward_state=args.reset_reward_state,
                       processes=args.processes)
    if args.dry_run:
        print_plan(result)
        return 0
    if result["trainer"].accelerator.is_main_process:
        print(stopped_message(result) if result.get("stopped") else finished_message(result))
    return STOPPED_ON_COLLAPSE if result.get("stopped") else 0


# The exit status of a run that a collapse alarm stopped (train.stop_on_collapse): not 0, so a launch script or
# scheduler does not go on as if the run had finished, and not 1 / 2 (a crash, bad input).
STOPPED_ON_COLLAPSE = 3


def _alarm_lines(summary: dict) -> list[str]:
    from awarl.training.alarms import ALARMS_FILE, summary_lines

    records = summary.get("alarms") or []
    if not records:
        return ["  alarms:       none (collapse alarms: docs/training.md)"]
    return [f"  alarms:       {len(records)} collapse alarm(s), {summary['out_dir']}/{ALARMS_FILE}:",
            *(f"    {line}" for line in summary_lines(records))]


def stopped_message(summary: dict) -> str:
    """What a run stopped by a collapse alarm left, and how to go on (printed once, by the main process)."""
    st = summary["stopped"]
    return "\n".join([f"awarl train: STOPPED at step {summary['global_step']} by a collapse alarm "
                      f"({st['signal']}; train.stop_on_collapse), exit status {STOPPED_ON_COLLAPSE}",
                      f"  {st['message']}",
                      f"  checkpoint:   {summary['checkpoint']}  (no final/: look at it, or change the settings and "
                      "continue with --resume; the same alarm is not raised again until its signal recovers)",
                      *_alarm_lines(summary)])


def finished_message(summary: dict) -> str:
    """Where a finished run's outputs are (printed once, by the main process)."""
    out = summary["out_dir"]
    ev = summary.get("eval") or {}
    loggers = list(getattr(getattr(summary.get("trainer"), "args", None), "report_to", None) or [])
    lines = [f"awarl train: {summary['global_step']} steps done in {out}",
             f"  final model:  {summary['final']}  (awarl eval --model {summary['final']} ...)",
             f"  checkpoints:  {out}/checkpoint-*  (continue with --resume)"]
    if "tensorboard" in loggers:
        lines.append(f"  logs:         tensorboard --logdir {out}/runs  (rho, rho_hat, E, E_bar, penalty, r_ref)")
    if "wandb" in loggers:
        lines.append("  logs:         wandb (offline runs: `wandb sync ./wandb/offline-run-*`)")
    if "eval/macro_ra_f1" in ev:
        lines.append(f"  final eval:   {out}/eval/final/results.md  (macro RA-F1 {ev['eval/macro_ra_f1']:.3f}, "
                     f"abstention {ev.get('eval/macro_abstention_rate', float('nan')):.3f})")
    lines += _alarm_lines(summary)
    return "\n".join(lines)
