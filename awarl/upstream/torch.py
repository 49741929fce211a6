"""torch internals awarl relies on (checked against torch 2.13.0).

- `mark_static_address`: `torch._dynamo.mark_static_address(tensor)`, so the compiled static decode step
  (awarl.agent.backends.hf_slots, CUDA graphs) treats the slot cache's tensors as fixed buffers; torch has
  no public spelling of it.
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
