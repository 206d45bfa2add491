"""From the survey's launches to the campaign's plan: one entry per kernel, ranked.

Per kernel (``FILE.py::KERNEL``, the source file the launch names and the module attribute
holding the kernel): its configurations (``roofline.observed`` groups: grid + argument specs)
with calls, measured device times, static FLOPs/bytes and the roof time; the test ids that
launched it; and the two commands the loop measures it with, derived from the user's command:

- bench: the same launcher (``pytest``, ``python -m pytest``) on exactly those test ids,
  ``--print-record -s`` (the cutile-diag pytest plugin prints their records);
- correctness: the same launcher on the tests' files, with the user's ``-k`` selection of
  perf tests negated (``-k "test_perf and cutile"`` -> ``-k "not test_perf and cutile"``):
  the files' other tests of that backend;
- FLOPs/bytes per bench configuration: each perf test's dominant configuration of the kernel,
  keyed by the test id from its file name on (the command backend matches keys inside the ids).

Rank: expected gain = the suite's GPU time the kernel would give back at its attainable time
(sum over configurations of (median ms - attainable ms) x calls; attainable = max(launch floor,
bytes at the measured copy bandwidth for that many bytes, FLOPs at the compute ceiling), see
``roofline.curve``) as a share of the suite's GPU time, i.e. headroom x share: a 2.4 µs kernel
has at most 2.4 - 1.1 µs a call to give back, however far below the DRAM ceiling it sits.  A
configuration whose attainable time is the launch floor is ``bound: "launch"`` (a kernel all of
whose configurations are: launch-bound, what is left is launches, not the kernel's body).  Each
configuration keeps ``roof_ms`` (bytes and FLOPs at the flat ceilings) beside ``attainable_ms``.
A dry run has no times: the share is then that of the attainable times (calls x attainable ms;
bytes moved without a device model) and the headroom unknown.

Reference: where the survey timed the same tests of another backend (``survey.reference``,
TileGym's ``pytorch`` perf variants), each configuration has ``reference_ms`` and the kernel
``reference`` (its tests' reference medians and the time ratio against them).
"""
from __future__ import annotations

import math
import re
import shlex
import statistics
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import UsageError
from ..loop import proc
from ..roofline.model import attainable_time
from ..roofline.observed import _attr_of, roofline_launches
from ..replay.record import folder_name
from ..replay.store import MANIFEST
from .reference import plugin_args
from .survey import Survey, pytest_prefix

PERF_WORD = re.compile(r"\b(\w*perf\w*)\b")


@dataclass
class KernelPlan:
    """One kernel of the plan: its reference, configurations, tests, derived commands and counts, and its rank
    (expected gain) and problems."""
    name: str                          # the kernel's Python function name
    ref: str                           # FILE.py::KERNEL, FILE absolute
    file: str                          # FILE relative to the repository root
    configs: list[dict] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)
    test_cmd: str | None = None
    bench_cmd: str | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    gpu_ms: float | None = None
    roof_ms: float | None = None
    attainable_ms: float | None = None   # sum over configurations of calls x attainable time
    bound: str | None = None             # "launch" when every timed configuration is at its launch floor
    share: float = 0.0
    headroom: float | None = None
    expected_gain: float = 0.0
    reference: dict | None = None        # {"framework", "tests": {test id: ms}, "ms", "ratio"}: the other backend
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No problem stops its loop."""
        return not self.problems

    def to_json(self) -> dict:
        """Every field, and ``ok``."""
        return {**self.__dict__, "ok": self.ok}

    @classmethod
    def from_json(cls, d: dict) -> "KernelPlan":
        """The plan entry from its JSON (keys that are not fields ignored)."""
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class CampaignPlan:
    """The survey's kernels ranked (``ranked_by`` says by what), with the suite's GPU time and warnings."""
    command: list[str]
    root: str
    executed: bool
    kernels: list[KernelPlan]
    ranked_by: str
    suite_gpu_ms: float | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """The plan as ``plan.json`` and ``campaign.json`` hold it."""
        return {"command": self.command, "root": self.root, "executed": self.executed, "ranked_by": self.ranked_by,
                "suite_gpu_ms": self.suite_gpu_ms, "warnings": self.warnings,
                "kernels": [k.to_json() for k in self.kernels]}

    @classmethod
    def from_json(cls, d: dict) -> "CampaignPlan":
        """The plan from its JSON."""
        return cls(d["command"], d["root"], d["executed"], [KernelPlan.from_json(k) for k in d["kernels"]],
                   d["ranked_by"], d.get("suite_gpu_ms"), d.get("warnings", []))

    def kernel(self, name: str) -> KernelPlan | None:
        """The kernel named by function name, ``FILE.py::KERNEL`` reference or repository-relative reference; None if
        none."""
        return next((k for k in self.kernels if name in (k.name, k.ref, f"{k.file}::{k.ref.rsplit('::', 1)[1]}")), None)


def _replay_folder(sv: Survey, launches) -> str | None:
    """The recording of this configuration (``cutile_diag.replay``), when the survey made one."""
    if not sv.replay_dir or not launches:
        return None
    p = Path(sv.replay_dir) / folder_name(launches[0])
    return str(p) if (p / MANIFEST).is_file() else None


def _roof_ms(static: dict | None, unit: tuple[str, str], device, ceilings) -> tuple[float | None, object]:
    """(time at the flat roof: bytes at the DRAM ceiling or FLOPs at the compute one, the larger; the
    attainable time at this size, ``roofline.curve.Attainable``) of a configuration, in ms."""
    if not static or device is None or static.get("bytes_compulsory") is None:
        return None, None
    nbytes, flops = static["bytes_compulsory"], static.get("flops_total") or 0.0
    flat = attainable_time(nbytes, flops, unit, device, ceilings, sized=False)
    return flat.ms, attainable_time(nbytes, flops, unit, device, ceilings)


def _resolve_file(nodeid_file: str, cwd: Path, root: Path) -> Path | None:
    """A node id's file is relative to pytest's rootdir: the survey's folder or one above it, up to the repository
    root or past it (a repository nested in another project's checkout: pytest's rootdir is then the outer one's,
    where its configuration is); the file itself must be in the repository."""
    for base in (cwd, *cwd.parents):
        p = base / nodeid_file
        if p.is_file() and p.resolve().is_relative_to(root.resolve()):
            return p
    return None


def _commands(cmd: list[str], tests: Sequence[str], cwd: Path, root: Path,
              test_k: str | None = None) -> tuple[str | None, str | None, list[str]]:
    """(correctness command, bench command, test ids relative to the repository root)."""
    prefix = pytest_prefix(cmd)
    if prefix is None or not tests:
        return None, None, []
    root = root.resolve()                  # test files resolve to absolute paths
    ids, files = [], []
    for t in tests:
        f, _, rest = t.partition("::")
        p = _resolve_file(f, cwd, root)
        rel = p.resolve().relative_to(root).as_posix() if p else f
        ids.append(f"{rel}::{rest}" if rest else rel)
        if rel not in files:
            files.append(rel)
    user_k = next((cmd[i + 1] for i, w in enumerate(cmd[:-1]) if w == "-k"), None)
    if test_k:
        k = test_k
    elif user_k and PERF_WORD.search(user_k):
        k = PERF_WORD.sub(lambda m: f"not {m.group(1)}", user_k, count=1)
    else:
        k = f"not perf and ({user_k})" if user_k else "not perf"
    q = lambda ws: " ".join(shlex.quote(w) for w in ws)   # noqa: E731
    return (q([*prefix, *files, "-k", k]), q([*prefix, *ids, *plugin_args(), "--print-record", "-s"]), ids)


def build_plan(sv: Survey, root: Path, *, device=None, ceilings=None,
               on_step: Callable[[str], None] | None = None, max_tests: int | None = None,
               test_k: str | None = None) -> CampaignPlan:
    """One plan entry per kernel the survey saw (configurations, counts, roof, tests and commands), ranked by the GPU
    time it can give back when the survey executed, else by its share of the suite's attainable time or bytes."""
    results = roofline_launches(sv.records, device=device if sv.executed else None, ceilings=ceilings,
                                on_step=on_step)
    cwd = Path(sv.cwd)
    by_kernel: dict[tuple, KernelPlan] = {}
    for r in results:
        g = r.group
        key = (g.file, g.kernel)
        kp = by_kernel.get(key)
        if kp is None:
            if not g.file:
                file, attr = "?", g.kernel
            else:
                try:
                    attr = _attr_of(g.file, g.kernel)
                except Exception:            # the module no longer imports: the ref keeps the function name
                    attr = g.kernel
                p = Path(g.file).resolve()
                file = p.relative_to(root).as_posix() if p.is_relative_to(root) else str(p)
            kp = by_kernel[key] = KernelPlan(g.kernel, f"{g.file}::{attr}", file)
            if not g.file:
                kp.problems.append("the launch names no source file")
            elif not Path(g.file).resolve().is_relative_to(root):
                kp.problems.append(f"{g.file} is outside the repository {root}")
        gj = g.to_json()
        tests = sorted({x.extra["test"] for x in g.launches if x.extra.get("test")})
        st = r.static or {}
        unit = tuple(st.get("unit") or ("f32", "cuda"))
        roof, att = _roof_ms(st, unit, device, ceilings)
        p = r.point
        cfg = {"label": g.label, "grid": list(g.grid), "specs": g.specs, "calls": g.calls, "tests": tests,
               "median_ms": gj["median_ms"], "total_ms": gj["total_ms"], "unit": list(unit),
               "bytes": st.get("bytes_compulsory"), "flops": st.get("flops_total"), "roof_ms": roof,
               "attainable_ms": att.ms if att else None, "floor_ms": att.floor_ms if att else None,
               "bound": p.bound if p else ("launch" if att and att.limit == "launch" else None),
               "pct_of_ceiling": (p.pct_measured if p.pct_measured is not None else p.pct_datasheet) if p else None,
               "pct_attainable": p.pct_attainable if p else None,
               "reference_ms": _reference_ms(tests, sv.reference),
               "status": r.status, "error": r.error, "replay": _replay_folder(sv, g.launches)}
        kp.configs.append(cfg)
        if r.status in ("no_static", "invalid"):
            kp.problems.append(f"{g.label}: {r.error or r.status}")
    for kp in by_kernel.values():
        _finish(kp, sv, cwd, root, max_tests, test_k)
    kernels = list(by_kernel.values())
    # configurations without a device time (launched inside CUDA-graph capture) count as none of it
    timed = sv.executed and any(c["total_ms"] is not None for k in kernels for c in k.configs)
    if timed:
        ranked_by = ("GPU time to give back: (time - attainable time at its size) x calls, as a share of the "
                     "suite's GPU time (headroom x share)")
        suite = sum(k.gpu_ms or 0.0 for k in kernels)
        for k in kernels:
            saved = sum(c["calls"] * max(0.0, c["median_ms"] - c["attainable_ms"])
                        for c in k.configs if c["attainable_ms"] and c["median_ms"] and c["total_ms"])
            k.share = (k.gpu_ms or 0.0) / suite if suite else 0.0
            k.headroom = min(1.0, saved / k.gpu_ms) if k.gpu_ms else None
            k.expected_gain = k.share * k.headroom if k.headroom is not None else 0.0
    else:
        suite = None
        what = "attainable time" if device is not None else "bytes moved"
        ranked_by = f"share of the suite's {what} (not executed: headroom unknown)"
        weight = {}
        for k in kernels:
            weight[id(k)] = sum(c["calls"] * ((c["attainable_ms"] if device is not None else c["bytes"]) or 0.0)
                                for c in k.configs)
        total = sum(weight.values())
        for k in kernels:
            k.share = weight[id(k)] / total if total else 1.0 / len(kernels)
            k.expected_gain = k.share
    kernels.sort(key=lambda k: (not k.ok, -k.expected_gain, k.name))
    return CampaignPlan(sv.command, str(root), sv.executed, kernels, ranked_by, suite, list(sv.warnings))


def _test_ms(kp: KernelPlan, sv: Survey) -> dict[str, float]:
    """GPU time (or, not executed, calls) of this kernel per test."""
    out: dict[str, float] = {}
    for r in sv.records:
        t = r.extra.get("test")
        if t and r.kernel == kp.name and r.file and kp.ref.startswith(r.file + "::"):
            out[t] = out.get(t, 0.0) + (r.device_ms if r.device_ms is not None else 1.0)
    return out


def _finish(kp: KernelPlan, sv: Survey, cwd: Path, root: Path, max_tests: int | None = None,
            test_k: str | None = None) -> None:
    """Tests, derived commands, per-test counts and GPU time of one kernel."""
    tests = sorted({t for c in kp.configs for t in c["tests"]})
    if max_tests is not None and len(tests) > max_tests:
        ms = _test_ms(kp, sv)
        tests = sorted(sorted(tests, key=lambda t: -ms.get(t, 0.0))[:max_tests])
    test_cmd, bench_cmd, ids = _commands(sv.command, tests, cwd, root, test_k)
    kp.tests, kp.test_cmd, kp.bench_cmd = ids, test_cmd, bench_cmd
    if not tests:
        kp.problems.append("no pytest test launched it: no command to derive (run the campaign over pytest)")
    flops, bytes_, units = {}, {}, set()
    for t, rid in zip(tests, ids):
        # the configuration this test launched most often is what its benchmark record times
        mine = [c for c in kp.configs if t in c["tests"]]
        dom = max(mine, key=lambda c: c["calls"])
        key = rid.rsplit("/", 1)[-1]
        if dom["bytes"]:
            bytes_[key] = dom["bytes"]
        if dom["flops"]:
            flops[key] = dom["flops"]
        units.add(tuple(dom["unit"]))
    if bytes_ or flops:
        kp.counts = {"flops": flops, "bytes": bytes_, "unit": list(sorted(units)[0])}
    times = [c["total_ms"] for c in kp.configs if c["total_ms"] is not None]
    kp.gpu_ms = sum(times) if times else None
    roofs = [c["roof_ms"] * c["calls"] for c in kp.configs if c["roof_ms"]]
    kp.roof_ms = sum(roofs) if roofs else None
    att = [c["attainable_ms"] * c["calls"] for c in kp.configs if c["attainable_ms"]]
    kp.attainable_ms = sum(att) if att else None
    timed = [c for c in kp.configs if c["median_ms"] is not None and c["bound"]]
    kp.bound = "launch" if timed and all(c["bound"] == "launch" for c in timed) else None
    refs = {rid: sv.reference[t]["ms"] for t, rid in zip(tests, ids) if t in sv.reference}
    if refs:
        # the kernel's median per test against the reference's, geometric mean over the tests both timed
        mine = {t: statistics.median(ms) for t, ms in _test_times(kp, sv).items() if ms}
        pairs = [(mine[t], sv.reference[t]["ms"]) for t in tests if t in mine and t in sv.reference]
        kp.reference = {"framework": next(iter(sv.reference.values()))["framework"], "tests": refs,
                        "ms": _geomean(list(refs.values())),
                        "ratio": _geomean([a / b for a, b in pairs]) if pairs else None}


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _reference_ms(tests: Sequence[str], reference: dict[str, dict]) -> float | None:
    """The reference backend's median over this configuration's tests (None: none timed)."""
    ms = [reference[t]["ms"] for t in tests if t in reference]
    return statistics.median(ms) if ms else None


def _test_times(kp: KernelPlan, sv: Survey) -> dict[str, list[float]]:
    """This kernel's device times per test (the JIT-compiling first launches left out)."""
    out: dict[str, list[float]] = {}
    for r in sv.records:
        t = r.extra.get("test")
        if t and r.kernel == kp.name and r.file and kp.ref.startswith(r.file + "::") and r.device_ms is not None \
                and not r.extra.get("first"):
            out.setdefault(t, []).append(r.device_ms)
    return out


COLLECT_TIMEOUT_S = 300.0
COLLECT_JOBS = 4            # correctness commands collected side by side


def _collect(words: list[str], root: Path) -> tuple[list[str] | None, str]:
    """The test ids ``words`` (a pytest command) selects, by ``--collect-only`` in ``root``; None and
    why when pytest could not collect."""
    res = proc.run([*words, "--collect-only", "-q", "-p", "no:cacheprovider"], cwd=root, timeout=COLLECT_TIMEOUT_S)
    if res.returncode in (0, 5) and not res.timed_out:
        return [ln.strip() for ln in res.stdout.splitlines() if "::" in ln and not ln.startswith(" ")], ""
    last = [ln for ln in res.tail().splitlines() if ln.strip()][-2:]
    return None, ("timed out" if res.timed_out else f"exit {res.returncode}") + (": " + " | ".join(last) if last else "")


def check_test_commands(plan: CampaignPlan, user_cmd: list[str], root: Path, *, test_k: str | None = None,
                        on_step: Callable[[str], None] | None = None) -> None:
    """Every kernel's correctness command must select the tests it claims (``pytest --collect-only``):
    a derived ``-k`` that selects nothing (``-k 'not perf'`` on ``tests/test_perf.py``: pytest matches
    the file's name too) is replaced by the files' tests without the perf tests the survey's
    selection picks (``--deselect``), said in the plan's warnings; where no test is left, or the
    command cannot be collected, the kernel gets a problem (``--test-k`` chooses another)."""
    say = on_step or (lambda _m: None)
    prefix = pytest_prefix(user_cmd)
    cmds = list(dict.fromkeys(kp.test_cmd for kp in plan.kernels if kp.test_cmd)) if prefix is not None else []
    seen: dict[str, tuple[list[str] | None, str]] = {}
    if cmds:
        # at once: each is a pytest start-up with the suite's imports (torch, the library), seconds apiece
        say(f"checking {len(cmds)} correctness command(s) at once (pytest --collect-only)")
        with ThreadPoolExecutor(max_workers=min(COLLECT_JOBS, len(cmds))) as pool:
            seen = dict(zip(cmds, pool.map(lambda c: _collect(shlex.split(c), root), cmds)))
    for kp in plan.kernels:
        if not kp.test_cmd or prefix is None:
            continue
        ids, why = seen[kp.test_cmd]
        if ids is None:
            kp.problems.append(f"its correctness command cannot be collected ({why}): {kp.test_cmd}")
            continue
        if ids:
            continue
        files = list(dict.fromkeys(t.partition("::")[0] for t in kp.tests))
        alt = None
        if not test_k:
            every, _ = _collect([*prefix, *files], root)
            user_k = next((user_cmd[i + 1] for i, w in enumerate(user_cmd[:-1]) if w == "-k"), None)
            m = PERF_WORD.search(user_k or "") or PERF_WORD.search("perf")
            # the perf tests by their own names (the test function's, not its file's)
            perf = [t for t in every or [] if m.group(1).lower() in t.rsplit("::", 1)[-1].split("[")[0].lower()]
            if every and len(perf) < len(every):
                alt = " ".join(shlex.quote(w) for w in [*prefix, *files, *[x for t in perf for x in ("--deselect", t)]])
        if alt:
            plan.warnings.append(f"{kp.name}: the derived correctness command selects no test ({kp.test_cmd}: pytest's "
                                 f"-k matches file names too); it runs the files' tests but those named "
                                 f"'{m.group(1)}' instead")
            kp.test_cmd = alt
        else:
            kp.problems.append(f"its correctness command selects no test ({kp.test_cmd})"
                               + ("" if test_k else "; give --test-k EXPR for the files' correctness tests"))


def select(plan: CampaignPlan, only: Sequence[str] = (), skip: Sequence[str] = ()) -> list[KernelPlan]:
    """The kernels to optimise, best expected gain first: ``--select`` / ``--skip`` by name or FILE.py::KERNEL."""
    for n in [*only, *skip]:
        if plan.kernel(n) is None:
            raise UsageError(f"no kernel {n!r} in the survey",
                             hint="kernels: " + ", ".join(k.name for k in plan.kernels))
    chosen = [plan.kernel(n) for n in only] if only else [k for k in plan.kernels if k.ok]
    drop = {id(plan.kernel(n)) for n in skip}
    order = {id(k): i for i, k in enumerate(plan.kernels)}
    return sorted((k for k in chosen if id(k) not in drop), key=lambda k: order[id(k)])
