"""Run every benchmark and print their BENCH summary lines together.

    .venv/bin/python benchmarks/run_all.py            # all (about 6-8 minutes on 2 cores)
    .venv/bin/python benchmarks/run_all.py startup memory

Each benchmark runs in its own process (start-up and memory figures need a clean
interpreter). Exit code 1 when any benchmark missed its target or failed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = {
    "startup": ["bench_startup.py"],
    "replay": ["bench_replay.py"],
    "concurrency": ["bench_concurrency.py"],
    "memory": ["bench_memory.py"],
    "judge_accuracy": ["judge_accuracy.py", "--judge", "scripted"],
}


def main(argv: list[str]) -> int:
    chosen = argv or list(BENCHMARKS)
    summary: list[str] = []
    failed = False
    for name in chosen:
        print(f"== {name}", flush=True)
        proc = subprocess.run(
            [sys.executable, *BENCHMARKS[name]], cwd=HERE, capture_output=True, text=True
        )
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            failed = True
            sys.stdout.write(proc.stderr[-2000:])
        lines = [line for line in proc.stdout.splitlines() if line.startswith("BENCH ")]
        summary += lines or [f"BENCH {name} error=rc{proc.returncode}"]
    print("\n== summary")
    print("\n".join(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
