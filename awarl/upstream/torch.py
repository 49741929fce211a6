"""torch internals awarl relies on (checked against torch 2.13.0).

- `mark_static_address`: `torch._dynamo.mark_static_address(tensor)`, so the compiled static decode step
  (awarl.agent.backends.hf_slots, CUDA graphs) treats the slot cache's tensors as fixed buffers; torch has
  no public spelling of it.
- `set_last_lr`: a learning-rate scheduler's last rates (`scheduler._last_lr`, what `get_last_lr()` returns and
  the Trainer logs as `learning_rate`), set when awarl.training.callbacks recomputes a resumed run's rates by
  the scheduler's own rule; torch sets them only inside `step()`.
"""

from __future__ import annotations

import inspect
from typing import Any

from awarl.upstream import changed, shim

CHECKED = "2.13.0"


def mark_static_address(tensor: Any) -> None:
    """Tell torch.compile that `tensor` keeps its address across calls (CUDA graphs may read it in place)."""
    import torch._dynamo

    fn = getattr(torch._dynamo, "mark_static_address", None)
    if fn is None:
        raise changed("torch.mark_static_address", "torch._dynamo has no mark_static_address")
    fn(tensor)


@shim("torch.mark_static_address", dist="torch", checked=CHECKED, reaches="torch._dynamo.mark_static_address(t)")
def _mark_static_address_shape() -> str | None:
    import torch._dynamo

    fn = getattr(torch._dynamo, "mark_static_address", None)
    if fn is None:
        return "torch._dynamo has no mark_static_address"
    first = next(iter(inspect.signature(fn).parameters), None)
    return None if first is not None else "mark_static_address takes no tensor"


def set_last_lr(scheduler: Any, lrs: list[float]) -> None:
    """Make `lrs` what `scheduler.get_last_lr()` returns until its next step."""
    if not isinstance(getattr(scheduler, "_last_lr", None), list):
        raise changed("torch.last_lr", f"{type(scheduler).__name__} keeps no list in _last_lr")
    scheduler._last_lr = list(lrs)


@shim("torch.last_lr", dist="torch", checked=CHECKED,
      reaches="torch.optim.lr_scheduler.LRScheduler._last_lr (a list; what get_last_lr() returns)")
def _last_lr_shape() -> str | None:
    import torch
    from torch.optim.lr_scheduler import LambdaLR

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = LambdaLR(opt, lambda step: 0.5)
    if not isinstance(getattr(sched, "_last_lr", None), list):
        return "LambdaLR keeps no list in _last_lr"
    sched._last_lr = [0.25]
    got = sched.get_last_lr()
    return None if got == [0.25] else f"get_last_lr() gave {got} after _last_lr was set to [0.25]"
