"""Replay backend: command mode at workload speed.

At the baseline the user's ``--test-cmd`` runs once (observed: the capture's launch) and the
``--bench-cmd`` once, observed, recording each launch signature the suite times for replay
(``cutile_diag.replay``; that run is also the start in the suite's own numbers).  From then on a
version is checked and timed on those recordings by the long-lived workers of workload mode
(``WorkloadBackend`` over ``replay:<folder>``: recorded inputs restored and outputs poisoned before
each timed block, L2 flushed, CUDA graphs, interleaved rounds), its outputs compared with the
baseline's recorded ones by dtype tolerance.  The user's commands keep the last word:

* ``confirm_keep`` — the ``--test-cmd`` once before a step is kept (``loop.evaluate``); where the launches were
  recorded already and no capture needs the test command's launch (a campaign), the baseline is checked on the
  recordings alone and its test command waits for the first keep (run on the unchanged kernel only when the
  candidate fails it: a failure both share stops the loop);
* ``suite_bench`` — the ``--bench-cmd`` at the start (the recording run) and once at the end
  (``loop.runner``), so start and final are also in the suite's own numbers, and a replay that disagrees with the suite
  is reported.  Where the launches were recorded already (a campaign's survey) the start run waits for the end
  (``defers_suite_start``): it runs beside the final version, and not at all when no step was kept.

When the bench run recorded no executed launch of the kernel (or ``--no-replay``), it is the command
backend: every check and timed run is a run of the user's commands (the recording try cost one run).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import proc
from .base import Backend, Runs, Verification, Version, Workspace
from .command import CommandBackend
from ..errors import BackendError


class ReplayBackend(Backend):
    """Command mode at workload speed: the user's commands check the baseline and record its launches, then the
    recordings are checked and timed in long-lived workers (falling back to the commands when nothing was
    recorded)."""
    name = "replay"
    alternates = False
    observes = True             # the baseline's check records the launches (captures and recordings)
    prepares = True             # the recordings' workers load at once (the inner WorkloadBackend's)
    suite = True                # the user's bench command, at the start and the end (suite_bench)

    def __init__(self, cmd: CommandBackend, replay_dir: str | Path, *, kernel: str | None = None,
                 kernel_file: str | None = None, bench_options: Mapping[str, Any] | None = None,
                 device: int | None = None, log_dir: Path | None = None, inner: Backend | None = None):
        self.cmd = cmd
        self.replay_dir = Path(replay_dir)
        self.kernel, self.kernel_file = kernel, kernel_file
        self.bench_options = dict(bench_options or {})
        self.device = device
        self.log_dir = Path(log_dir) if log_dir else None
        self.inner = inner                      # measures the recordings: a WorkloadBackend, made once recorded
        self._injected = inner is not None
        self.fallback: str | None = None        # why the user's commands measure instead
        self.base_launches: list = []
        self.base_observed: dict = {}
        self._spares: tuple | None = None
        self._recorded = False                  # the baseline's check (which records) has run
        self.check_cost_s: float | None = None   # a replayed check (worker start + load), what a candidate's costs
        self._suite_start: tuple[str, dict] | None = None   # (digest, medians) of the recording bench run
        self._resumed = False                   # the baseline's check and recording happened in an earlier run
        self._bare: str | None = None           # host_untimed's answer, once the recordings measure
        self._base: Version | None = None       # the baseline, while its test command is deferred to the first keep

    @property
    def costly_runs(self) -> bool:
        """Checks and timed runs are processes of their own only when the recordings are not used."""
        return self.inner is None

    @property
    def replaying(self) -> bool:
        """The recordings measure (not the user's commands)."""
        return self.inner is not None

    def describe(self) -> dict:
        """The command backend's settings plus the replay folder, kernel and bench options."""
        return {**self.cmd.describe(), "backend": self.name, "replay_dir": str(self.replay_dir),
                "kernel": self.kernel, "kernel_file": self.kernel_file, "bench_options": self.bench_options,
                "device": self.device}

    def _active(self):
        return self.inner if self.inner is not None else self.cmd

    def configs(self) -> list[str] | None:
        """The configurations of whichever backend measures: the recordings', else the commands'."""
        return self._active().configs()

    def workload_info(self) -> dict[str, dict]:
        """The counts of whichever backend measures."""
        return self._active().workload_info()

    @property
    def roofline_off(self) -> str | None:
        """Why the measuring backend does not place the roofline, if it does not."""
        return self._active().roofline_off

    @property
    def requests(self) -> list:
        """The replay workers' timed requests (round-trip and in-worker seconds), where the runner's clock splits the
        timing's cost."""
        return self.inner.requests if self.inner is not None else []

    def host_untimed(self) -> str | None:
        """Where a recording of the kernel has no wrapper call, its bare launch replays the recorded grid and
        arguments: a change to the wrapper (a tile size, a grid) would time the same launch as before."""
        if self.fallback is not None:
            return None                         # the user's commands measure: they run the wrapper
        if self._bare is None:
            # read from the recordings, not from whether they measure yet: a resumed loop chooses its first step
            # before its first check starts the workers (a campaign's later passes measured a bare geglu backward's
            # BLOCK_SIZE that way); once recorded they do not change
            from ...replay.store import wrapper_verdict
            recs = self._recordings()
            if not recs:
                return None                     # not recorded yet (the baseline's bench run records)
            whys = [w for f, m in recs if (w := wrapper_verdict(f, m))]
            self._bare = (f"{len(whys)} of the kernel's recordings replay the bare launch ({whys[0]}), which would "
                          "time the recorded launch, not the changed wrapper") if whys else ""
        return self._bare or None

    def launch_block(self, ver: Verification, function: str):
        """The observed check's launch of ``function`` as a capture's launch block, as in command mode."""
        return CommandBackend.launch_block(ver, function)

    # -- the recordings ----------------------------------------------------------------------
    def _recordings(self) -> list[tuple[Path, dict]]:
        """(folder, manifest) of each executed recording of this kernel."""
        from ...replay.store import read_manifest, replay_folders
        out = []
        for f in replay_folders(self.replay_dir):
            try:
                m = read_manifest(f)
            except Exception:
                continue
            if (self.kernel is None or m["kernel"]["name"] == self.kernel) and not m.get("error") and m.get("executed"):
                out.append((f, m))
        return out

    def _start(self, ws: Workspace) -> None:
        """The measuring backend over this kernel's recordings, or the reason there is none."""
        if self.inner is not None or self.fallback is not None:
            return
        if not self._recordings():
            self.fallback = (f"the bench run recorded no executed launch of {self.kernel} for replay: "
                             "the user's commands measure every version")
            return
        from .workload import WorkloadBackend
        kw = {"kernel": self.kernel, "file": str(ws.root / (self.kernel_file or ws.kernel_file))}
        self.inner = WorkloadBackend(f"replay:{self.replay_dir}", kwargs=kw, bench_options=self.bench_options,
                                     device=self.device, log_dir=self.log_dir)
        if self._spares is not None:
            self.inner.keep_spares(*self._spares)

    def keep_spares(self, ws: Workspace, n: int) -> None:
        """Keep ``n`` spare workers warm, now if the recordings' backend exists, else once it is made."""
        self._spares = (ws, n)
        if self.inner is not None:
            self.inner.keep_spares(ws, n)

    def prepare(self, versions: Sequence[Version], ws: Workspace, deadline: proc.Deadline) -> None:
        """Load the versions' replay workers at once, when the recordings measure."""
        if self.inner is not None:
            self.inner.prepare(versions, ws, deadline)

    def resume(self, ledger) -> None:
        """A resumed loop whose baseline was checked by the test command, recorded and replayed in an earlier run
        (its ledger says so): the first check here is a replayed one, not the user's commands again (in a
        campaign on an H100 that repeat cost a resumed loop 40-60 s of its share), and the suite's start is the
        recorded one."""
        base = next((r for r in ledger.iterations if r.get("iteration") == 0), None)
        ver = (base or {}).get("verification") or {}
        # passed: True, or None for a simulated pass (nothing was checked, the ledger's convention)
        if ver.get("passed") is False or (ver.get("observed") or {}).get("replay") != str(self.replay_dir):
            return
        self._resumed = True
        start = next((r for r in ledger.of_type("suite") if r.get("when") == "start" and r.get("configs")), None)
        if start is not None:
            self._suite_start = (start["digest"], dict(start["configs"]))
        else:
            self.defers_suite_start = True      # its baseline deferred the start run (recorded by a survey)

    # -- the protocol ------------------------------------------------------------------------
    def verify(self, v: Version, ws: Workspace, deadline: proc.Deadline, *, observe: bool = False) -> Verification:
        """The baseline: the test command, observed, then one recording bench run, then its replayed check; later
        versions: the replayed check (or the test command when nothing was recorded)."""
        if not self._recorded and self._resumed and (self._injected or self._recordings()):
            self._recorded = True               # checked and recorded in the loop's earlier run
            if not self._injected:
                self._start(ws)
        if not self._recorded and not observe and self._recordings():
            # recorded already (a campaign's survey) and no capture wants the test command's launch: the baseline is
            # checked on the recordings, and the test command first runs before a step is kept (``confirm_keep``),
            # on the unchanged kernel too when it fails there (17-21 s of each H100 campaign baseline, paid by kernels
            # that then kept nothing)
            self._recorded, self._base, self.defers_suite_start = True, v, True
            rv = self._replayed_baseline(v, ws, deadline, None)
            if rv is not None:
                return rv
            # nothing replayable after all: the user's commands check, as before
            self._base, self._recorded, self.defers_suite_start = None, False, False
        if not self._recorded:
            self._recorded = True
            # the baseline: the user's test command, observed (its launch gives the capture); then the bench
            # command once, observed, recording each launch signature the suite times (the start in the
            # suite's own numbers); a campaign's survey recorded them already
            ver = self.cmd.verify(v, ws, deadline, observe=True)
            self.base_launches, self.base_observed = ver.launches, ver.observed
            if not ver.passed:
                return ver
            if self._recordings():
                # recorded already (a campaign's survey): the bench run would only give the start in the suite's
                # numbers, which the runner takes at the end, beside the final version and only if a step was kept
                # (13 s of each H100 campaign baseline, paid by kernels that then gained nothing)
                self.defers_suite_start = True
            else:
                self._suite_start = (v.digest, self._bench_recording(v, ws, deadline))
            rv = self._replayed_baseline(v, ws, deadline, ver)
            if rv is None:
                ver.observed = {**ver.observed, "replay": self.fallback}
                return ver
            return rv
        if self.inner is None:
            return self.cmd.verify(v, ws, deadline, observe=observe)
        rv = self.inner.verify(v, ws, deadline)
        if observe:
            # a candidate's capture compiles from the baseline's recorded launch (a replay records none)
            rv.launches, rv.observed = self.base_launches, self.base_observed
        return rv

    def _replayed_baseline(self, v: Version, ws: Workspace, deadline: proc.Deadline,
                           ver: Verification | None) -> Verification | None:
        """The baseline checked on the recordings after the test command's check ``ver`` (None: the test command
        runs before the first keep instead); None when the workers found nothing to replay."""
        if not self._injected:
            self._start(ws)
        if self.inner is None:
            return None
        rv = self.inner.verify(v, ws, deadline)
        self.check_cost_s = rv.seconds
        pre = ver or Verification(True, "", observed={"test_cmd": "deferred"})
        summary = f"{ver.summary}; replayed: {rv.summary}" if ver else \
            f"replayed: {rv.summary}; the test command runs before the first keep"
        return Verification(rv.passed, summary, rv.per_config, output=rv.output or pre.output,
                            seconds=pre.seconds + rv.seconds, imports=pre.imports, simulated=rv.simulated,
                            launches=pre.launches, observed={**pre.observed, "replay": str(self.replay_dir)})

    def _bench_recording(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> dict[str, float]:
        import tempfile
        record = not self._recordings()
        with tempfile.TemporaryDirectory(prefix="cutile-diag-bench-launches-") as tmp:
            self.cmd.replay_dir, self.cmd.bench_observe = (self.replay_dir if record else None), Path(tmp)
            try:
                runs = self.cmd.measure([v], ws, deadline, 1)[v.label]
            finally:
                self.cmd.replay_dir = self.cmd.bench_observe = None
        return {c: rs[0].median for c, rs in runs.items()}

    def measure(self, versions: Sequence[Version], ws: Workspace, deadline: proc.Deadline, rounds: int) -> Runs:
        """Time on the recordings, or with the bench command when there are none."""
        return self._active().measure(versions, ws, deadline, rounds)

    def roofline(self, v: Version, latencies: Mapping[str, float]) -> dict[str, dict] | str:
        """The measuring backend's roofline points."""
        return self._active().roofline(v, latencies)

    def confirm_keep(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> Verification | None:
        """The user's test command, once, before a step measured on the recordings is kept."""
        if self.inner is None:
            return None                 # the command backend's own check already was the test command
        ver = self.cmd.verify(v, ws, deadline)
        if self._base is not None:
            base, self._base = self._base, None
            if not ver.passed:
                # the baseline's test command was deferred: a failure the unchanged kernel shares is not the step's
                was = self.cmd.verify(base, ws, deadline)
                if not was.passed:
                    raise BackendError(f"the test command fails on the unchanged kernel too: {was.summary}",
                                    hint="fix the tests first; the loop checked the baseline on the recordings only")
        return ver

    def suite_bench(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> dict[str, float] | None:
        """The user's bench command, once: {configuration: median ms} in the suite's own numbers."""
        if self.inner is None:
            return None
        if self._suite_start is not None and self._suite_start[0] == v.digest:
            return self._suite_start[1]         # the baseline's bench run, the one that recorded
        runs = self.cmd.measure([v], ws, deadline, 1)[v.label]
        return {c: rs[0].median for c, rs in runs.items()}

    def suite_configs(self) -> dict[str, str]:
        """{recording: the test it was recorded from}: the suite's bench reports per test (node id)."""
        return {f.name: m["test"] for f, m in self._recordings() if m.get("test")}

    def tuning_report(self) -> dict:
        """The recordings' workers' autotune picks (none when the commands measure)."""
        return self.inner.tuning_report() if self.inner is not None else {}

    def retain(self, versions: Sequence[Version]) -> None:
        """Keep the workers of ``versions`` (the recordings' backend), drop the rest."""
        if self.inner is not None:
            self.inner.retain(versions)

    def close(self) -> None:
        """Close the recordings' backend, if one was made."""
        if self.inner is not None:
            self.inner.close()

    def abort(self) -> None:
        """Abort the recordings' backend (its workers killed), if one was made."""
        if self.inner is not None:
            self.inner.abort()
