"""Command backend, TileGym style: ``--test-cmd`` decides correctness by its exit status,
``--bench-cmd`` prints ``--print-record`` records whose medians are the latencies (one
configuration per test id); FLOP/byte counts per configuration (``--flops``/``--bytes``) give
it the roofline guard, without them it says the guard could not run.  Every command runs in
the loop's worktree and reports (``audit/sitecustomize.py``) which code it imported."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import imports, proc
from ..errors import BackendError, CandidateCrash, MeasurementTimeout
from ..records import require_records
from ..stats import RunStat
from .base import Backend, Runs, Verification, Version, Workspace, check_deadline, round_order


class CommandBackend(Backend):
    """Measurement by the user's own commands: ``--test-cmd``'s exit status is the check, ``--bench-cmd``'s printed
    records are the latencies."""
    name = "command"
    alternates = True
    observes = True          # verify(observe=True) records the check run's launches (loop.runner's captures)
    costly_runs = True       # a check or a timed run is a process of its own (loop.evaluate: Evaluation._costly)

    def __init__(self, test_cmd: str, bench_cmd: str, *, framework: str = "cutile", direction: str = "forward",
                 env: Mapping[str, str] | None = None, log_dir: Path | None = None, cwd: Path | None = None,
                 counts: Mapping[str, Any] | None = None):
        if not test_cmd:
            raise BackendError("--bench-cmd needs a --test-cmd: correctness is checked before every measurement")
        if not bench_cmd:
            raise BackendError("--test-cmd needs a --bench-cmd that prints --print-record records")
        self.test_cmd, self.bench_cmd = test_cmd, bench_cmd
        self.framework, self.direction = framework, direction
        self.env = dict(env or {})
        self.log_dir = Path(log_dir) if log_dir else None
        self.cwd = cwd
        # {"flops": {CONFIG: n}, "bytes": {CONFIG: n}, "unit": [dtype, unit], "device": preset}: CONFIG is a
        # test id or a part of one (the longest match wins); without counts the roofline guard cannot run
        self.counts = dict(counts or {})
        self._configs: list[str] | None = None
        self._dev: Any = None
        self.imports: dict = {}          # what the last command's Python processes imported the kernel from
        self.replay_dir: Path | None = None  # observed runs also record each launch signature there (replay)
        self.bench_observe: Path | None = None  # the benchmark's launches observed (to record them for replay)

    def describe(self) -> dict:
        """The two commands, the record filter and the counts, for the ledger's setup record."""
        return {"backend": self.name, "test_cmd": self.test_cmd, "bench_cmd": self.bench_cmd,
                "framework": self.framework, "direction": self.direction, "env": self.env, "counts": self.counts}

    def configs(self) -> list[str] | None:
        """The test ids the first benchmark run printed records for; None before it."""
        return self._configs

    def _count(self, kind: str, config: str) -> float | None:
        table = self.counts.get(kind) or {}
        if config in table:
            return float(table[config])
        hits = [k for k in table if k in config]
        return float(table[max(hits, key=len)]) if hits else None

    def _unit(self) -> tuple[str, str]:
        return tuple(self.counts.get("unit") or ("f32", "cuda"))

    def workload_info(self) -> dict[str, dict]:
        """FLOPs and bytes per configuration, matched from ``--flops`` / ``--bytes``."""
        out = {}
        for c in self._configs or []:
            f, b = self._count("flops", c), self._count("bytes", c)
            if f is not None or b is not None:
                out[c] = {"flops": f or 0.0, "bytes": b or 0.0, "unit": list(self._unit())}
        return out

    @property
    def uses_preset(self) -> bool:
        """The roofline is against an offline preset (--roof-device), not this GPU."""
        return bool(self.counts.get("device"))

    @property
    def roofline_off(self) -> str | None:
        """Why there is no roofline to put a ceiling under (``loop.ceiling``)."""
        if not (self.counts.get("flops") or self.counts.get("bytes")):
            return "the benchmark's configurations have no FLOP/byte counts (no roofline)"
        return None

    def _device(self):
        """The device model the guard uses: --roof-device's preset, else the live GPU."""
        if self._dev is None:
            from ...roofline.device import live_device, preset
            from ...measure.ceilings import device_ceilings
            try:
                dev = preset(self.counts["device"]) if self.counts.get("device") else live_device()
                ceil = device_ceilings(dev) if dev.kind == "live" else None
                self._dev = (dev, ceil)
            except Exception as e:
                self._dev = (f"no device model for the roofline ({type(e).__name__}: {e}); "
                             "give --roof-device PRESET (h100, h200, ...)")
        return self._dev

    def _run(self, cmd: str, v: Version, ws: Workspace, deadline: proc.Deadline, what: str,
             observe: Path | None = None) -> proc.ProcResult:
        import tempfile
        check_deadline(deadline, what)
        fd, audit_name = tempfile.mkstemp(prefix="cutile-diag-imports-", suffix=".jsonl")
        os.close(fd)
        audit = Path(audit_name)
        try:
            env = {**self.env, **ws.env(v, audit=audit)}
            if observe is not None:
                env.update(_observer_env(observe, env, self.replay_dir))
            log = (self.log_dir / f"{v.label.replace('/', '_')}.log") if self.log_dir else None
            with ws.materialize(v):
                res = proc.run(cmd, cwd=self.cwd or ws.root, env=env, timeout=deadline.timeout(), shell=True, log=log)
            if res.timed_out:
                raise MeasurementTimeout(f"{v.label}: {what} ran past the time budget and was killed", label=v.label)
            if ws.origin is not None:
                self.imports = ws.check_imports(imports.read_audit(audit), f"{what} ({cmd})")
        finally:
            audit.unlink(missing_ok=True)
        return res

    def verify(self, v: Version, ws: Workspace, deadline: proc.Deadline, *, observe: bool = False) -> Verification:
        """Run the test command; ``observe``: with every ``ct.launch`` of its processes recorded
        (``measure.observe``, no timing pad: the check is not timed), so the one run that
        checks the version also gives its capture the launch arguments (``Verification.launches``)."""
        import tempfile
        with tempfile.TemporaryDirectory(prefix="cutile-diag-check-launches-") as tmp:
            rec_dir = Path(tmp) if observe else None
            res = self._run(self.test_cmd, v, ws, deadline, "the correctness tests", observe=rec_dir)
            launches, observed = _observed(rec_dir, res) if rec_dir is not None else ([], {})
        summary = _pytest_summary(res.stdout + "\n" + res.stderr)
        if res.returncode == 5:
            raise BackendError(f"the test command selected no tests: {self.test_cmd}",
                               hint="check the -k expression (e.g. -k 'test_ and cutile and not test_perf')")
        passed = res.returncode == 0
        return Verification(passed, f"PASS ({summary or 'exit 0'})" if passed else
                            f"FAIL ({summary or f'exit {res.returncode}'})", output=res.tail(), seconds=res.wall_s,
                            imports=self.imports, launches=launches, observed=observed)

    @staticmethod
    def launch_block(ver: Verification, function: str) -> tuple[dict | None, str]:
        """The launch of ``function`` an observed check recorded, as a capture manifest's ``launch``
        block (its largest grid: the tests' costliest launch of the kernel), or (None, why not)."""
        from ...measure.capture import launch_json
        mine = [r for r in ver.launches if r.kernel == function]
        if not mine:
            seen = ver.observed.get("kernels") or []
            why = f"the check run launched no {function}" + (f" (it launched {', '.join(seen[:3])})" if seen else "")
            return None, why + (f"; {ver.observed['warning']}" if ver.observed.get("warning") else "")
        rec = max(mine, key=lambda r: r.grid_blocks)
        try:
            rec.specs()
        except ValueError as e:
            return None, f"the check run's launch of {function}: {e}"
        return launch_json(rec, sm_count=rec.extra.get("sm_count"), sm_source="the device of the check run",
                           source="check-run"), ""

    def measure(self, versions: Sequence[Version], ws: Workspace, deadline: proc.Deadline, rounds: int) -> Runs:
        """Run the bench command once per version and round (alternating order); its records' medians are the runs. A
        failed run or a missing record is a ``CandidateCrash``."""
        out: Runs = {v.label: {} for v in versions}
        for r in range(rounds):
            for v in round_order(versions, r):
                res = self._run(self.bench_cmd, v, ws, deadline, "the benchmark", observe=self.bench_observe)
                text = res.stdout + "\n" + res.stderr
                try:
                    recs = require_records(text, framework=self.framework, direction=self.direction,
                                           what=f"the benchmark command ({v.label})")
                except BackendError as e:
                    if res.returncode not in (0, None):
                        raise CandidateCrash(f"{v.label}: the benchmark command failed with exit "
                                             f"{res.returncode}: {_last_line(text)}") from None
                    raise CandidateCrash(e.one_line()) from None
                if self._configs is None:
                    self._configs = sorted(recs)
                missing = [c for c in self._configs if c not in recs]
                if missing:
                    raise CandidateCrash(f"{v.label}: no benchmark record for {', '.join(missing[:3])}")
                for c in self._configs:
                    rec = recs[c]
                    out[v.label].setdefault(c, []).append(
                        RunStat(rec.median, rec.rel_std, rec.nrep, None, rec.to_json()))
        return out

    def roofline(self, v: Version, latencies: Mapping[str, float]) -> dict[str, dict] | str:
        """Roofline points from the ``--flops`` / ``--bytes`` counts at the measured latencies, or why the above-roof
        guard could not run."""
        if not (self.counts.get("flops") or self.counts.get("bytes")):
            return ("the above-roof guard could not run: the benchmark's configurations have no FLOP/byte counts "
                    "(give --flops/--bytes CONFIG=N, CONFIG a test id or part of one, or use --workload)")
        dev = self._device()
        if isinstance(dev, str):
            return "the above-roof guard could not run: " + dev
        from ...roofline.model import analyze
        from .worker import point_json
        out = {}
        for c, ms in latencies.items():
            f, b = self._count("flops", c), self._count("bytes", c)
            if (f is None and b is None) or not ms:
                continue
            p = analyze("bench-cmd", c, latency_ms=float(ms), flops=f or 0.0, bytes=b or 0.0, unit=self._unit(),
                        device=dev[0], ceilings=dev[1], latency_source="recorded")
            out[c] = point_json(p)
        if not out:
            return ("the above-roof guard could not run: no configuration matches a --flops/--bytes entry "
                    f"(configurations: {', '.join(list(latencies)[:3])})")
        return out

    def retain(self, versions: Sequence[Version]) -> None:
        """Nothing to keep: every run is a process of its own."""
        pass

    def close(self) -> None:
        """Nothing to release: no process outlives its run."""
        pass


def _observer_env(rec_dir: Path, env: Mapping[str, str], replay_dir: Path | None = None) -> dict[str, str]:
    """The launch observer's additions, its site first on the child's PYTHONPATH (ahead of the
    import audit's: both hand over to the next ``sitecustomize``)."""
    from ...measure.observe import observer_env
    path = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    return observer_env(rec_dir, execute=True, pad_us=0.0, base={"PYTHONPATH": path}, replay_dir=replay_dir)


def _observed(rec_dir: Path, res: proc.ProcResult) -> tuple[list, dict]:
    """The launches the observed check recorded, and a summary for the ledger (how many, of which
    kernels, how many processes imported cuda.tile, the observer's own warning if it printed one)."""
    from ...measure.observe import OBSERVER_NOTE, read_records
    launches, importers = read_records(rec_dir)
    info: dict[str, Any] = {"launches": len(launches), "importers": importers,
                            "kernels": sorted({r.kernel for r in launches})[:20]}
    note = [ln for ln in res.stderr.splitlines() if ln.startswith(OBSERVER_NOTE)]
    if note:
        info["warning"] = note[-1][:300]
    return launches, info


def _pytest_summary(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        s = line.strip().strip("=").strip()
        if any(w in s for w in (" passed", " failed", " error", " skipped", "no tests ran")):
            return s
    return ""


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"
