"""bm25s imports JAX where it is installed, and JAX reserves 75% of a GPU at first use (issue 46: every process of
the H200 run ran out of memory). awarl imports bm25s with JAX pinned to the CPU, unless the program imported JAX
itself. Each case runs in a fresh interpreter (the environment variable and sys.modules are process state)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import os, sys, types
{before}
from awarl.retrieval.bm25 import make_tokenizer
make_tokenizer()
print(os.environ.get("JAX_PLATFORMS"))
"""


def _run(before: str, env_extra: dict[str, str] | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env.update(env_extra or {})
    out = subprocess.run([sys.executable, "-c", PROBE.format(before=before)], env=env, capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(("before", "env", "expected"), [
    ("", None, "cpu"),                                           # nobody chose: JAX stays off the GPU
    ("", {"JAX_PLATFORMS": "cuda"}, "cuda"),                     # the user's choice stands
    ("sys.modules['jax'] = types.ModuleType('jax')", None, "None"),  # JAX already imported: not ours to change
])
def test_bm25s_is_imported_with_jax_on_the_cpu_unless_someone_chose(before, env, expected):
    assert _run(before, env) == expected
