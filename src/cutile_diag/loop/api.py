"""The loop's entry points for the CLI (and any other caller): one typed request in, typed
results out.  ``commands/optimize.py`` and ``commands/loop.py`` only turn flags into these
requests and render what comes back.

    optimize(OptimizeRequest(...), echo=...) -> LoopResult     # a new loop, or --resume
    plan(OptimizeRequest(...)) -> Plan                         # locate + diagnose, nothing changes
    open_loop(LoopRef(kernel, out)) -> (Session, Ledger)       # an existing loop
    next_step / record / status / recover / clean (LoopRef, ...)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import CutileDiagError, UsageError
from . import worktree as worktree_mod
from .errors import LoopError
from .decide import AT_ROOF
from ..output import prog

Echo = Callable[[str], None] | None


@dataclass
class Measurement:
    """How the loop verifies and measures: one of a workload, user commands, or a simulation."""
    workload: str | None = None
    workload_args: list[str] = field(default_factory=list)    # KEY=VALUE
    test_cmd: str | None = None
    bench_cmd: str | None = None
    framework: str = "cutile"
    direction: str = "forward"
    simulate: str | None = None                                # a SimSpec JSON file
    configs: list[str] | None = None
    rep_ms: float | None = None
    warmup_ms: float | None = None
    batch: bool = True                                         # CUDA-graph batches for short kernels
    device: int | None = None
    flops: list[str] = field(default_factory=list)            # CONFIG=N (command backend)
    bytes: list[str] = field(default_factory=list)
    unit: str | None = None
    roof_device: str | None = None
    replay: bool = True                                        # command mode on recorded launches (--no-replay)
    replay_dir: str | None = None                              # recordings made already (a campaign's survey)

    def counts(self) -> dict:
        """The ``--flops`` / ``--bytes`` / ``--unit`` / ``--roof-device`` flags as the command backend's counts."""
        from .factory import counts_spec
        return counts_spec(self.flops, self.bytes, self.unit, self.roof_device)


@dataclass
class LoopOverrides:
    """The ``LoopOptions`` fields a caller sets (the CLI's loop flags); None: unset, so a new loop
    takes the default and ``--resume`` / ``loop record`` keep the stored value.  Validated where
    they meet the stored options, in ``LoopOptions`` (one place for ``--budget`` and the rest)."""
    max_iterations: int | None = None
    iteration_budget_s: float | None = None                    # --budget
    rounds: int | None = None
    max_sweep: int | None = None
    lookahead: float | None = None
    beam: int | None = None
    keep_going: bool | None = None                             # --continue (this invocation only)
    until_roof: float | None = None
    time_limit_s: float | None = None                          # --time-limit (this invocation only)
    yield_flat: bool | None = None                             # a campaign's: stop when no move is expected to gain
    capture: bool | None = None                                # False: --no-capture
    archs: list[str] | None = None
    capture_args: list[str] | None = None
    capture_workload: str | None = None
    only: list[str] | None = None
    skip: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields set, as the ledger and a campaign's state store them."""
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> "LoopOverrides":
        """The overrides from their stored JSON (unknown keys dropped)."""
        return cls(**{k: v for k, v in (d or {}).items() if k in cls.__dataclass_fields__})

    def apply(self, base: dict | None = None):
        """``LoopOptions``: the stored ``base`` (a loop's options) with these set over it."""
        from .runner import LoopOptions
        return LoopOptions.from_json(base, **self.to_json())


@dataclass
class OptimizeRequest:
    """The ``optimize`` command's request: the kernel, how to measure, the loop's overrides, and a new loop's branch
    and folder (or ``resume``)."""
    kernel: str | None                                         # FILE.py::KERNEL (optional with resume)
    measurement: Measurement = field(default_factory=Measurement)
    options: LoopOverrides = field(default_factory=LoopOverrides)
    resume: bool = False
    out: str | None = None
    branch: str | None = None
    wrappers: list[str] = field(default_factory=list)
    baseline_only: bool = False                                # measure the baseline (if none yet), then stop
    branch_prefix: str | None = None                           # a new loop's branch: PREFIX-<kernel>-<date>


@dataclass
class LoopRef:
    """Names an existing loop: a kernel reference (in the checkout or the loop's worktree), an
    --out state folder, or neither (the loop of the current directory)."""
    kernel: str | None = None
    out: str | None = None


@dataclass
class Plan:
    """What ``optimize --plan`` shows: the kernel's location, its capture and the loop's diagnosis, nothing run."""
    location: dict
    capture: dict | None
    diagnosis: Any                                             # LoopDiagnosis

    def to_json(self) -> dict:
        """The plan as JSON."""
        return {"location": self.location, "capture": self.capture, "diagnosis": self.diagnosis.to_json()}


def optimize(req: OptimizeRequest, *, echo: Echo = None):
    """Run the loop: a new one (branch + worktree + baseline), or ``resume`` an existing one."""
    from .backends import closing
    from .factory import backend_spec, check_commands, make_backend, resumed_backend
    from .runner import Runner
    from .session import find_state_dir, load_session
    from .setup import check_resume, create_session, discard_session
    from .spares import wanted
    say = echo or (lambda _s: None)
    m = req.measurement
    wanted(0)                                   # a bad CUTILE_DIAG_SPARES: refused before anything runs
    if req.resume:
        state = find_state_dir(req.kernel, req.out)
        s, led = load_session(state)
        opts = req.options.apply(s.options)
        if s.options.get("keep_going") and not opts.keep_going:
            say("note: --continue applied to the earlier run only; give it again to go on past small steps")
        # new --test-cmd/--bench-cmd (a fix after a failed baseline) replace the stored ones, on the record
        new = resumed_backend(s.backend, workload=m.workload, simulate=m.simulate, test_cmd=m.test_cmd,
                              bench_cmd=m.bench_cmd, counts=m.counts())
        if new is not None:
            check_commands(new, s.root)
        done = check_resume(s, led)
        if opts.to_json() != s.options:
            led.append({"type": "options", "options": opts.to_json()})
        if new is not None:
            led.append({"type": "backend", "backend": new, "reason": "given again on --resume"})
            s.backend = new
            done.append("measurement commands replaced (recorded in the ledger)")
        for d in done:
            say(d)
        backend = make_backend(s.backend, log_dir=state / "logs")
        fresh = False
    else:
        if not req.kernel:
            raise UsageError("give the kernel to optimise: FILE.py::KERNEL", hint="or --resume to continue a loop")
        from .git import repo_root
        from ..source.ref import parse_ref
        kpath, _ = parse_ref(req.kernel)
        bench_opts = {k: v for k, v in (("rep_ms", m.rep_ms), ("warmup_ms", m.warmup_ms)) if v is not None}
        if not m.batch:
            bench_opts["batch"] = None
        spec = backend_spec(workload=m.workload, workload_args=m.workload_args, test_cmd=m.test_cmd,
                            bench_cmd=m.bench_cmd, simulate=m.simulate, configs=m.configs, kernel_file=kpath,
                            framework=m.framework, direction=m.direction, bench_options=bench_opts,
                            device=m.device, counts=m.counts(), replay=m.replay,
                            kernel=req.kernel.rpartition("::")[2] or None, replay_dir=m.replay_dir)
        check_commands(spec, repo_root(kpath))      # before any branch or ledger exists
        opts = req.options.apply()
        # decide with this machine's calibrated noise floor (cutile-diag calibrate), when there is one
        # (the backend built here only names the machine and what it measures; it starts nothing)
        from .calibrate import noise_floor_for
        opts.noise_floor, opts.noise_source = noise_floor_for(make_backend(spec))
        say(f"noise floor {opts.noise_floor * 100:.2f}% per measurement: {opts.noise_source}")
        s, led = create_session(req.kernel, backend=spec, options=opts.to_json(), out=req.out, branch=req.branch,
                                wrappers=req.wrappers, capture={"enabled": opts.capture, "archs": opts.archs,
                                                                "args": opts.capture_args}, echo=echo,
                                branch_prefix=req.branch_prefix)
        backend = make_backend(spec, log_dir=s.state_dir / "logs")
        fresh = True
    try:
        with closing(backend):
            runner = Runner(s, backend, led, options=opts, echo=echo)
            return _baseline_only(runner) if req.baseline_only else runner.start()
    except BaseException as e:
        if fresh and not led.iterations:
            # the baseline never got measured: leave no branch, worktree or ledger that would block the next try
            note = discard_session(s, led)
            if isinstance(e, CutileDiagError):
                e.hint = f"{e.hint}; {note}" if e.hint else note
        raise


BASELINE_ONLY = "baseline-only"


def _baseline_only(runner):
    """Iteration 0 when the ledger has none yet, then a recorded stop that ``--resume`` goes on
    from (a campaign measures every kernel's starting point before it spends time on any step)."""
    if not runner.led.iterations:
        runner.baseline()
    chk = runner.check_stop()
    if chk.stop and chk.rule == AT_ROOF:
        # already where --until-roof aims: done, so that no later pass of the campaign resumes it
        runner.record_stop(chk.rule, chk.reason)
        return runner.result(chk.rule, chk.reason)
    reason = "the baseline only (the campaign measures every kernel's baseline before any step); go on with --resume"
    runner.record_stop(BASELINE_ONLY, reason)
    return runner.result(BASELINE_ONLY, reason)


def plan(req: OptimizeRequest) -> Plan:
    """Locate, capture (in a temporary folder), diagnose: what the loop would try; nothing changes."""
    import hashlib
    import tempfile
    from .diagnosis import DiagnoseContext, EngineDiagnoser
    from .integrations import capture_version
    from ..source.locate import locate
    from ..source.ref import parse_ref
    if not req.kernel:
        raise UsageError("--plan needs the kernel: FILE.py::KERNEL")
    path, name = parse_ref(req.kernel)
    loc = locate(path, name)
    source = path.read_text()
    opts = req.options.apply()
    info, kw = {}, {}
    m = req.measurement
    if m.workload:
        from ..workloads import load_workload
        from .factory import parse_kv
        kw = parse_kv(m.workload_args, "--workload-arg")
        if m.workload.startswith("examples:") and "source" not in kw:
            kw["source"] = str(path)
        wl = load_workload(m.workload, **kw)
        for cfg in wl.configs:
            try:
                info[cfg.name] = {"flops": wl.flops(cfg), "bytes": wl.bytes(cfg), "unit": list(wl.compute_unit(cfg))}
            except Exception:
                pass
    with tempfile.TemporaryDirectory(prefix="cutile-diag-plan-") as tmp:
        cap = None
        if opts.capture:
            from .evidence import capture_sources
            backend = {"backend": "workload", "workload": m.workload, "kwargs": kw, "configs": m.configs} \
                if m.workload else \
                {"backend": "command", "test_cmd": m.test_cmd} if m.test_cmd else {}
            cap = capture_version(path, name, hashlib.sha256(source.encode()).hexdigest(), Path(tmp),
                                  archs=opts.archs, args=opts.capture_args,
                                  sources=capture_sources(backend, opts.capture_workload, kernel_file=path))
        ctx = DiagnoseContext(path=path, kernel=name, source=source, capture=cap.path if cap and cap.ok else None,
                              arch=opts.archs[0], workload_info=info)
        diag = EngineDiagnoser().diagnose(ctx)
    return Plan(loc.to_json(), cap.to_json() if cap else None, diag)


# --- an existing loop -----------------------------------------------------------------------

def open_loop(ref: LoopRef):
    """(session, ledger) of the loop ``ref`` names."""
    from .session import find_state_dir, load_session
    return load_session(find_state_dir(ref.kernel, ref.out))


def next_step(ref: LoopRef, *, entry: str | None = None):
    """``loop next``: the next playbook entry for the loop's kept version (``entry``: that one)."""
    from .manual import next_step as _next
    s, led = open_loop(ref)
    return _next(s, led, entry=entry)


def record(ref: LoopRef, *, entry: str | None = None, note: str | None = None,
           options: LoopOverrides | None = None, allow_noop: bool = False, echo: Echo = None) -> dict:
    """Verify, measure, decide and record the edit in the loop's worktree.  ``options``: this
    step's --budget, --rounds, --max-iterations over the loop's stored options."""
    from .backends import closing
    from .factory import make_backend
    from .manual import record_manual
    s, led = open_loop(ref)
    over = options or LoopOverrides()
    opts = over.apply(s.options)
    max_iterations = over.max_iterations
    if max_iterations is not None and max_iterations != s.options.get("max_iterations"):
        # the cap is the loop's (status, the next record, --resume read it), not this step's
        led.append({"type": "options", "options": {**s.options, "max_iterations": opts.max_iterations}})
    backend = make_backend(s.backend, log_dir=s.state_dir / "logs")
    with closing(backend):
        rec = record_manual(s, led, backend, entry=entry, note=note, options=opts, echo=echo,
                            allow_noop=allow_noop)
    return {**rec, "table": str(led.table_path), "simulated": led.simulated}


def status(ref: LoopRef):
    """``loop status``: where the loop ``ref`` names stands."""
    from .manual import status as _status
    s, led = open_loop(ref)
    return _status(s, led)


@dataclass
class Recovered:
    """What ``loop recover`` did (None: nothing was pending), and the loop's worktree."""
    what: str | None          # None: nothing was pending
    worktree: str

    def to_json(self) -> dict:
        """The recovery as JSON."""
        return {"recovered": self.what, "worktree": self.worktree}


def recover(ref: LoopRef) -> Recovered:
    """``loop recover``: close the loop's interrupted iteration, if any."""
    from .recover import recover as _recover
    s, led = open_loop(ref)
    return Recovered(_recover(s, led), str(s.worktree))


@dataclass
class Cleaned:
    """What ``loop clean`` removed, and the worktree and branch it concerned."""
    done: list[str]
    worktree: str
    branch: str

    def to_json(self) -> dict:
        """Every field."""
        return dict(self.__dict__)


def clean(ref: LoopRef, *, delete_branch: bool = False) -> Cleaned:
    """Remove a finished loop's worktree (and on request its branch); the ledger stays."""
    from .session import loop_args
    s, led = open_loop(ref)
    pend = led.pending()
    if pend is not None:
        raise LoopError(f"iteration {pend['iteration']} was interrupted and is still pending",
                        hint=f"`{prog()} loop recover{loop_args(s.state_dir)}` first: it saves what the worktree holds")
    if s.worktree.is_dir() and (s.worktree / ".git").exists():
        dirty = s.git().dirty_files()
        if dirty:
            raise LoopError(f"the loop's worktree {s.worktree} has uncommitted changes: " + ", ".join(dirty[:5]),
                            hint=f"record them with `{prog()} loop record`, or undo them there, then clean")
    done = worktree_mod.remove(s, delete_branch=delete_branch)
    if not delete_branch and s.user_git().branch_exists(s.branch):
        done.append(f"the branch {s.branch} stays (take its result, or clean again with --delete-branch)")
    done.append(f"the ledger stays in {s.state_dir}")
    return Cleaned(done, str(s.worktree), s.branch)
