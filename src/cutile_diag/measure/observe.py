"""Observe every ``ct.launch`` of a user's command: ``observe_command(["pytest", ...])``.

Parent side (``observe_command``): runs the command with ``_observer_site`` first on its
PYTHONPATH (a ``sitecustomize`` that chains to the user's own, see that file), in a process
group of its own, killed on timeout.  Each Python process of the command that imports
``cuda.tile`` appends its launches to ``<dir>/launches-<pid>.jsonl`` (``launches.write_jsonl``);
the parent reads them back as ``LaunchRecord`` s in launch order per process.  A command that
exits non-zero raises ``CommandFailedError`` with its exit code and stderr tail; nothing of
the run is kept.

Child side (``install``): ``cuda.tile.launch`` is replaced by a recorder that describes the
launch (kernel, grid, argument dtypes/shapes/strides, ``launches.describe_launch``) and, when
kernels execute, brackets it with two CUDA events on the launch's stream.  The events are
read lazily: a launch only *queries* the events of earlier launches (no synchronisation);
an event is waited for only when more than ``MAX_PENDING`` launches are unresolved, and the
rest at exit.

Overhead and what the events measure.  Per launch: describing the arguments, a stream query
and two event records — a few µs of host time, no device synchronisation.  A start event
recorded on an *idle* stream fires at once, before the host has finished enqueuing the
kernel (cuTile's launch path is tens of µs of Python), so the elapsed time would include
that gap.  On an idle stream the recorder therefore queues a short GPU spin
(``torch.cuda._sleep``, ``CUTILE_DIAG_LAUNCH_PAD_US``, default 50 µs, 0 = off) before the
start event: the kernel is queued while the GPU spins, and the events bracket the kernel
alone.  The program pays for it: that launch starts up to 50 µs later, and a profiler that
sums *all* kernels (TileGym's CUPTI timer) counts the spin too.  A launch whose enqueue took
longer than the spin is marked ``extra["enqueue_gap"]`` (its events hold the idle GPU waiting for
the host: ``roofline.observed`` leaves it out of the median, or takes the host time past the spin
off where every launch has a gap).  Launches inside CUDA-graph capture
are recorded without times (``extra["graph_capture"]``; replays do not pass through
``ct.launch``).  The first launch of a kernel at a new signature contains the JIT compile
(the start event fires before it); it is marked ``extra["first"]`` and ``roofline.observed``
leaves it out of the medians.

Under pytest each record names the test that launched it (``extra["test"]``, from
``PYTEST_CURRENT_TEST``), and a process writes its records out whenever the test changes, so
a run killed later keeps every finished test's launches (the campaign's incremental survey).

``CUTILE_DIAG_LAUNCH_EXECUTE=0`` records without executing anything (no GPU needed: the
usual ``torch.cuda`` stream/SM queries answer on a CPU, see ``launches.cpu_cuda``).
"""
from __future__ import annotations

import atexit
import collections
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..errors import CutileDiagError, UsageError
from ..procs import die_with_parent, wait_or_kill
from ..capture.launches import LaunchRecord, describe_launch, read_jsonl, write_jsonl
from ..output import prog
from ..capture.launches import cpu_cuda
from ..replay.record import LaunchRecorder
from ..replay.store import ENV_DIR as REPLAY_ENV_DIR

SITE_DIR = Path(__file__).resolve().parent / "_observer_site"
ENV_DIR = "CUTILE_DIAG_LAUNCH_DIR"
ENV_EXECUTE = "CUTILE_DIAG_LAUNCH_EXECUTE"
ENV_SRC = "CUTILE_DIAG_OBSERVER_SRC"
ENV_PAD = "CUTILE_DIAG_LAUNCH_PAD_US"
DEFAULT_PAD_US = 50.0        # GPU spin ahead of a launch on an idle stream (see _Recorder._pad)
_SPIN_CYCLES_PER_US = 2000   # torch.cuda._sleep counts SM clocks: ~2 GHz on Hopper/Blackwell
MAX_PENDING = 1024           # unresolved timed launches before the oldest is waited for
FLUSH_EVERY = 256            # resolved records buffered before an append to the file
STDOUT_TAIL_LINES = 400
OBSERVER_NOTE = "cutile-diag: launch observer"      # how the child's own warnings start (stderr)


class CommandFailedError(CutileDiagError):
    """The observed command exited non-zero or timed out (not bad input: exit 1); ``returncode``
    (None: timed out) and its last output lines say why."""
    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, returncode: int | None = None,
                 tail: list[str] | None = None):
        super().__init__(message, hint=hint)
        self.returncode, self.tail = returncode, list(tail or [])


class NoLaunchesError(CutileDiagError):
    """The observed command launched no cuTile kernel."""
    exit_code = 1


@dataclass
class ObservedRun:
    """What one observed command did: its exit, its wall time, the launches it recorded, and the tails of its output.
    What one observed command did: its exit, its wall time, the launches it recorded, and the tails of its output."""
    command: list[str]
    returncode: int
    seconds: float
    records: list[LaunchRecord] = field(default_factory=list)
    executed: bool = True
    stderr_tail: str = ""
    warnings: list[str] = field(default_factory=list)
    stdout_tail: list[str] = field(default_factory=list)   # the command's last STDOUT_TAIL_LINES lines


# ---------------------------------------------------------------------------------------
# parent side

def observer_env(out_dir: Path, *, execute: bool = True, pad_us: float | None = None,
                 base: dict | None = None, replay_dir: Path | None = None) -> dict:
    """The child's environment: this observer's site first on PYTHONPATH; ``replay_dir``: each launch
    signature's first launch is also recorded for replay there (``replay.record``)."""
    env = dict(os.environ if base is None else base)
    if replay_dir is not None:
        env[REPLAY_ENV_DIR] = str(replay_dir)
    if pad_us is not None:
        env[ENV_PAD] = str(pad_us)
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env[ENV_DIR] = str(out_dir)
    env[ENV_EXECUTE] = "1" if execute else "0"
    env[ENV_SRC] = str(Path(__file__).resolve().parents[2])      # the folder holding cutile_diag
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def read_records(rec_dir: Path) -> tuple[list[LaunchRecord], int]:
    """What the observed processes wrote to ``rec_dir``: their launches (in launch order per
    process) and how many processes imported ``cuda.tile``."""
    records: list[LaunchRecord] = []
    for f in sorted(Path(rec_dir).glob("launches-*.jsonl")):
        records.extend(read_jsonl(f))
    return records, len(list(Path(rec_dir).glob("imported-*")))


def _tail_lines(path: Path, n: int = 8) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [ln.rstrip() for ln in lines if ln.strip()][-n:]


def observe_command(command: list[str], *, execute: bool = True, timeout: float | None = None,
                    pad_us: float | None = None, echo: Callable[[str], None] | None = None,
                    on_step: Callable[[str], None] | None = None, record_dir: Path | None = None,
                    poll: Callable[[Path], None] | None = None, cwd: Path | None = None,
                    replay_dir: Path | None = None) -> ObservedRun:
    """Run ``command`` once with every ``ct.launch`` recorded; raises CommandFailedError /
    NoLaunchesError (exit 1) or UsageError (the command cannot be started).

    ``record_dir``: the children append their launches there as they happen (per test under
    pytest) and the files stay, also when the command fails or this process is killed;
    ``ObservedRun.records`` then holds every record in the folder.  ``poll(record_dir)`` is
    called every second while the command runs (progress).  ``replay_dir``: record each launch
    signature's first launch for replay there (``cutile_diag.replay``), as it happens."""
    if not command:
        raise UsageError("no command given after '--'", hint=f"e.g. {prog()} roofline -- python script.py")
    with tempfile.TemporaryDirectory(prefix="cutile-diag-launches-") as tmp:
        work = Path(tmp)
        rec_dir = Path(record_dir) if record_dir is not None else work / "records"
        rec_dir.mkdir(parents=True, exist_ok=True)
        err_log = work / "stderr.txt"
        env = observer_env(rec_dir, execute=execute, pad_us=pad_us, replay_dir=replay_dir)
        if on_step:
            on_step(f"running {' '.join(command)[:60]}")
        start = time.monotonic()
        try:
            proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, start_new_session=True, text=True,
                                    errors="replace", bufsize=1, cwd=cwd, preexec_fn=die_with_parent)
        except FileNotFoundError:
            raise UsageError(f"command not found: {command[0]}") from None
        except PermissionError:
            raise UsageError(f"command not executable: {command[0]}") from None

        out_tail: collections.deque[str] = collections.deque(maxlen=STDOUT_TAIL_LINES)

        def pump(stream, log):
            with open(log, "w") if log else open(os.devnull, "w") as f:
                for line in stream:
                    f.write(line)
                    if log is None:
                        out_tail.append(line.rstrip("\n"))
                    if echo:
                        echo(line.rstrip("\n"))

        threads = [threading.Thread(target=pump, args=(proc.stdout, None), daemon=True),
                   threading.Thread(target=pump, args=(proc.stderr, err_log), daemon=True)]
        if poll is not None:
            def poller():
                while proc.poll() is None:
                    poll(rec_dir)
                    time.sleep(1.0)
            threads.append(threading.Thread(target=poller, daemon=True))
        for t in threads:
            t.start()
        timed_out = wait_or_kill(proc, timeout)
        for t in threads:
            t.join(timeout=5)
        secs = time.monotonic() - start
        tail = _tail_lines(err_log)
        kept = f"the launches so far stay in {rec_dir}" if record_dir is not None else "nothing written"
        if timed_out:
            raise CommandFailedError(f"command timed out after {timeout:g} s and was killed; {kept}"
                                     + (f"; stderr tail: {' | '.join(tail[-3:])[:600]}" if tail else ""), tail=tail)
        if proc.returncode != 0:
            # its last lines, wherever it wrote them (pytest reports a usage error on stdout or stderr)
            last = tail + [f"(stdout) {ln}" for ln in [x for x in out_tail if x.strip()][-3:]]
            raise CommandFailedError(f"command exited with {proc.returncode}; {kept}; last lines: "
                                     + (" | ".join(last)[-900:] if last else "(no output)"),
                                     returncode=proc.returncode, tail=last)
        records, importers = read_records(rec_dir)
        warnings = []
        notes = [ln for ln in _tail_lines(err_log, 10_000) if ln.startswith(OBSERVER_NOTE)]
        if notes:
            warnings.append(notes[-1])
    run = ObservedRun(list(command), proc.returncode, secs, records, execute, "\n".join(tail), warnings,
                      list(out_tail))
    if not records:
        if warnings:
            why = f"; {warnings[-1]}"
        elif importers:
            why = f"; {importers} process(es) imported cuda.tile but called ct.launch never"
        else:
            why = "; no Python process of it imported cuda.tile (one started with -S or -I skips the observer)"
        raise NoLaunchesError(f"the command launched no cuTile kernel (exit 0 after {secs:.1f} s{why}): "
                              "nothing to place on the roofline",
                              hint="check the selection (e.g. pytest -k) runs cuTile code paths")
    return run


# ---------------------------------------------------------------------------------------
# child side

class _Recorder:
    def __init__(self, out_dir: str, execute: bool, pad_us: float = 0.0):
        self.out_dir = out_dir
        self.execute = execute
        self.pad_us = pad_us
        self.pending: list[tuple[LaunchRecord, object, object]] = []   # (record, start, end) in launch order
        self.done: list[LaunchRecord] = []
        self.seen: set = set()
        self.seq = 0
        self.free_events: list = []
        self.streams: dict[int, object] = {}
        self.timing_error: str | None = None
        self.test: str | None = None          # the pytest test running at the last launch
        self.sm_count: int | None = 0         # 0: not asked yet; None: unknown
        self.lock = threading.Lock()
        self.replay = LaunchRecorder.from_env()  # $CUTILE_DIAG_REPLAY_DIR: each signature's first launch

    def _sms(self) -> int | None:
        """The SM count of the device the process launches on (asked once; a capture taken from
        the recorded launch judges its grid against it)."""
        if self.sm_count == 0:
            try:
                import torch
                self.sm_count = int(torch.cuda.get_device_properties(torch.cuda.current_device())
                                    .multi_processor_count)
            except Exception:
                self.sm_count = None
        return self.sm_count

    # -- events --------------------------------------------------------------------------
    def _capturing(self) -> bool:
        import torch
        return bool(torch.cuda.is_current_stream_capturing())

    def _pad(self, ts) -> str:
        """On an idle stream the start event would fire at once and the host's enqueue of the kernel
        (tens of µs of Python) would be timed with it: queue a short GPU spin first, so the kernel is
        queued before the spin ends.  A busy stream needs none.  Returns padded | busy | off."""
        if self.pad_us <= 0:
            return "off"
        if not ts.query():
            return "busy"
        import torch
        with torch.cuda.stream(ts):
            torch.cuda._sleep(int(self.pad_us * _SPIN_CYCLES_PER_US))
        return "padded"

    def _torch_stream(self, stream):
        import torch
        if isinstance(stream, torch.cuda.Stream):
            return stream
        handle = getattr(stream, "cuda_stream", stream)
        if handle is None:
            return torch.cuda.current_stream()
        handle = int(handle)
        s = self.streams.get(handle)
        if s is None:
            s = self.streams[handle] = torch.cuda.ExternalStream(handle)
        return s

    def _event(self):
        if self.free_events:
            return self.free_events.pop()
        import torch
        return torch.cuda.Event(enable_timing=True)

    def _resolve(self, block_oldest: bool = False) -> None:
        while self.pending:
            rec, start, end = self.pending[0]
            if block_oldest:
                end.synchronize()
                block_oldest = False
            elif not end.query():
                break
            self.pending.pop(0)
            try:
                ms = float(start.elapsed_time(end))
            except Exception:
                ms = None
            self.done.append(replace(rec, device_ms=ms))
            self.free_events += [start, end]

    def _flush(self) -> None:
        if self.done:
            recs, self.done = self.done, []
            write_jsonl(recs, os.path.join(self.out_dir, f"launches-{os.getpid()}.jsonl"))

    # -- the replacement launch -------------------------------------------------------------
    def launch(self, original, stream, grid, kernel, kernel_args, **kw):
        with self.lock:
            try:
                rec = describe_launch(kernel, grid, kernel_args)
            except Exception as e:           # an odd argument must not break the user's program
                rec = LaunchRecord(getattr(kernel, "__name__", type(kernel).__name__), None, None,
                                   (), (), extra={"describe_error": f"{type(e).__name__}: {e}"})
            self.seq += 1
            key = rec.shape_key()
            first = key not in self.seen
            self.seen.add(key)
            rec = replace(rec, extra={**rec.extra, "pid": os.getpid(), "seq": self.seq, "first": first})
            if self._sms() is not None:
                rec.extra["sm_count"] = self.sm_count
            test = _current_test()
            if test:
                rec.extra["test"] = test
            if test != self.test:
                # a new test: what the last one launched goes to the file now, so a run killed later keeps it
                self.test = test
                self._resolve()
                self._flush()
            pend = self.replay.before(kernel, grid, kernel_args, rec) if self.replay is not None else None
            if not self.execute:
                self.done.append(rec)
                if len(self.done) >= FLUSH_EVERY:
                    self._flush()
                if pend is not None:
                    self.replay.after(pend, executed=False)
                return None
            events = None
            if self.timing_error is None:
                try:
                    ts = self._torch_stream(stream)
                    if self._capturing():
                        # inside CUDA-graph capture: no event may be queried; replays are not launches
                        rec = replace(rec, extra={**rec.extra, "graph_capture": True})
                    else:
                        padded = self._pad(ts)
                        events = (self._event(), self._event(), ts, padded)
                        events[0].record(ts)
                except Exception as e:
                    self.timing_error = f"{type(e).__name__}: {e}"
                    events = None
        t0 = time.perf_counter()
        result = original(stream, grid, kernel, kernel_args, **kw)
        host_us = (time.perf_counter() - t0) * 1e6
        with self.lock:
            if events is not None:
                events[1].record(events[2])
                extra = {**rec.extra, "host_us": round(host_us, 1)}
                if events[3] == "padded":
                    extra["padded_us"] = self.pad_us
                    if host_us > self.pad_us and not first:   # the spin ran out before the kernel was queued
                        extra["enqueue_gap"] = True              # (a first launch compiles: left out anyway)
                elif events[3] == "busy":
                    extra["stream_busy"] = True
                self.pending.append((replace(rec, extra=extra), events[0], events[1]))
                self._resolve(block_oldest=len(self.pending) > MAX_PENDING)
            else:
                self.done.append(replace(rec, extra={**rec.extra, "timing_error": self.timing_error})
                                 if self.timing_error else rec)
            if len(self.done) >= FLUSH_EVERY:
                self._flush()
        if pend is not None:          # once per signature: it synchronises, after the end event is queued
            self.replay.after(pend, executed=True)
        return result

    def finish(self) -> None:
        with self.lock:
            try:
                while self.pending:            # launches may sit on several streams: wait for each in order
                    self._resolve(block_oldest=True)
            except Exception:
                self.done += [r for r, _s, _e in self.pending]
                self.pending = []
            self._flush()


def _current_test() -> str | None:
    """The pytest node id running now (pytest sets PYTEST_CURRENT_TEST to "<nodeid> (<phase>)")."""
    cur = os.environ.get("PYTEST_CURRENT_TEST")
    return cur.rsplit(" (", 1)[0] if cur else None


_RECORDER: _Recorder | None = None


def install(ct_module=None) -> _Recorder | None:
    """Replace ``cuda.tile.launch`` in this process (called by ``_observer_site`` when cuda.tile
    is imported); records go to ``$CUTILE_DIAG_LAUNCH_DIR``.  Idempotent."""
    global _RECORDER
    out_dir = os.environ.get(ENV_DIR)
    if not out_dir or _RECORDER is not None:
        return _RECORDER
    if ct_module is None:
        import cuda.tile as ct_module
    execute = os.environ.get(ENV_EXECUTE, "1") != "0"
    try:
        pad_us = float(os.environ.get(ENV_PAD, DEFAULT_PAD_US))
    except ValueError:
        pad_us = DEFAULT_PAD_US
    rec = _Recorder(out_dir, execute, pad_us)
    try:                        # lets the parent tell "imported cuda.tile, launched nothing" from "never imported"
        open(os.path.join(out_dir, f"imported-{os.getpid()}"), "w").close()
    except OSError:
        pass
    original = ct_module.launch

    def launch(stream, grid, kernel, kernel_args, /, **kw):
        return rec.launch(original, stream, grid, kernel, kernel_args, **kw)

    launch.__doc__ = getattr(original, "__doc__", None)
    launch.__wrapped__ = original
    ct_module.launch = launch
    if not execute:
        _cpu_stand_in()
    atexit.register(rec.finish)
    if hasattr(os, "register_at_fork"):      # a forked worker starts with no inherited pending events
        os.register_at_fork(after_in_child=lambda: _forked(rec))
    _RECORDER = rec
    return rec


def _forked(rec: _Recorder) -> None:
    rec.pending, rec.done = [], []
    rec.lock = threading.Lock()


def _cpu_stand_in() -> None:
    """Records without executing: let wrappers ask torch.cuda for streams and SM counts on a CPU."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    cm = cpu_cuda()
    cm.__enter__()             # for the life of the process
    sys.modules[__name__].__dict__.setdefault("_CPU_CM", cm)
