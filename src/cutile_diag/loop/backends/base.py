"""The backends' shared model: a ``Version`` of the loop-controlled files, the ``Workspace``
(the loop's worktree) it is materialised in, a ``Verification``, the ``Runs`` of a measurement,
and the ``Backend`` protocol every measurement mode implements (``verify``, ``measure``,
``roofline``, ``retain``)."""
from __future__ import annotations

import abc
import contextlib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import imports, proc
from ..errors import BackendError, LoopError, MeasurementTimeout
from ..stats import RunStat


class CorrectnessFailure(LoopError):
    """The outputs of the timed runs no longer match the reference."""


# ---------------------------------------------------------------------------------------
# versions and the work tree

@dataclass(frozen=True)
class Version:
    """One version of the loop-controlled files: their texts, the commit that holds them, and the transforms applied
    since the baseline."""
    label: str                                  # "baseline", "iter-3", "iter-3/b" (sweep point)
    files: Mapping[str, str]                    # repo-relative path -> text
    commit: str | None = None
    applied: tuple[str, ...] = ()               # transform keys applied since iteration 0

    @property
    def digest(self) -> str:
        """SHA-256 over the paths and texts: versions with the same files share it (workers and captures are keyed by
        it)."""
        h = hashlib.sha256()
        for p in sorted(self.files):
            h.update(p.encode() + b"\0" + self.files[p].encode() + b"\0")
        return h.hexdigest()

    def with_label(self, label: str) -> "Version":
        """The same version under another label."""
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
        """The texts of the loop-controlled files in the worktree now (files that do not exist are left out)."""
        return {p: (self.root / p).read_text() for p in self.files if (self.root / p).exists()}

    def write(self, files: Mapping[str, str]) -> None:
        """Write ``files`` into the worktree, touching only those whose text differs."""
        for p, text in files.items():
            dst = self.root / p
            if not dst.exists() or dst.read_text() != text:
                dst.write_text(text)

    @contextlib.contextmanager
    def materialize(self, v: Version):
        """Put ``v``'s files in the worktree for the block, then the previous texts back."""
        saved = self.current()
        changed = saved != dict(v.files)
        if changed:
            self.write(v.files)
        try:
            yield
        finally:
            if changed:
                self.write(saved)

    def env(self, v: Version | None, *, audit: Path | None = None) -> dict[str, str]:
        """A child's environment additions: its own bytecode cache per version and, for a loop
        worktree, the worktree's code first on PYTHONPATH (``audit``: where children report imports).
        ``v`` None: children that get every version's files as overrides, never from the disk
        (``source.overrides.install``), share one cache — and so can be started ahead."""
        cache = self.state_dir / "pycache" / (v.digest[:16] if v is not None else "shared")
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
    """A version's correctness check: whether the loop may go on with it, per configuration, the output, where its
    code was imported from and, when observed, the launches it made."""
    passed: bool                 # the loop may go on with this version
    summary: str
    per_config: dict[str, Any] = field(default_factory=dict)
    output: str = ""
    seconds: float = 0.0
    imports: dict = field(default_factory=dict)     # where the checked code was imported from
    simulated: bool = False      # nothing ran: a pass is "not checked", never PASS
    launches: list = field(default_factory=list)    # LaunchRecords of an observed check (command backend)
    observed: dict = field(default_factory=dict)    # their summary (the ledger's): count, kernels, importers

    @property
    def correctness(self) -> str:
        """The table's and the record's verdict."""
        from ...ledger import SIMULATED
        return "FAIL" if not self.passed else SIMULATED if self.simulated else "PASS"

    @property
    def checked(self) -> bool | None:
        """The ledger's ``passed``: None when nothing was checked (a simulated pass)."""
        return None if self.simulated and self.passed else self.passed

    def to_json(self) -> dict:
        """The ledger's form (``passed`` None for a simulated pass, the output's last 2000 characters)."""
        return {"passed": self.checked, "summary": self.summary, "per_config": self.per_config,
                "output": self.output[-2000:], "seconds": round(self.seconds, 3), "imports": self.imports,
                **({"simulated": True} if self.simulated else {}), **({"observed": self.observed} if self.observed else {})}


Runs = dict[str, dict[str, list[RunStat]]]      # version label -> config -> one RunStat per round


class Backend(abc.ABC):
    """What the loop asks of a measurement mode (workload, command, replay, simulated).

    The abstract methods are required.  The optional parts below them have defaults that mean
    "not supported here": the loop calls them unconditionally, and a backend overrides what it has
    (like Kernel Tuner's observers)."""
    name: str
    alternates: bool        # rounds go A B, B A, ... (round_order); else A B every round

    observes = False        # verify(observe=True) records the check run's launches (the runner's captures)
    costly_runs = False     # a check or a timed run is a process of its own: the evaluation screens less
    check_cost_s: float | None = None   # what one check costs, where known better than the ledger's guess
    roofline_off: str | None = None     # why the roofline is not measured here (None: it is)
    uses_preset = False     # the device's ceilings come from a preset, not this GPU
    requests: list | None = None        # (round trip s, worker s) per timing request, for the step's costs
    device: int | None = None           # the GPU index it measures on (None: the current one)
    prepares = False        # prepare() loads several versions at once: a sweep's checks overlap
    suite = False           # suite_bench() runs the user's own bench command (replay)
    defers_suite_start = False   # the suite's start run waits for the end (beside the final version, if one is kept)
    own_ceiling = False     # ceiling() answers for the device; else the loop measures it in a child

    def prepare(self, versions: Sequence[Version], ws: Workspace, deadline: proc.Deadline) -> None:
        """Where ``prepares``: start and load the versions' processes at once; else nothing to do."""

    def keep_spares(self, ws: Workspace, n: int) -> None:
        """Keep ``n`` worker processes started ahead for a sweep; a backend without workers keeps none."""

    def tuning_report(self) -> dict:
        """Autotuning held equal between the versions' processes (``measure.tuning``): the first worker's picks,
        what later ones held and searched again; empty where nothing autotuned or there are no workers."""
        return {}

    def resume(self, ledger: Any) -> None:
        """A loop resumed from its ledger in a new process: pick up what its earlier run left (the replay backend:
        its baseline's check, recording and bench run); by default there is nothing to pick up."""

    def confirm_keep(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> Verification | None:
        """Re-check ``v`` with the user's test command before it is kept; None: nothing to confirm
        (the backend's own check is that command, or there is none)."""
        return None

    def suite_bench(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> dict[str, float] | None:
        """Where ``suite``: the user's bench command once, {configuration: median ms}; None: no numbers."""
        return None

    def suite_configs(self) -> dict[str, str]:
        """Where ``suite``: {configuration this backend times: the bench command's configuration it stands for}."""
        return {}

    def ceiling(self, measure: bool = False) -> dict | str | None:
        """Where ``own_ceiling``: the device's ceilings JSON, None when none is cached (``measure``
        then measures it), or why there is none."""
        return "the backend has no ceiling of its own"

    def host_untimed(self) -> str | None:
        """Why a change outside the kernel (its launch wrapper: grid, tile size passed as an argument) would not be
        timed, or None: it is (by default every run goes through the user's code)."""
        return None

    def launch_block(self, ver: Verification, function: str) -> tuple[dict | None, str]:
        """Where ``observes``: the launch of ``function`` the observed check ``ver`` recorded, as a
        capture manifest's ``launch`` block, or (None, why not)."""
        return None, f"the {self.name} backend records no launches"

    @abc.abstractmethod
    def describe(self) -> dict:
        """The backend's settings as JSON, for the ledger's setup record."""

    @abc.abstractmethod
    def configs(self) -> list[str] | None:
        """The configuration names measured; None: discovered by the first measurement."""

    @abc.abstractmethod
    def workload_info(self) -> dict[str, dict]:
        """Per configuration ``{flops, bytes, unit}`` where known (the roofline's and the report's work)."""

    @abc.abstractmethod
    def verify(self, v: Version, ws: Workspace, deadline: proc.Deadline) -> Verification:
        """Check ``v``'s outputs against the reference, within the deadline."""

    @abc.abstractmethod
    def measure(self, versions: Sequence[Version], ws: Workspace, deadline: proc.Deadline,
                rounds: int) -> Runs:
        """Time ``versions`` interleaved over ``rounds`` rounds: per version label and configuration,
        one RunStat a round.  Raises MeasurementTimeout when the deadline runs out."""

    @abc.abstractmethod
    def roofline(self, v: Version, latencies: Mapping[str, float]) -> dict[str, dict] | str:
        """``v``'s roofline point per configuration at the measured ``latencies`` (ms), or why not."""

    @abc.abstractmethod
    def retain(self, versions: Sequence[Version]) -> None:
        """Keep what ``versions`` need (worker processes, inputs) and drop the rest."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every process and file the backend holds."""

    def abort(self) -> None:
        """Release after an error or an interrupt; a backend with processes that may hang kills them."""
        self.close()


@contextlib.contextmanager
def closing(backend: Backend):
    """``close()`` after the block; on an error or an interrupt ``abort()`` (a hung worker must
    not get a polite quit)."""
    try:
        yield backend
    except BaseException:
        backend.abort()
        raise
    backend.close()


def round_order(versions: Sequence[Version], r: int) -> list[Version]:
    """A B, then B A, ...: alternating the order cancels a linear drift (a run of the user's
    command per measurement; worker processes use another order, see WorkloadBackend.measure)."""
    return list(versions) if r % 2 == 0 else list(reversed(versions))


def check_deadline(deadline: proc.Deadline, what: str) -> None:
    """Raise ``MeasurementTimeout`` when the iteration's deadline has passed, naming ``what`` did not start."""
    if deadline.expired():
        raise MeasurementTimeout(f"the iteration's time budget ({deadline.budget_s:g} s) ran out before {what}")
