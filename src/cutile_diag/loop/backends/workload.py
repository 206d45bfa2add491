"""Workload backend: a ``cutile_diag.workload`` (configurations, inputs, reference) run by
long-lived workers (``backends/worker.py``), one per version, so the last kept version and the
candidate are measured in the same sitting, A B B A request by request."""
from __future__ import annotations

import functools
import json
import operator
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import proc
from .. import spares as spares_mod
from ..errors import BackendError, CandidateCrash, LoopError, MeasurementTimeout
from ..stats import RunStat
from .base import Backend, CorrectnessFailure, Runs, Verification, Version, Workspace, check_deadline


WORKER = "cutile_diag.loop.backends.worker"
WARM_S = 1.0          # the baseline's warm-up before a comparison's first timed sample ...
WARM_IDLE_S = 2.0     # ... after the GPU idled this long (back-to-back calls, as calibrate's, skip it) ...
WARM_MAX_RUNS = 8     # ... and at most this many measure requests


def _run_stat(rep: dict) -> RunStat:
    """A measure reply as a RunStat, with the SM clock and clock-event reasons of its timed phase."""
    stats, obs = rep["stats"], rep.get("observed") or {}
    clock = obs.get("sm_clock_mhz")
    return RunStat(float(stats["median"]), stats.get("rel_std"), stats.get("nrep"), rep.get("samples_ms"),
                   {**stats, "observed": rep.get("observed")},
                   clock_mhz=float(clock["median"]) if isinstance(clock, dict) and clock.get("median") else None,
                   clock_events=obs.get("clock_event_reasons"))


def _merged(rs: list[RunStat]) -> RunStat:
    """A round's runs of one version (A B B A: two) as one: their samples pooled, clocks averaged,
    clock-event reasons joined."""
    if len(rs) == 1:
        return rs[0]
    samples = [x for r in rs for x in (r.samples or [r.median])]
    m = RunStat.from_samples(samples, {"runs": [r.record for r in rs]})
    clocks = [r.clock_mhz for r in rs]
    m.clock_mhz = sum(clocks) / len(clocks) if all(clocks) else None
    events = [r.clock_events for r in rs if r.clock_events is not None]
    m.clock_events = functools.reduce(operator.or_, events) if events else None
    return m


def _device_env(device: int | None) -> dict[str, str]:
    if device is None:
        return {}
    return {"CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
            "CUTILE_DIAG_WORKER_DEVICE": str(device)}


class _Worker:
    def __init__(self, v: Version, ws: Workspace, log: Path, device: int | None,
                 spare: subprocess.Popen | None = None):
        """A new worker process for ``v``, or ``spare``: one started ahead (``loop.spares``) that
        gets ``v``'s files as overrides with its load request."""
        self.version = v
        self.spare = spare is not None
        if spare is not None:
            self.proc, self.log_path, self._log = spare, spare.log_path, None
        else:
            log.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(log, "ab")
            env = spares_mod.child_env({**ws.env(v), **_device_env(device)})
            self.log_path = log
            self.proc = subprocess.Popen([sys.executable, "-m", WORKER], cwd=ws.root, env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                         start_new_session=True, preexec_fn=proc.die_with_parent)
        self._buf = b""
        self.loaded: dict | None = None
        self.checked = False            # its imports were checked (``WorkloadBackend._worker``)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _last_stderr(self) -> str:
        if self.log_path is None:
            return ""
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
                                         f"and was killed", label=self.version.label)
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
            if self._log is not None:
                self._log.close()
        except Exception:
            pass


def _tuning_note(tuning: Mapping | None) -> str:
    """What a worker's autotune searches did, for the check's summary (empty when it held nothing or ran none)."""
    t = tuning or {}
    parts = ([f"autotune held at the first worker's pick ({', '.join(t['pinned'])})"] if t.get("pinned") else []) + \
        [f"autotune searched {k} again ({why})" for k, why in (t.get("searched_again") or {}).items()]
    return "; " + "; ".join(parts) if parts else ""


class WorkloadBackend(Backend):
    """A workload checked and timed in long-lived worker processes, one per version (keyed by digest), so a version's
    compile and inputs are paid once."""
    name = "workload"
    prepares = True         # a sweep's workers load at once (prepare)
    alternates = False          # A B B A, then B A A B, within the rounds (see measure)

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
        self._spares: spares_mod.Spares | None = None     # workers started ahead (keep_spares)
        self.requests: list[tuple[float, float]] = []      # measure requests: (round trip s, in the worker s)
        self.info: dict[str, dict] = {}
        self.device_info: dict = {}
        self.imports: dict = {}          # where the last loaded worker imported the kernel file from
        self._busy = float("-inf")       # when the last measurement ended (the warm-up's idle test)
        self._rounds = 0                 # rounds measured so far: odd ones start with the other version
        self.tuning: dict[str, dict] = {}     # the first loaded worker's autotune picks, held by the later ones
        # per configuration, the sampling plan of its first measurement (the baseline's), which every version
        # then samples by: the same warm-up, samples and batch, and the longest spin any version's enqueue needed
        self.plans: dict[str, dict] = {}

    def tuning_report(self) -> dict:
        """The autotune picks the first worker made and what the later workers held or searched again."""
        held, again = set(), {}
        for w in self.workers.values():
            t = (w.loaded or {}).get("tuning") or {}
            held.update(t.get("pinned") or [])
            again.update(t.get("searched_again") or {})
        return {"picks": dict(self.tuning), "held": sorted(held), "searched_again": again} if self.tuning else {}

    def describe(self) -> dict:
        """The workload, its arguments, configurations, bench options and device, for the ledger's setup record."""
        return {"backend": self.name, "workload": self.workload, "kwargs": self.kwargs, "configs": self._configs,
                "bench_options": self.bench_options, "device": self.device}

    def configs(self) -> list[str] | None:
        """Those asked for, else the workload's once a worker has loaded it (None before)."""
        return self._configs

    def workload_info(self) -> dict[str, dict]:
        """The workload's FLOPs, bytes and unit per configuration, as its workers reported them."""
        return self.info

    def _log(self, v: Version) -> Path:
        base = self.log_dir or Path(os.environ.get("TMPDIR", "/tmp"))
        return base / f"worker-{v.label.replace('/', '_')}-{v.digest[:10]}.log"

    def _load_request(self, ws: Workspace, v: Version | None = None) -> dict:
        req = {"op": "load", "workload": ws.remap(self.workload), "kwargs": ws.remap(self.kwargs),
               "configs": self._configs, "seed": self.seed, "check_seed": self.check_seed, "device": self.device}
        if self.tuning:
            req["tuning"] = self.tuning
        if v is not None:
            req["overrides"] = {str(ws.root / p): t for p, t in v.files.items()}
        return req

    def keep_spares(self, ws: Workspace, n: int) -> None:
        """Keep ``n`` workers started ahead, their imports and CUDA context done (``loop.spares``):
        each version's worker is then one of them, loaded with its files as overrides."""
        if self._spares is not None:
            self._spares.close()
        self._spares = None
        if n > 0:
            self._spares = spares_mod.Spares(WORKER, env={**ws.env(None), **_device_env(self.device)}, cwd=ws.root,
                                             n=n, log_dir=self.log_dir or Path(os.environ.get("TMPDIR", "/tmp")))

    def _spare(self) -> subprocess.Popen | None:
        return self._spares.take() if self._spares is not None else None

    def _new_worker(self, v: Version, ws: Workspace) -> _Worker:
        return _Worker(v, ws, self._log(v), self.device, spare=self._spare())

    def prepare(self, versions: Sequence[Version], ws: Workspace, deadline: proc.Deadline) -> None:
        """Start and load (compile + check) the workers of several versions at once, each seeing
        its own files (the worktree holds one version): a sweep's checks overlap instead of
        queueing.  A worker that fails here is dropped: ``verify`` loads it again and reports."""
        import concurrent.futures as cf
        todo = [v for v in versions if not (self.workers.get(v.digest) and self.workers[v.digest].loaded)]
        if len(todo) < 2 or self._configs is None:
            return

        kernel = os.path.realpath(ws.root / ws.kernel_file)

        started = {v.digest: self._new_worker(v, ws) for v in todo}    # spares taken here, not in the threads

        def load(v: Version) -> None:
            w = started[v.digest]
            try:
                w.loaded = w.request(self._load_request(ws, v), deadline.timeout(), f"loading and checking {v.label}")
            except LoopError:
                w.kill()
                return
            # only a worker that really ran this version's kernel text counts (else the tree's would)
            if kernel in (w.loaded.get("overrides_read") or []):
                self.workers[v.digest] = w
            else:
                w.close()

        with cf.ThreadPoolExecutor(max_workers=len(todo)) as ex:
            list(ex.map(load, todo))

    def _worker(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> _Worker:
        w = self.workers.get(v.digest)
        if w is not None and w.alive() and w.loaded is not None:
            if not w.checked:
                w.checked = True
                self.imports = ws.check_imports([w.loaded.get("imports") or {}], f"the workload worker of {v.label}")
            return w
        if w is not None:
            w.kill()
        check_deadline(deadline, f"loading {v.label}")
        if self._spares is not None:
            w = self._load_spare(v, ws, deadline)
            if w is not None:
                return w
        with ws.materialize(v):
            w = _Worker(v, ws, self._log(v), self.device)
            reply = self._load(w, ws, self._load_request(ws), deadline)
        w.loaded, w.checked = reply, True
        self._loaded(reply)
        return w

    def _load(self, w: _Worker, ws: Workspace, req: dict, deadline: proc.Deadline) -> dict:
        """Register ``w`` as its version's worker, load it and check its imports; a worker that
        fails either is dropped."""
        self.workers[w.version.digest] = w
        try:
            reply = w.request(req, deadline.timeout(), f"loading and checking {w.version.label}")
            self.imports = ws.check_imports([reply.get("imports") or {}], f"the workload worker of {w.version.label}")
            return reply
        except LoopError:
            self.workers.pop(w.version.digest, None)
            w.kill()
            raise

    def _load_spare(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> _Worker | None:
        """``v``'s worker from a spare, its files as overrides; None when none is left or the
        kernel file was not read from the overrides (the worktree's copy then loads it)."""
        spare = self._spare()
        if spare is None:
            return None
        w = _Worker(v, ws, self._log(v), self.device, spare=spare)
        reply = self._load(w, ws, self._load_request(ws, v), deadline)
        if os.path.realpath(ws.root / ws.kernel_file) not in (reply.get("overrides_read") or []) and reply.get("ok"):
            self.workers.pop(v.digest, None)
            w.close()
            return None
        w.loaded, w.checked = reply, True
        self._loaded(reply)
        return w

    def _loaded(self, reply: dict) -> None:
        if reply.get("ok"):
            if self._configs is None:
                self._configs = list(reply["configs"])
            self.info.update(reply.get("info") or {})
            self.device_info = reply.get("device") or self.device_info
            # the first worker's autotune picks (the loop's baseline) are held by every later one (measure.tuning)
            made = (reply.get("tuning") or {}).get("made")
            if made and not self.tuning:
                self.tuning = dict(made)

    def verify(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> Verification:
        """The check the version's worker ran on load; a workload that cannot run here is a ``BackendError``, not a
        FAIL."""
        t0 = time.monotonic()
        w = self._worker(v, ws, deadline)
        reply = w.loaded or {}
        if not reply.get("ok"):
            err = reply.get("error", "the worker could not load the workload")
            if "cannot run here" in err or "no CUDA GPU" in err:
                raise BackendError(err)
            if reply.get("recordings"):
                raise BackendError(f"the recorded launches cannot be replayed: {err}",
                                   hint="record them again (the campaign's survey, or the loop's first bench run), "
                                        "or go on with --no-replay")
            return Verification(False, f"error: {err}", seconds=time.monotonic() - t0)
        checks = reply.get("checks", {})
        bad = {c: d for c, d in checks.items() if not d.get("passed")}
        if bad:
            summ = "; ".join(f"{c}: {d.get('summary', 'FAIL')}" for c, d in list(bad.items())[:3])
            return Verification(False, f"FAIL on {len(bad)} of {len(checks)} configurations: {summ}", checks,
                                seconds=time.monotonic() - t0, imports=self.imports)
        return Verification(True, f"PASS on {len(checks)} configurations{_tuning_note(reply.get('tuning'))}", checks,
                            seconds=time.monotonic() - t0, imports=self.imports)

    def measure(self, versions: Sequence[Version], ws: Workspace, deadline: proc.Deadline, rounds: int) -> Runs:
        """Time every version on every configuration, A B every round after one unrecorded lead-in (see the comment);
        wrong outputs of the timed runs are a ``CorrectnessFailure``."""
        workers = {v.label: self._worker(v, ws, deadline) for v in versions}
        for v in versions:
            rep = workers[v.label].loaded or {}
            if not rep.get("ok") or not rep.get("passed"):
                raise CandidateCrash(f"{v.label} did not load cleanly: {rep.get('error', 'check failed')}")
        out: Runs = {v.label: {} for v in versions}

        def one(v: Version, cfg: str) -> dict:
            check_deadline(deadline, f"measuring {v.label} on {cfg}")
            t0 = time.monotonic()
            rep = workers[v.label].request({"op": "measure", "config": cfg, "options": self.bench_options,
                                            "plan": dict(self.plans.get(cfg) or {}) or None}, deadline.timeout(), f"measuring {cfg}")
            self.requests.append((time.monotonic() - t0, float(rep.get("op_s") or 0.0)))
            if not rep.get("ok"):
                raise CandidateCrash(f"{v.label} on {cfg}: {rep.get('error')}")
            self._plan_from(cfg, rep.get("plan"))
            return rep

        # a GPU that idled (compiles, checks) runs at its boost clock and drops within a second under a
        # GEMM's power load: the baseline runs, unrecorded, for up to WARM_S first, so that no version's
        # first samples come from a cooler, faster GPU
        if time.monotonic() - self._busy > WARM_IDLE_S and self._configs:
            t0, n = time.monotonic(), 0
            while n < WARM_MAX_RUNS and time.monotonic() - t0 < WARM_S:
                one(versions[0], self._configs[n % len(self._configs)])
                n += 1
        # A B B A in a round: a linear drift (the clock settling under a power cap) cancels, and each version
        # has one measurement right after the other worker and one after itself (on the H200 the measurement
        # that follows the other process is 0.7-0.8 % slower, 20 ms of warm-up notwithstanding); every other
        # round B A A B, so that neither version is always the one that starts a round (A/A on an H100 GEMM:
        # the copy, always second, read 0.4-0.9 % faster in four sittings). Alone: A A, the cost of a pair.
        for r in range(rounds):
            first = list(versions) if self._rounds % 2 == 0 else list(reversed(versions))
            order = [*first, *reversed(first)]
            self._rounds += 1
            for cfg in self._configs or []:
                got: dict[str, list[RunStat]] = {}
                for v in order:
                    rep = one(v, cfg)
                    post = rep.get("post_check")
                    if post is not None and not post.get("passed"):
                        raise CorrectnessFailure(f"{v.label} on {cfg}: outputs of the timed runs are wrong: "
                                                 f"{post.get('summary')}")
                    got.setdefault(v.label, []).append(_run_stat(rep))
                for label, rs in got.items():
                    m = _merged(rs)
                    m.record = {**(m.record or {}), "went_first": order[0].label == label}
                    out[label].setdefault(cfg, []).append(m)
        self._busy = time.monotonic()
        return out

    def _plan_from(self, cfg: str, plan: dict | None) -> None:
        """The configuration's plan: the first reply's, its spin raised to any later reply's longer one."""
        if not isinstance(plan, dict):
            return
        held = self.plans.get(cfg)
        if held is None:
            self.plans[cfg] = dict(plan)
        elif float(plan.get("sleep_ms") or 0.0) > float(held.get("sleep_ms") or 0.0):
            held["sleep_ms"] = float(plan["sleep_ms"])

    def roofline(self, v: Version, latencies: Mapping[str, float]) -> dict[str, dict] | str:
        """The version's worker places its points (measuring the ceilings when asked), or why it could not."""
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
        """Keep the workers of ``versions``, close the others."""
        keep = {v.digest for v in versions}
        for d in list(self.workers):
            if d not in keep:
                self.workers.pop(d).close()

    def close(self) -> None:
        """Close every worker, spares included."""
        self.keep_spares(None, 0)
        for d in list(self.workers):
            self.workers.pop(d).close()

    def abort(self) -> None:
        """Kill every worker now (an interrupt: a hung worker must not get a polite 10 s to quit)."""
        self.keep_spares(None, 0)
        for d in list(self.workers):
            self.workers.pop(d).kill()
