"""Start-up cost of the plugin for a suite that never verifies a citation.

Generates a 200-test suite that does not use the plugin, then times
``pytest --collect-only -q`` with the plugin loaded (entry point) and with
``-p no:citations``, interleaved, and compares medians. Also runs pytest once
in-process (in a fresh interpreter) and lists which heavy modules ended up in
``sys.modules``: none of torch, sentence_transformers, transformers, numpy may be
there; httpx, pydantic, vcr are reported for information.

Summary line: ``BENCH startup ratio=<with/without> target<=1.05 heavy_modules=none ...``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _common import HEAVY_MODULES, PYTHON, REPORTED_MODULES, bench_line, clean_env, median, run

PROBE = """
import json, sys, pytest
rc = pytest.main(sys.argv[1:])
mods = {name: name in sys.modules for name in %r}
print("@@MODULES@@" + json.dumps({"rc": int(rc), "modules": mods}))
"""


def make_suite(root: Path, tests: int) -> Path:
    suite = root / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    per_file = 20
    for f in range(tests // per_file):
        lines = ["import pytest", ""]
        for t in range(per_file):
            lines.append(f"def test_{f}_{t}():\n    assert {t} + 1 == {t + 1}\n")
        (suite / f"test_gen_{f:02d}.py").write_text("\n".join(lines), encoding="utf-8")
    return suite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=200)
    parser.add_argument("--runs", type=int, default=9, help="runs per variant (interleaved)")
    args = parser.parse_args(argv)

    env = clean_env()
    env["PYTHONDONTWRITEBYTECODE"] = "0"
    with tempfile.TemporaryDirectory() as tmp:
        suite = make_suite(Path(tmp), args.tests)
        base = [PYTHON, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        # One warm-up of each, so the .pyc caches exist and the disk cache is warm.
        for extra in ([], ["-p", "no:citations"]):
            run([*base, *extra], env=env, cwd=suite)
        with_plugin: list[float] = []
        without: list[float] = []
        for _ in range(args.runs):
            for extra, sink in (([], with_plugin), (["-p", "no:citations"], without)):
                seconds, proc = run([*base, *extra], env=env, cwd=suite)
                if proc.returncode != 0:
                    print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
                    raise SystemExit(f"pytest failed ({proc.returncode})")
                sink.append(seconds)
        watched = HEAVY_MODULES + REPORTED_MODULES
        _, probe = run(
            [PYTHON, "-c", PROBE % (watched,), "--collect-only", "-q", "-p", "no:cacheprovider"],
            env=env,
            cwd=suite,
        )
        line = next(x for x in probe.stdout.splitlines() if x.startswith("@@MODULES@@"))
        info = json.loads(line[len("@@MODULES@@") :])
        plugin_loaded_probe = run(
            [
                PYTHON,
                "-c",
                "import pytest_citations.plugin, sys; "
                f"print(sorted(m for m in sys.modules if m.split('.')[0] in {watched!r}))",
            ],
            env=env,
            cwd=suite,
        )[1].stdout.strip()

    m_with, m_without = median(with_plugin), median(without)
    ratio = m_with / m_without
    heavy = [name for name in HEAVY_MODULES if info["modules"][name]]
    light = [name for name in REPORTED_MODULES if info["modules"][name]]
    ok = ratio <= 1.05 and not heavy
    print(
        bench_line(
            "startup",
            ratio=round(ratio, 3),
            target="<=1.05",
            heavy_modules=",".join(heavy) or "none",
            light_modules=",".join(light) or "none",
            with_s=round(m_with, 3),
            without_s=round(m_without, 3),
            delta_ms=round((m_with - m_without) * 1000, 1),
            ok=ok,
        )
    )
    print(
        f"  suite: {args.tests} tests, pytest --collect-only -q, {args.runs} interleaved runs each"
    )
    print(f"  with plugin    : median {m_with:.3f}s  runs {[round(x, 3) for x in with_plugin]}")
    print(f"  -p no:citations: median {m_without:.3f}s  runs {[round(x, 3) for x in without]}")
    print(f"  modules after collection with the plugin: {info['modules']}")
    print(f"  modules after `import pytest_citations.plugin`: {plugin_loaded_probe}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
