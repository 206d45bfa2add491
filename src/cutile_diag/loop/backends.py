"""Measurement backends: how the loop checks a version and times it against another.

One protocol, three implementations:

* ``WorkloadBackend`` — a ``cutile_diag.workload`` (configurations, inputs, reference) run
  by long-lived workers (``loop.worker``), one per version, so the last kept version and
  the candidate are measured in the same sitting, alternating request by request;
* ``CommandBackend`` — the user's own commands, TileGym style: ``--test-cmd`` decides
  correctness by its exit status, ``--bench-cmd`` prints ``--print-record`` records whose
  medians are the latencies (one configuration per test id); FLOP/byte counts given per
  configuration (``--flops``/``--bytes``) give it the roofline guard, without them it says
  the guard could not run;
* ``SimulatedBackend`` — deterministic fake latencies for CI: per version, from the
  transforms applied and markers in the source, with configurable noise and planted
  behaviours (a wrong transform, a regression on one configuration, a crash, a hang, an
  impossible speedup above the roof).

A ``Version`` is the content of the loop-controlled files (kernel file, launch wrapper).
The work tree is the loop's own worktree; every child runs there with the worktree's copy
of the user's code first on ``PYTHONPATH``, and checks that nothing was imported from the
user's checkout instead (``loop.imports``).
Backends that run the code put a version's files into the work tree while they need it
(``Workspace.materialize``) and give every version its own bytecode cache
(``PYTHONPYCACHEPREFIX``), since two versions of a file may share a size and an mtime
second — Python's pyc check would otherwise hand one the other's bytecode.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from . import imports, proc
from .errors import BackendError, CandidateCrash, LoopError, MeasurementTimeout
from .records import require_records
from .stats import RunStat


class CorrectnessFailure(LoopError):
    """The outputs of the timed runs no longer match the reference."""


# ---------------------------------------------------------------------------------------
# versions and the work tree

@dataclass(frozen=True)
class Version:
    label: str                                  # "baseline", "iter-3", "iter-3/b" (sweep point)
    files: Mapping[str, str]                    # repo-relative path -> text
    commit: str | None = None
    applied: tuple[str, ...] = ()               # transform keys applied since iteration 0

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for p in sorted(self.files):
            h.update(p.encode() + b"\0" + self.files[p].encode() + b"\0")
        return h.hexdigest()

    def with_label(self, label: str) -> "Version":
        return Version(label, self.files, self.commit, self.applied)


class Workspace:
    """The loop's work tree as the backends see it: ``root`` (the loop's worktree) holding the
    loop-controlled ``files``; ``origin`` the user's checkout it was made from (read never,
    but paths into it are moved to ``root`` and imports from it are refused)."""

    def __init__(self, root: Path, state_dir: Path, files: Sequence[str], *, origin: Path | None = None,
                 kernel_file: str | None = None):
        self.root = Path(root)
        self.state_dir = Path(state_dir)
        self.files = list(files)
        self.origin = Path(origin) if origin else None
        self.kernel_file = kernel_file or (self.files[0] if self.files else "")

    def remap(self, value: Any) -> Any:
        """A path (or a JSON value holding paths) into the user's checkout, moved to the worktree."""
        if self.origin is None:
            return value
        if isinstance(value, str):
            ref, sep, attr = value.rpartition("::")
            if sep and ref:
                return imports.remap(ref, self.origin, self.root) + sep + attr
            return imports.remap(value, self.origin, self.root)
        if isinstance(value, Mapping):
            return {k: self.remap(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.remap(v) for v in value]
        return value

    def current(self) -> dict[str, str]:
        return {p: (self.root / p).read_text() for p in self.files if (self.root / p).exists()}

    def write(self, files: Mapping[str, str]) -> None:
        for p, text in files.items():
            dst = self.root / p
            if not dst.exists() or dst.read_text() != text:
                dst.write_text(text)

    @contextlib.contextmanager
    def materialize(self, v: Version):
        saved = self.current()
        changed = saved != dict(v.files)
        if changed:
            self.write(v.files)
        try:
            yield
        finally:
            if changed:
                self.write(saved)

    def env(self, v: Version, *, audit: Path | None = None) -> dict[str, str]:
        """A child's environment additions: its own bytecode cache per version and, for a loop
        worktree, the worktree's code first on PYTHONPATH (``audit``: where children report imports)."""
        cache = self.state_dir / "pycache" / v.digest[:16]
        env = {"PYTHONPYCACHEPREFIX": str(cache)}
        if self.origin is not None:
            env.update(imports.child_env(self.origin, self.root, self.kernel_file, audit=audit))
        return env

    def check_imports(self, seen: Sequence[Mapping], what: str) -> dict:
        """Refuse a run that imported the user's checkout; returns what was seen (for the ledger)."""
        foreign: dict[str, str] = {}
        for rec in seen:
            foreign.update(rec.get("foreign") or {})
        if foreign:
            msg, hint = imports.foreign_message(foreign, self.root, what)
            raise BackendError(msg, hint=hint)
        kernel = next((r["kernel"] for r in seen if r.get("kernel")), None)
        return {"kernel_file_loaded": kernel, "processes": len(seen)}


@dataclass
class Verification:
    passed: bool
    summary: str
    per_config: dict[str, Any] = field(default_factory=dict)
    output: str = ""
    seconds: float = 0.0
    imports: dict = field(default_factory=dict)     # where the checked code was imported from

    def to_json(self) -> dict:
        return {"passed": self.passed, "summary": self.summary, "per_config": self.per_config,
                "output": self.output[-2000:], "seconds": round(self.seconds, 3), "imports": self.imports}


Runs = dict[str, dict[str, list[RunStat]]]      # version label -> config -> one RunStat per round


class Backend(Protocol):
    name: str

    def describe(self) -> dict: ...
    def configs(self) -> list[str] | None: ...          # None: discovered by the first measurement
    def workload_info(self) -> dict[str, dict]: ...    # config -> {flops, bytes, unit} where known
    def verify(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> Verification: ...
    def measure(self, versions: Sequence[Version], ws: Workspace, deadline: proc.Deadline,
                rounds: int) -> Runs: ...
    def roofline(self, v: Version, latencies: Mapping[str, float]) -> dict[str, dict] | str: ...
    def retain(self, versions: Sequence[Version]) -> None: ...
    def close(self) -> None: ...


@contextlib.contextmanager
def closing(backend: Backend):
    """``close()`` after the block; on an error or an interrupt ``abort()`` where the backend has
    one (a hung worker must not get a polite quit)."""
    try:
        yield backend
    except BaseException:
        getattr(backend, "abort", backend.close)()
        raise
    backend.close()


def round_order(versions: Sequence[Version], r: int) -> list[Version]:
    """A B, then B A, ...: alternating the order cancels a linear drift."""
    return list(versions) if r % 2 == 0 else list(reversed(versions))


def _check_deadline(deadline: proc.Deadline, what: str) -> None:
    if deadline.expired():
        raise MeasurementTimeout(f"the iteration's time budget ({deadline.budget_s:g} s) ran out before {what}")


# ---------------------------------------------------------------------------------------
# workload backend: persistent workers

class _Worker:
    def __init__(self, v: Version, ws: Workspace, log: Path, device: int | None):
        self.version = v
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log, "ab")
        env = dict(os.environ)
        env.update(ws.env(v))
        env.setdefault("PYTHONUNBUFFERED", "1")
        if device is not None:
            env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        self.log_path = log
        self.proc = subprocess.Popen([sys.executable, "-m", "cutile_diag.loop.worker"], cwd=ws.root, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     start_new_session=True, preexec_fn=proc.die_with_parent)
        self._buf = b""
        self.loaded: dict | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _last_stderr(self) -> str:
        try:
            lines = [ln.strip() for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        for ln in reversed(lines[-40:]):
            if "Error" in ln or "error" in ln:
                return ln[:300]
        return lines[-1][:300] if lines else ""

    def request(self, obj: dict, timeout: float | None, what: str) -> dict:
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise CandidateCrash(f"{self.version.label}: the measurement worker died ({self._exit()})") from None
        end = None if timeout is None else time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                self.kill()
                raise MeasurementTimeout(f"{self.version.label}: {what} did not finish within the time budget "
                                         f"and was killed")
            r, _, _ = select.select([fd], [], [], None if left is None else min(left, 5.0))
            if not r:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise CandidateCrash(f"{self.version.label}: the measurement worker died during {what} "
                                     f"({self._exit()})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _exit(self) -> str:
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
        tail = self._last_stderr()
        return f"exit {rc}" + (f": {tail}" if tail else "")

    def kill(self) -> None:
        proc.kill_group(self.proc)
        self._close_files()

    def close(self) -> None:
        if self.alive():
            try:
                self.request({"op": "quit"}, 10.0, "quit")
            except LoopError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.alive():
            self.kill()
        self._close_files()

    def _close_files(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except Exception:
                pass
        try:
            self._log.close()
        except Exception:
            pass


class WorkloadBackend:
    name = "workload"

    def __init__(self, workload: str, *, kwargs: Mapping[str, Any] | None = None,
                 configs: Sequence[str] | None = None, bench_options: Mapping[str, Any] | None = None,
                 device: int | None = None, seed: int = 0, check_seed: int | None = None, log_dir: Path | None = None,
                 measure_ceilings: bool = False, baseline_label: str = "baseline"):
        self.workload = workload
        self.kwargs = dict(kwargs or {})
        self._configs = list(configs) if configs else None
        self.bench_options = dict(bench_options or {})
        self.device = device
        self.seed, self.check_seed = seed, check_seed
        self.log_dir = Path(log_dir) if log_dir else None
        self.measure_ceilings = measure_ceilings
        self.workers: dict[str, _Worker] = {}
        self.info: dict[str, dict] = {}
        self.device_info: dict = {}
        self.imports: dict = {}          # where the last loaded worker imported the kernel file from

    def describe(self) -> dict:
        return {"backend": self.name, "workload": self.workload, "kwargs": self.kwargs, "configs": self._configs,
                "bench_options": self.bench_options, "device": self.device}

    def configs(self) -> list[str] | None:
        return self._configs

    def workload_info(self) -> dict[str, dict]:
        return self.info

    def _log(self, v: Version) -> Path:
        base = self.log_dir or Path(os.environ.get("TMPDIR", "/tmp"))
        return base / f"worker-{v.label.replace('/', '_')}-{v.digest[:10]}.log"

    def _worker(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> _Worker:
        w = self.workers.get(v.digest)
        if w is not None and w.alive() and w.loaded is not None:
            return w
        if w is not None:
            w.kill()
        _check_deadline(deadline, f"loading {v.label}")
        with ws.materialize(v):
            w = _Worker(v, ws, self._log(v), self.device)
            self.workers[v.digest] = w
            try:
                reply = w.request({"op": "load", "workload": ws.remap(self.workload), "kwargs": ws.remap(self.kwargs),
                                   "configs": self._configs, "seed": self.seed, "check_seed": self.check_seed,
                                   "device": self.device}, deadline.timeout(), f"loading and checking {v.label}")
                self.imports = ws.check_imports([reply.get("imports") or {}], f"the workload worker of {v.label}")
            except LoopError:
                self.workers.pop(v.digest, None)
                w.kill()
                raise
        w.loaded = reply
        if reply.get("ok"):
            if self._configs is None:
                self._configs = list(reply["configs"])
            self.info.update(reply.get("info") or {})
            self.device_info = reply.get("device") or self.device_info
        return w

    def verify(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> Verification:
        t0 = time.monotonic()
        w = self._worker(v, ws, deadline)
        reply = w.loaded or {}
        if not reply.get("ok"):
            err = reply.get("error", "the worker could not load the workload")
            if "cannot run here" in err or "no CUDA GPU" in err:
                raise BackendError(err)
            return Verification(False, f"error: {err}", seconds=time.monotonic() - t0)
        checks = reply.get("checks", {})
        bad = {c: d for c, d in checks.items() if not d.get("passed")}
        if bad:
            summ = "; ".join(f"{c}: {d.get('summary', 'FAIL')}" for c, d in list(bad.items())[:3])
            return Verification(False, f"FAIL on {len(bad)} of {len(checks)} configurations: {summ}", checks,
                                seconds=time.monotonic() - t0, imports=self.imports)
        return Verification(True, f"PASS on {len(checks)} configurations", checks, seconds=time.monotonic() - t0,
                            imports=self.imports)

    def measure(self, versions: Sequence[Version], ws: Workspace, deadline: proc.Deadline, rounds: int) -> Runs:
        workers = {v.label: self._worker(v, ws, deadline) for v in versions}
        for v in versions:
            rep = workers[v.label].loaded or {}
            if not rep.get("ok") or not rep.get("passed"):
                raise CandidateCrash(f"{v.label} did not load cleanly: {rep.get('error', 'check failed')}")
        out: Runs = {v.label: {} for v in versions}
        for r in range(rounds):
            for cfg in self._configs or []:
                for v in round_order(versions, r):
                    _check_deadline(deadline, f"measuring {v.label} on {cfg}")
                    rep = workers[v.label].request({"op": "measure", "config": cfg, "options": self.bench_options},
                                                   deadline.timeout(), f"measuring {cfg}")
                    if not rep.get("ok"):
                        raise CandidateCrash(f"{v.label} on {cfg}: {rep.get('error')}")
                    post = rep.get("post_check")
                    if post is not None and not post.get("passed"):
                        raise CorrectnessFailure(f"{v.label} on {cfg}: outputs of the timed runs are wrong: "
                                                 f"{post.get('summary')}")
                    stats = rep["stats"]
                    out[v.label].setdefault(cfg, []).append(
                        RunStat(float(stats["median"]), stats.get("rel_std"), stats.get("nrep"),
                                rep.get("samples_ms"), {**stats, "observed": rep.get("observed")}))
        return out

    def roofline(self, v: Version, latencies: Mapping[str, float]) -> dict[str, dict] | str:
        w = self.workers.get(v.digest)
        if w is None or not w.alive():
            return "the version's worker is gone"
        try:
            rep = w.request({"op": "roofline", "latencies": dict(latencies),
                             "measure_ceilings": self.measure_ceilings}, 120.0, "the roofline")
        except LoopError as e:
            return e.one_line()
        if not rep.get("ok"):
            return rep.get("error", "roofline failed")
        return rep.get("points") or {}

    def retain(self, versions: Sequence[Version]) -> None:
        keep = {v.digest for v in versions}
        for d in list(self.workers):
            if d not in keep:
                self.workers.pop(d).close()

    def close(self) -> None:
        for d in list(self.workers):
            self.workers.pop(d).close()

    def abort(self) -> None:
        """Kill every worker now (an interrupt: a hung worker must not get a polite 10 s to quit)."""
        for d in list(self.workers):
            self.workers.pop(d).kill()


# ---------------------------------------------------------------------------------------
# command backend (TileGym style)

class CommandBackend:
    name = "command"

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

    def describe(self) -> dict:
        return {"backend": self.name, "test_cmd": self.test_cmd, "bench_cmd": self.bench_cmd,
                "framework": self.framework, "direction": self.direction, "env": self.env, "counts": self.counts}

    def configs(self) -> list[str] | None:
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
        out = {}
        for c in self._configs or []:
            f, b = self._count("flops", c), self._count("bytes", c)
            if f is not None or b is not None:
                out[c] = {"flops": f or 0.0, "bytes": b or 0.0, "unit": list(self._unit())}
        return out

    def _device(self):
        """The device model the guard uses: --roof-device's preset, else the live GPU."""
        if self._dev is None:
            from ..roofline.device import live_device, preset
            from ..roofline.peaks import get_ceilings
            try:
                dev = preset(self.counts["device"]) if self.counts.get("device") else live_device()
                ceil = get_ceilings(dev, measure_if_missing=False) if dev.kind == "live" else None
                self._dev = (dev, ceil)
            except Exception as e:
                self._dev = (f"no device model for the roofline ({type(e).__name__}: {e}); "
                             "give --roof-device PRESET (h100, h200, ...)")
        return self._dev

    def _run(self, cmd: str, v: Version, ws: Workspace, deadline: proc.Deadline, what: str) -> proc.ProcResult:
        import tempfile
        _check_deadline(deadline, what)
        fd, audit_name = tempfile.mkstemp(prefix="cutile-diag-imports-", suffix=".jsonl")
        os.close(fd)
        audit = Path(audit_name)
        try:
            env = {**self.env, **ws.env(v, audit=audit)}
            log = (self.log_dir / f"{v.label.replace('/', '_')}.log") if self.log_dir else None
            with ws.materialize(v):
                res = proc.run(cmd, cwd=self.cwd or ws.root, env=env, timeout=deadline.timeout(), shell=True, log=log)
            if res.timed_out:
                raise MeasurementTimeout(f"{v.label}: {what} ran past the time budget and was killed")
            if ws.origin is not None:
                self.imports = ws.check_imports(imports.read_audit(audit), f"{what} ({cmd})")
        finally:
            audit.unlink(missing_ok=True)
        return res

    def verify(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> Verification:
        res = self._run(self.test_cmd, v, ws, deadline, "the correctness tests")
        summary = _pytest_summary(res.stdout + "\n" + res.stderr)
        if res.returncode == 5:
            raise BackendError(f"the test command selected no tests: {self.test_cmd}",
                               hint="check the -k expression (e.g. -k 'test_ and cutile and not test_perf')")
        if res.returncode == 0:
            return Verification(True, f"PASS ({summary or 'exit 0'})", output=res.tail(), seconds=res.wall_s,
                                imports=self.imports)
        return Verification(False, f"FAIL ({summary or f'exit {res.returncode}'})", output=res.tail(),
                            seconds=res.wall_s, imports=self.imports)

    def measure(self, versions: Sequence[Version], ws: Workspace, deadline: proc.Deadline, rounds: int) -> Runs:
        out: Runs = {v.label: {} for v in versions}
        for r in range(rounds):
            for v in round_order(versions, r):
                res = self._run(self.bench_cmd, v, ws, deadline, "the benchmark")
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
        if not (self.counts.get("flops") or self.counts.get("bytes")):
            return ("the above-roof guard could not run: the benchmark's configurations have no FLOP/byte counts "
                    "(give --flops/--bytes CONFIG=N, CONFIG a test id or part of one, or use --workload)")
        dev = self._device()
        if isinstance(dev, str):
            return "the above-roof guard could not run: " + dev
        from ..roofline.model import analyze
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
        pass

    def close(self) -> None:
        pass


def _pytest_summary(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        s = line.strip().strip("=").strip()
        if any(w in s for w in (" passed", " failed", " error", " skipped", "no tests ran")):
            return s
    return ""


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


# ---------------------------------------------------------------------------------------
# simulated backend (CI)

@dataclass
class SimSpec:
    """What the simulated GPU does.  Keys of ``effects`` and the planted lists are transform
    names (``latency_hints``), transform keys with parameters (``kernel_hints{"occupancy": 2}``),
    or text markers that a manual edit may put in the source (``marker:PLANTED_FAST``)."""
    configs: dict[str, float]                              # config -> baseline latency (ms)
    effects: dict[str, Any] = field(default_factory=dict)  # key -> factor, or {config: factor}
    incorrect: list[str] = field(default_factory=list)
    crash: list[str] = field(default_factory=list)
    hang: list[str] = field(default_factory=list)
    hang_in: str = "measure"                               # measure | verify
    noise: float = 0.004                                   # relative std of one sample
    run_noise: float = 0.002                               # relative std of a run's offset
    samples: int = 25
    flops: dict[str, float] = field(default_factory=dict)  # config -> FLOPs (roofline guard)
    bytes: dict[str, float] = field(default_factory=dict)
    unit: tuple[str, str] = ("f32", "cuda")
    device: str = "h200"
    seed: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SimSpec":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise BackendError(f"simulation spec: unknown key(s) {', '.join(unknown)}")
        if not isinstance(known.get("configs"), dict) or not known["configs"]:
            raise BackendError("simulation spec needs 'configs': {name: baseline latency in ms}")
        if "unit" in known:
            known["unit"] = tuple(known["unit"])
        return cls(**known)

    @classmethod
    def load(cls, path: str | Path) -> "SimSpec":
        try:
            return cls.from_json(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as e:
            raise BackendError(f"{path}: cannot read the simulation spec: {e}") from None

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["unit"] = list(self.unit)
        return d


def _count(key: str, v: Version) -> int:
    """How often a planted key applies to a version: a marker once if present; a transform key
    once per application in the version's lineage (repeated applications compound)."""
    if key.startswith("marker:"):
        marker = key[len("marker:"):]
        return int(any(marker in text for text in v.files.values()))
    name = key.split("{", 1)[0]
    return sum(1 for a in v.applied if a == key or ("{" not in key and a.split("{", 1)[0] == name))


def _matches(key: str, v: Version) -> bool:
    return _count(key, v) > 0


class SimulatedBackend:
    name = "simulated"

    def __init__(self, spec: SimSpec | Mapping[str, Any]):
        self.spec = spec if isinstance(spec, SimSpec) else SimSpec.from_json(spec)
        self.calls: list[tuple[str, str]] = []           # (op, label): what ran, for tests

    def describe(self) -> dict:
        return {"backend": self.name, "spec": self.spec.to_json()}

    def configs(self) -> list[str] | None:
        return list(self.spec.configs)

    def workload_info(self) -> dict[str, dict]:
        return {c: {"flops": self.spec.flops.get(c), "bytes": self.spec.bytes.get(c), "unit": list(self.spec.unit)}
                for c in self.spec.configs if c in self.spec.flops or c in self.spec.bytes}

    def _planted(self, kind: str, v: Version) -> str | None:
        for key in getattr(self.spec, kind):
            if _matches(key, v):
                return key
        return None

    def latency(self, v: Version, config: str) -> float:
        t = float(self.spec.configs[config])
        for key, eff in self.spec.effects.items():
            n = _count(key, v)
            if n:
                f = eff.get(config, 1.0) if isinstance(eff, Mapping) else eff
                t *= float(f) ** n
        return t

    def _hang(self, v: Version, deadline: proc.Deadline, what: str) -> None:
        # a real child that never finishes, killed at the budget like any hung kernel
        res = proc.run([sys.executable, "-c", "import time; time.sleep(3600)"], timeout=deadline.timeout(3600))
        if res.timed_out:
            raise MeasurementTimeout(f"{v.label}: {what} hung and was killed at the time budget")
        raise CandidateCrash(f"{v.label}: the simulated hang ended by itself")  # pragma: no cover

    def verify(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> Verification:
        self.calls.append(("verify", v.label))
        _check_deadline(deadline, "verification")
        if self.spec.hang_in == "verify" and self._planted("hang", v):
            self._hang(v, deadline, "the correctness check")
        bad = self._planted("incorrect", v)
        if bad:
            cfg = next(iter(self.spec.configs))
            return Verification(False, f"FAIL on {cfg}: 1024 of 1048576 elements outside tolerance "
                                       f"(simulated: {bad})", {cfg: {"passed": False}})
        return Verification(True, f"PASS on {len(self.spec.configs)} configurations (simulated)",
                            {c: {"passed": True} for c in self.spec.configs})

    def measure(self, versions: Sequence[Version], ws: Workspace, deadline: proc.Deadline, rounds: int) -> Runs:
        out: Runs = {v.label: {} for v in versions}
        for v in versions:
            self.calls.append(("measure", v.label))
            if self._planted("crash", v):
                raise CandidateCrash(f"{v.label}: the measurement worker died (exit -11: simulated segfault)")
            if self.spec.hang_in == "measure" and self._planted("hang", v):
                self._hang(v, deadline, "the benchmark")
        for r in range(rounds):
            for v in round_order(versions, r):
                _check_deadline(deadline, f"measuring {v.label}")
                for c in self.spec.configs:
                    t = self.latency(v, c)
                    seed = int(hashlib.sha256(f"{self.spec.seed}|{v.digest}|{c}|{r}".encode()).hexdigest()[:12], 16)
                    rng = random.Random(seed)
                    offset = 1.0 + self.spec.run_noise * rng.gauss(0, 1)
                    xs = [max(1e-6, t * offset * (1.0 + self.spec.noise * rng.gauss(0, 1)))
                          for _ in range(self.spec.samples)]
                    out[v.label].setdefault(c, []).append(RunStat.from_samples(xs))
        return out

    def roofline(self, v: Version, latencies: Mapping[str, float]) -> dict[str, dict] | str:
        if not self.spec.bytes and not self.spec.flops:
            return "the simulation spec has no FLOP/byte counts"
        from ..roofline.device import preset
        from ..roofline.model import analyze
        from .worker import point_json
        dev = preset(self.spec.device)
        out = {}
        for c, ms in latencies.items():
            if c not in self.spec.bytes and c not in self.spec.flops:
                continue
            p = analyze("simulated", c, latency_ms=float(ms), flops=float(self.spec.flops.get(c, 0.0)),
                        bytes=float(self.spec.bytes.get(c, 0.0)), unit=tuple(self.spec.unit), device=dev,
                        latency_source="recorded")
            out[c] = point_json(p)
        return out

    def retain(self, versions: Sequence[Version]) -> None:
        pass

    def close(self) -> None:
        pass


def backend_from_json(d: Mapping[str, Any], *, log_dir: Path | None = None) -> Backend:
    """Rebuild a backend from the setup record (``loop record`` / ``--resume`` need no flags)."""
    kind = d.get("backend")
    if kind == "workload":
        return WorkloadBackend(d["workload"], kwargs=d.get("kwargs"), configs=d.get("configs"),
                               bench_options=d.get("bench_options"), device=d.get("device"), log_dir=log_dir)
    if kind == "command":
        return CommandBackend(d["test_cmd"], d["bench_cmd"], framework=d.get("framework", "cutile"),
                              direction=d.get("direction", "forward"), env=d.get("env"), log_dir=log_dir,
                              counts=d.get("counts"))
    if kind == "simulated":
        return SimulatedBackend(d["spec"])
    raise BackendError(f"unknown backend {kind!r} in the ledger")
