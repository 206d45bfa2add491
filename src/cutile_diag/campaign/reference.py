"""The framework's own implementation as a reference: the surveyed tests' other-backend twins, timed.

TileGym's perf tests run every framework at the same parameters (``_perf_frameworks =
_backends + ["pytorch"]``; the framework is a word of the test id: ``test_perf[4096-f16-cutile]``
and ``test_perf[4096-f16-pytorch]``).  After the survey, the ``pytorch`` twin of each surveyed
test that exists is run once with ``--print-record`` (the cutile-diag pytest plugin prints
its benchmark record) and its median kept per surveyed test, so the plan and the report can
set the kernel's time against what the framework's own implementation takes.

Public API::

    reference_id("t.py::T::test_perf[4096-cutile]") -> "t.py::T::test_perf[4096-pytorch]"
    ref = time_reference(cmd, tests, cwd=..., timeout=600, echo=print)
    ref.times   # surveyed test id -> {"framework": "pytorch", "test": twin id, "ms": median}
    ref.warnings
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from ..loop import proc
from ..loop.records import latencies, parse_records

REFERENCE = "pytorch"
BACKEND = "cutile"


def reference_id(test: str, *, backend: str = BACKEND, reference: str = REFERENCE) -> str | None:
    """The same test id with ``backend`` swapped for ``reference`` as a word of its parameters
    (None when the id names no such parameter)."""
    head, sep, params = test.partition("[")
    if not sep:
        return None
    pat = re.compile(rf"(?<![A-Za-z0-9]){re.escape(backend)}(?![A-Za-z0-9_]|-rs)")
    swapped, n = pat.subn(reference, params)
    return f"{head}[{swapped}" if n == 1 else None


def plugin_args() -> list[str]:
    """``-p cutile_diag.pytest_plugin`` where cutile-diag is not installed (only on PYTHONPATH): its
    plugin prints the records the bench command is read by."""
    from importlib.metadata import entry_points
    eps = entry_points(group="pytest11")
    return [] if any(e.value == "cutile_diag.pytest_plugin" for e in eps) else ["-p", "cutile_diag.pytest_plugin"]


@dataclass
class Reference:
    """The pytorch twins' times (surveyed test id -> its record) and what went wrong running them."""
    times: dict[str, dict] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _collected(prefix: list[str], ids: list[str], cwd: str, timeout: float | None) -> tuple[set[str], str]:
    """Which of ``ids`` pytest collects (a run naming one that does not exist would run none)."""
    files = sorted({i.split("::", 1)[0] for i in ids})
    res = proc.run([*prefix, *files, "--collect-only", "-q", "-k", REFERENCE, "-p", "no:cacheprovider"], cwd=cwd,
                   timeout=timeout)
    seen = {ln.strip() for ln in res.stdout.splitlines() if "::" in ln}
    why = "" if res.returncode in (0, 5) else f"collecting them failed (exit {res.returncode})"
    return seen & set(ids), why


def time_reference(prefix: list[str], tests: Iterable[str], *, cwd: str, timeout: float | None = None,
                   echo: Callable[[str], None] | None = None) -> Reference:
    """Run the ``pytorch`` twins of ``tests`` once (``prefix``: the words that start pytest)."""
    say = echo or (lambda _m: None)
    twins = {t: r for t in sorted(set(tests)) if (r := reference_id(t)) and (Path(cwd) / r.split("::")[0]).is_file()}
    out = Reference()
    if not twins:
        return out
    found, why = _collected(prefix, list(twins.values()), cwd, timeout)
    if why:
        out.warnings.append(f"reference ({REFERENCE}) tests: {why}")
    run = sorted(found)
    if not run:
        return out
    say(f"reference: timing {len(run)} {REFERENCE} test(s) at the surveyed tests' parameters")
    res = proc.run([*prefix, *run, *plugin_args(), "--print-record", "-s", "-q", "-p", "no:cacheprovider"], cwd=cwd,
                   timeout=timeout)
    say(f"reference: {len(run)} {REFERENCE} test(s) run in {res.wall_s:.1f} s")
    if res.timed_out:
        out.warnings.append(f"reference ({REFERENCE}) tests: stopped after {timeout:.0f} s")
    recs = latencies(parse_records(res.stdout + "\n" + res.stderr, framework=REFERENCE))
    for t, r in twins.items():
        if r in recs:
            out.times[t] = {"framework": REFERENCE, "test": r, "ms": recs[r].median}
    missing = len(run) - sum(1 for r in run if r in recs)
    if missing:
        out.warnings.append(f"reference ({REFERENCE}) tests: {missing} of {len(run)} printed no benchmark record")
    return out
