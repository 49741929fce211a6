"""Which checkpoint a resume may trust.

transformers writes `checkpoint-N/` file by file (weights, optimizer, scheduler, RNG, trainer_state.json) and
awarl's RewardStateCallback adds the reward state after it; a kill in the middle leaves a folder that looks
like a checkpoint but is not one. So a checkpoint is complete only once the callback has written
`awarl_checkpoint_complete.json` after every other file, listing them with their sizes; `--resume` takes the
newest complete one and says which newer folders it passed over. Under a reward whose state matters (Ē of
AWA-RL, the online p estimates), a checkpoint without that state is refused: resuming would silently restart
Ē at 0. `--reset-reward-state` is the explicit override.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from awarl.io import atomic_write_json, loads_json
from awarl.rewards.trl_reward import STATE_FILE

log = logging.getLogger(__name__)

MARKER = "awarl_checkpoint_complete.json"
TRAINER_STATE = "trainer_state.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def mark_complete(ckpt: str | os.PathLike, step: int) -> Path:
    """Record that every file of `ckpt` is written (call it last); the marker lists them with their sizes."""
    ckpt = Path(ckpt)
    files = {str(p.relative_to(ckpt)): p.stat().st_size for p in sorted(ckpt.rglob("*"))
             if p.is_file() and p.name != MARKER}
    path = ckpt / MARKER
    atomic_write_json(path, {"step": int(step), "files": files})
    return path


def incomplete_reason(ckpt: str | os.PathLike) -> str | None:
    """Why `ckpt` is not a complete checkpoint, or None when it is."""
    ckpt = Path(ckpt)
    if not (ckpt / TRAINER_STATE).is_file():
        return f"no {TRAINER_STATE}"
    try:
        files = loads_json((ckpt / MARKER).read_text(encoding="utf-8"))["files"]
    except FileNotFoundError:
        return f"no {MARKER} (a save that did not finish, or a checkpoint of an awarl without the marker)"
    except (ValueError, KeyError, TypeError) as e:
        return f"unreadable {MARKER}: {e}"
    for name, size in files.items():
        p = ckpt / name
        if not p.is_file() or p.stat().st_size != size:
            return f"{name} is missing or changed since the save"
    return None


def checkpoint_folders(out_dir: str | os.PathLike) -> list[Path]:
    """The `checkpoint-N` folders of a run, newest (highest N) first."""
    d = Path(out_dir)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if p.is_dir() and (m := _CHECKPOINT.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def newest_complete(out_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint of a run (newer incomplete ones are named in a warning), or None."""
    for ckpt in checkpoint_folders(out_dir):
        why = incomplete_reason(ckpt)
        if why is None:
            return ckpt
        log.warning("skipping %s for resume: %s", ckpt, why)
    return None


def checkpoint_step(ckpt: str | os.PathLike) -> int:
    """The global step a checkpoint was saved at (its trainer_state.json), or -1 when it cannot be read."""
    try:
        step = loads_json((Path(ckpt) / TRAINER_STATE).read_text(encoding="utf-8")).get("global_step")
    except (OSError, ValueError, AttributeError):
        return -1
    return step if isinstance(step, int) else -1


def refuse_fresh_start_over(out_dir: str | os.PathLike) -> None:
    """FileExistsError when `out_dir` holds a run that training from step 0 would overwrite (a complete
    checkpoint, or the final model): TRL writes checkpoint-N and final/ over the earlier run's, so a relaunch
    that forgot `--resume` would destroy hours of training. Incomplete checkpoints alone are no such run:
    nothing could resume from them."""
    d = Path(out_dir)
    ckpt = newest_complete(d)
    final = d / "final"
    if ckpt is None and not (final.is_dir() and any(final.iterdir())):
        return
    what = f"checkpoints up to {ckpt.name}" if ckpt else "a final model (final/)"
    raise FileExistsError(f"{d} holds an earlier run ({what}); training from step 0 would overwrite it. Continue "
                          "it with --resume, or set another run.out_dir (or delete that folder) to start over")


def resolve_resume(out_dir: str | os.PathLike, resume: str | None, *, reward_state_needed: bool = True,
                   reset_reward_state: bool = False) -> Path | None:
    """The checkpoint `--resume` means, or FileNotFoundError saying what is wrong and what to do.

    `latest`: the newest complete checkpoint of `out_dir`. A named folder: complete, or, without the marker
    (an awarl that did not write one, or a save that did not finish), trusted because it was named, as long
    as it holds trainer_state.json. Either way, a checkpoint without the reward state is refused while the
    reward needs it, unless `reset_reward_state`."""
    if resume is None:
        return None
    if resume in ("latest", "true", "True"):
        ckpt = newest_complete(out_dir)
        if ckpt is None:
            found = checkpoint_folders(out_dir)
            raise FileNotFoundError(f"--resume: no complete checkpoint-N folder in {out_dir}"
                                    + (f" ({len(found)} incomplete: {', '.join(p.name for p in found)}; name one "
                                       "with --resume PATH to try it anyway)" if found else ""))
    else:
        ckpt = Path(resume)
        if not (ckpt / TRAINER_STATE).is_file():
            raise FileNotFoundError(f"--resume {resume}: not a checkpoint folder (no {TRAINER_STATE})")
        why = incomplete_reason(ckpt)
        if why is not None and (ckpt / MARKER).is_file():
            raise FileNotFoundError(f"--resume {resume}: not a complete checkpoint ({why}); name an earlier "
                                    "checkpoint-N, or --resume alone for the newest complete one")
        if why is not None:
            log.warning("%s: %s; trusting it because it was named", ckpt, why)
    _check_reward_state(ckpt, reward_state_needed, reset_reward_state)
    return ckpt


def _check_reward_state(ckpt: Path, needed: bool, reset: bool) -> None:
    """Refuse a checkpoint without the reward state when the reward needs it (unless `reset`)."""
    if not needed or (ckpt / STATE_FILE).is_file():
        return
    if reset:
        log.warning("%s has no %s: resuming with a fresh reward state (Ē = 0) as --reset-reward-state asks",
                    ckpt, STATE_FILE)
        return
    raise FileNotFoundError(
        f"{ckpt} has no {STATE_FILE}: resuming would restart the AWA-RL reward's smoothed excess Ē (and any "
        f"online p estimates) from scratch, so the penalty would not match the run so far. Resume from a "
        f"checkpoint that has it, or pass --reset-reward-state to resume with Ē = 0 anyway")


def reward_state_needed(reward_cfg: object) -> bool:
    """Whether the reward's state is part of the run: Ē (AWA-RL) or the online p estimates."""
    return getattr(reward_cfg, "strategy", None) == "awarl" or getattr(reward_cfg, "p_online", "off") != "off"
