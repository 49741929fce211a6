"""Peak memory of `awarl data prepare` on a JSON Lines file holding one runaway line (issue 16).

Writes a MuSiQue file whose second line is an unterminated 400 MiB JSON string between two real records,
runs `awarl data prepare --on-error skip` on it in a child process, and prints the child's peak RSS next to
that of the same command on the two real records alone. `iter_jsonl` reads at most `max_line_bytes`
(64 MiB) of a line, so the peak stays bounded whatever the file holds.

    python benchmarks/long_line_rss.py [--mb 400]

To measure an older checkout (e.g. `git archive COMMIT awarl | tar -x -C /tmp/old`):
`AWARL_DATA_DIR=$PWD/data PYTHONPATH=/tmp/old python benchmarks/long_line_rss.py`.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from awarl.data.loaders import shipped_path


def _peak_rss_mib(args: list[str], cwd: str) -> float:
    """Peak RSS (MiB) of one child process running `awarl ARGS` (it must be the largest child so far). It runs
    in `cwd`, so PYTHONPATH can point it at another checkout to compare."""
    code = "import sys; from awarl.cli import main; sys.exit(main(sys.argv[1:]))"
    subprocess.run([sys.executable, "-c", code, *args], check=True, stdout=subprocess.DEVNULL, cwd=cwd,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=400, help="length of the runaway line in MiB")
    args = ap.parse_args()
    lines = shipped_path("musique").read_bytes().splitlines()[:2]
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "small.jsonl", Path(tmp) / "big.jsonl"
        small.write_bytes(lines[0] + b"\n" + lines[1] + b"\n")
        with open(big, "wb") as f:
            f.write(lines[0] + b"\n" + b'{"id": "big", "question": "')
            chunk = b"a" * (1 << 20)
            for _ in range(args.mb):
                f.write(chunk)
            f.write(b"\n" + lines[1] + b"\n")
        base = _peak_rss_mib(["data", "prepare", str(small), "--out", str(Path(tmp) / "o1.jsonl")], tmp)
        peak = _peak_rss_mib(["data", "prepare", str(big), "--out", str(Path(tmp) / "o2.jsonl"), "--on-error", "skip"],
                            tmp)
    print(f"| {args.mb} MiB line | two records alone: {base:.0f} MiB | with the runaway line: {peak:.0f} MiB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
