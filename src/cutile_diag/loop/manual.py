"""The steps a person or an agent makes by hand: ``loop next``, ``loop record``, ``loop status``.

``next_step`` diagnoses the last kept version and returns the chosen playbook entry with a
recipe written for *this* kernel — its function, its wrapper, its loads and stores with
line numbers, its grid and autotune space — for edits the transforms cannot make
(structural rewrites, a custom plan).  ``record_manual`` takes the edit that is in the loop's
worktree (``session.worktree``: the person edits there, never in their own checkout), refuses it
if anything but the kernel file and its launch wrapper changed, checks it before timing anything
(``check_edit``: an AOT compile and the IR diff against the kept version, so a broken edit fails
in seconds with the compiler's message and stays in the worktree, and an edit that leaves the IR
unchanged is reported as a no-op), and runs the same verify → measure → decide → commit/revert →
record path as the automatic loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import decide as decide_mod
from . import proc
from . import worktree as worktree_mod
from .backends import Backend, Version
from .diagnosis import Diagnoser, EngineDiagnoser, LoopDiagnosis, Rec
from .errors import ForbiddenEditError, LoopError
from .evidence import changed_outside_kernel, iteration_evidence, no_op
from ..ledger import Ledger
from ..source.locate import KernelLocation, locate
from .runner import Candidate, LoopOptions, Runner
from .session import Session, loop_args
from ..output import prog
from .integrations import ir_diff
from ..source.model import changed_lines


@dataclass
class ManualResult:
    """A hand edit in the shape of a transform's result (description, parameters, changed lines)."""
    description: str
    params: dict = field(default_factory=dict)
    changed_lines: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    transform: str | None = None


@dataclass
class NextStep:
    """What ``loop next`` shows: the entry to apply by hand, its recipe, the diagnosis, the command that records it,
    and whether the loop should stop."""
    rec: Rec | None
    diagnosis: LoopDiagnosis
    recipe: list[str]
    location: dict
    command: str
    automatic: bool
    stop: decide_mod.StopCheck
    not_automatic: list[str] = field(default_factory=list)   # why the entry's transforms do not apply

    def to_json(self) -> dict:
        """The next step as ``loop next --json`` prints it."""
        return {"entry": self.rec.to_json() if self.rec else None, "recipe": self.recipe, "command": self.command,
                "automatic": self.automatic, "not_automatic": self.not_automatic, "stop": self.stop.__dict__,
                "diagnosis": self.diagnosis.to_json(), "location": self.location}


def _ops(loc: KernelLocation, *kinds: str) -> list[str]:
    out = []
    for m in loc.memory_ops:
        if kinds and m.kind not in kinds:
            continue
        flags = []
        if m.kind in ("load", "store", "gather", "scatter"):
            flags.append(f"latency={m.latency}" if m.latency else "no latency")
        if m.kind == "store":
            flags.append(f"allow_tma={m.allow_tma}" if m.allow_tma else "allow_tma default (True)")
        where = "in a loop" if m.in_loop else "outside loops"
        out.append(f"  line {m.line}: {m.text}  [{', '.join(flags)}; {where}]")
    return out


def _launch_lines(loc: KernelLocation) -> list[str]:
    if not loc.launches:
        return ["  (no launch of the kernel found in its file)"]
    return [f"  {s.function}() line {s.line}: {s.kind}(…, grid={s.grid_text}, kernel={s.kernel}"
            + (f", args={s.args_text}" if s.args_text else "") + ")" for s in loc.launches]


def _space_size(sp) -> str:
    if sp.size is not None:
        return f" ({sp.size} configs)"
    known = [str(n) for n in sp.sizes if n is not None]
    if known:
        more = " or an unknown number" if None in sp.sizes else ""
        return f" ({', '.join(known)}{more} configs, depending on the branch taken)"
    return ""


def _playbook_steps(entry_id: str, loc: KernelLocation) -> list[str]:
    """The entry's ``[recipe]`` from ``references/playbook/*.toml``, filled in for this kernel."""
    import re
    from ..diagnose.playbook import default_playbook
    try:
        e = default_playbook().by_id(entry_id.upper())
    except KeyError:                  # an entry outside the playbook (a scripted diagnosis): no recipe
        return []
    tuned = next((s for s in loc.launches if s.kind != "ct.launch"), None) if loc.autotuned else None
    lines = e.recipe_autotuned if tuned is not None and e.recipe_autotuned else e.recipe
    values = {"kernel": loc.function, "wrappers": ", ".join(f"{w}()" for w in loc.wrappers) or "the launch wrapper",
              "path": loc.path.name, "constants": ", ".join(loc.kernel.constants) or "the tile-size constants",
              "tuned_kind": getattr(tuned, "kind", ""), "tuned_function": getattr(tuned, "function", ""),
              "tuned_line": getattr(tuned, "line", "")}
    out: list[str] = []
    for ln in lines:
        m = re.fullmatch(r"\{ops(?::([a-z_,]+))?\}", ln.strip())
        out += _ops(loc, *(m.group(1).split(",") if m.group(1) else ())) if m else [ln.format(**values)]
    return out


def recipe_for(rec: Rec, loc: KernelLocation) -> list[str]:
    """Kernel-specific instructions for one playbook entry."""
    k = loc.function
    wrappers = ", ".join(f"{w}()" for w in loc.wrappers) or "the launch wrapper"
    path = loc.path.name
    lines = [f"Kernel {k} ({path}:{loc.line}); launched by {wrappers}:"]
    lines += _launch_lines(loc)
    kfn = loc.kernel
    if kfn.hints:
        lines.append(f"Decorator: {kfn.decorator}")
    if kfn.constants:
        lines.append("Compile-time constants: " + ", ".join(kfn.constants))
    if loc.autotune:
        for sp in loc.autotune:
            lines.append(f"Autotune space in {sp.function}() line {sp.line}: {sp.text}" + _space_size(sp))
    if loc.registrations:
        lines.append("Registered: " + ", ".join(f"@register_impl({r.op!r}, backend={r.backend!r}) on {r.function}()"
                                                for r in loc.registrations))
    steps = _playbook_steps(rec.id, loc)
    if rec.changes:
        steps += ["Playbook change:"] + [f"  - {c}" for c in rec.changes]
    if rec.risks:
        steps += ["Risks:"] + [f"  - {r}" for r in rec.risks]
    if rec.verify:
        steps += ["Verify:"] + [f"  - {v}" for v in rec.verify]
    return lines + steps


def next_step(s: Session, led: Ledger, *, entry: str | None = None, diagnoser: Diagnoser | None = None,
              options: LoopOptions | None = None, record: bool = True) -> NextStep:
    """Diagnose the last kept version and explain the next entry (``entry`` picks one)."""
    opt = options or LoopOptions.from_json(s.options)
    runner = Runner(s, _LedgerBackend(led), led, diagnoser=diagnoser or EngineDiagnoser(), options=opt)
    a = runner.kept_version()
    diag = runner._diagnose(a, led.next_iteration())
    recs = diag.recommendations
    # what the automatic loop would apply, and why the other automatic entries are not applicable
    choice, _manual, skipped = runner.choose(diag, a)
    if entry:
        pick = next((r for r in recs if r.id.upper() == entry.upper()), None)
        if pick is None:
            pick = _playbook_rec(entry)
            if pick is None:
                raise LoopError(f"no playbook entry '{entry}'", hint="entries: " + ", ".join(r.id for r in recs))
    else:
        # untried first; with everything tried (the engine's hand-over), the manual entries (custom plan).
        # A kept entry counts as done (a clear win is not "tried") unless the automatic loop has more of it
        kept = {(r.get("entry") or {}).get("id") for r in led.iterations if r["iteration"] > 0 and r["status"] == "keep"}
        more = choice.rec.id if choice is not None else None
        fresh = [r for r in recs if r.id not in kept or r.id == more]
        pick = next((r for r in fresh if not r.tried), None) or next((r for r in fresh if not r.automatic), None) \
            or (fresh[0] if fresh else recs[0] if recs else None)
    loc = locate(s.kernel_path, s.kernel, source=a.files[s.kernel_file])
    recipe = recipe_for(pick, loc) if pick else ["No playbook entry applies to the kept version."]
    # an automatic entry whose transform finds nothing to change (e.g. hints the autotuned wrapper
    # overrides) is a manual step here: say why instead of promising a no-op
    auto = bool(pick and pick.automatic and not diag.escalate and choice is not None and choice.rec.id == pick.id)
    why_not = [sk for sk in skipped if pick and sk.split("/")[0].split(":")[0] == pick.id]
    if pick and pick.automatic and not auto and not why_not:     # an entry asked for by name, not ranked
        for tname in dict.fromkeys([pick.transform, *pick.alternatives]):
            t = runner.transforms.get(tname)
            ok, why = t.applicable(a.files[s.kernel_file], s.kernel) if t else (False, "not available")
            if not ok:
                why_not.append(f"{pick.id}/{tname}: {why}")
    sel = loop_args(s.state_dir)
    cmd = (f"{prog()} optimize --resume{sel} (applies {pick.transform} automatically), or edit {s.kernel_path} "
           f"(the loop's worktree) by hand and run {prog()} loop record{sel} --entry {pick.id}") if auto else (
        f"edit {s.kernel_path} (the loop's worktree), then: {prog()} loop record{sel} --entry "
        f"{pick.id if pick else 'L'} --note \"what you changed\"")
    stop = decide_mod.stop_rules(led.decisions(), max_iterations=opt.max_iterations, keep_going=opt.keep_going)
    if diag.escalate:
        recipe.insert(0, f"The diagnosis is '{diag.bottleneck}': the automatic loop hands over here. Evidence:")
        for r in diag.reasons[:4]:
            recipe.insert(1, f"  - {r}")
    ns = NextStep(pick, diag, recipe, loc.to_json(), cmd, auto, stop, why_not)
    if record and pick is not None:
        led.append({"type": "next", "iteration": led.next_iteration(), "entry": pick.to_json(),
                    "diagnosis": diag.to_json(), "base_commit": a.commit})
    return ns


def _playbook_rec(entry: str) -> Rec | None:
    try:
        from ..diagnose.playbook import default_playbook
        e = default_playbook().by_id(entry.upper())
    except Exception:
        return None
    return Rec(id=e.id, name=e.name, transform=e.transform, alternatives=list(e.alternatives), summary=e.summary,
               changes=list(e.changes), verify=list(e.verify), risks=list(e.risks), references=list(e.references),
               reason="asked for by name")


class _LedgerBackend(Backend):
    """What ``loop next`` needs from a backend, read from the ledger: it plans, it measures nothing."""
    name = "ledger"
    alternates = False

    def __init__(self, led: Ledger):
        base = next((r for r in led.iterations if r["iteration"] == 0), {})
        self._configs = list((base.get("configs") or {}).keys()) or None
        self._info = base.get("workload_info") or {}

    def configs(self):
        return self._configs

    def workload_info(self):
        return self._info

    def describe(self) -> dict:
        return {"backend": self.name}

    def _measures_nothing(self, *_a, **_k):
        raise LoopError("internal: `loop next` plans from the ledger and measures nothing")

    verify = measure = roofline = _measures_nothing

    def retain(self, versions) -> None:
        pass                        # it holds nothing

    def close(self) -> None:
        pass


def check_edit(runner: Runner, a: Version, v: Version, *, allow_noop: bool = False,
               echo: Callable[[str], None] | None = None) -> dict:
    """Compile the edited kernel ahead of time (a launch it is captured from must match its
    parameters) and diff its IR against the kept version, before any timing.  Raises
    ``LoopError`` (the edit stays in the tree) when that check fails, or when the edit is a
    no-op by ``evidence.no_op`` (``allow_noop`` measures it)."""
    echo = echo or (lambda _s: None)
    if runner.capture_off_reason:
        echo(f"edit not compiled ahead of time: capture {runner.capture_off_reason}")
        return {"skipped": runner.capture_off_reason}
    deadline = proc.Deadline(runner.opt.iteration_budget_s)
    if runner.observing:
        # command mode: compiled from the kept version's recorded launch; an edit outside the kernel
        # is captured from its own check's launch when it is recorded (never a run of its own)
        runner._compile_ref = a
        runner.capture(a, deadline)
    cap_b = runner.capture(v, deadline, run=False)
    if cap_b is None and runner.observing:
        echo("edit not compiled ahead of time: its launch may have changed, so it is captured from the launch "
             "its check records")
        return {"skipped": "captured from the check's launch"}
    if cap_b is not None and not cap_b.ok:
        raise LoopError(f"the edited kernel fails its compile check: {cap_b.error}",
                        hint="nothing was measured or recorded and your edit is still in the loop's worktree: fix it and run "
                             f"`{prog()} loop record` again")
    cap_a = runner.capture(a, deadline)
    diff = ir_diff(cap_a.path if cap_a and cap_a.ok else None, cap_b.path if cap_b else None,
                   entry=runner.s.kernel)
    # the same rule the decision applies (evidence.no_op): a changed launch or wrapper is a change
    why = no_op(diff, outside_changed=changed_outside_kernel(a.files, v.files, runner.s.kernel_file,
                                                             runner.s.function))
    if why and not allow_noop:
        raise LoopError(f"no-op edit: {why}",
                        hint="nothing was measured or recorded; `--allow-noop` measures it anyway")
    runner.measure_no_ops = allow_noop
    if diff.get("equivalent") or why:
        what = "IR" if diff.get("equivalent") else "machine code"
        echo(f"the kernel's {what} is unchanged" + (" (--allow-noop: measuring)" if why else
                                                    " (its launch or launch wrapper changed: measuring)"))
    elif "skipped" not in diff:
        echo(f"compiles; IR diff against the kept version: {_diff_line(diff)}")
        for c in diff.get("changes", [])[:5]:
            echo(f"  {c.get('kind', '')} {c.get('detail', '')}".rstrip())
    return diff


def _diff_line(diff: dict) -> str:
    sm = diff.get("summary") or {}
    kinds = ", ".join(f"{k} x{n}" for k, n in (sm.get("by_kind") or {}).items())
    return (f"{diff.get('n_changes', 0)} change(s)" + (f" ({kinds})" if kinds else "")
            + (f"; ops {sm['ops_before']} -> {sm['ops_after']}" if "ops_before" in sm else ""))


def record_manual(s: Session, led: Ledger, backend: Backend, *, entry: str | None = None, note: str | None = None,
                  options: LoopOptions | None = None, echo: Callable[[str], None] | None = None,
                  allow_noop: bool = False) -> dict:
    """Check (``check_edit``), verify, measure, decide, commit or revert, and record the edit in the work tree."""
    opt = options or LoopOptions.from_json(s.options)
    pend = led.pending()
    if pend is not None:
        raise LoopError(f"iteration {pend['iteration']} was interrupted and is still pending",
                        hint=f"run `{prog()} loop recover` first (it saves what the loop's worktree holds in the "
                             "iteration's folder, then resets the worktree)")
    if not led.iterations:
        raise LoopError("the loop has no baseline yet", hint=f"run `{prog()} optimize --resume` to measure it")
    made = worktree_mod.ensure(s)
    if made:
        raise LoopError(f"nothing to record: {made}",
                        hint=f"make the edit in {s.kernel_path}, then run `{prog()} loop record` again")
    git = s.git()
    kept = led.kept_commit()
    head = git.head()
    if head != kept:
        raise LoopError(f"HEAD ({head[:12]}) is not the loop's last kept commit ({kept[:12]})",
                        hint="leave your edit uncommitted: `loop record` commits it itself")
    changed = git.changed_since(kept)
    forbidden = [f for f in changed if f not in s.allowed]
    if forbidden:
        raise ForbiddenEditError(forbidden, s.allowed)
    if not changed:
        raise LoopError(f"nothing to record: the kernel file and wrapper in the loop's worktree ({s.worktree}) are "
                        "unchanged since the last kept commit",
                        hint=f"edit {s.kernel_path} (not your checkout's copy); `{prog()} loop next` shows what "
                             "to change")
    runner = Runner(s, backend, led, options=opt, echo=echo)
    chk = runner.check_stop()
    if chk.rule == "max-iterations":         # the cap holds for manual steps too; the other rules are hand-overs
        raise LoopError(f"the loop's iteration cap is reached: {chk.reason}",
                        hint="the recipe stops here" if opt.max_iterations >= decide_mod.MAX_ITERATIONS else
                        f"raise it with --max-iterations (at most {decide_mod.MAX_ITERATIONS})")
    a = runner.kept_version()
    files = runner.ws.current()
    nxt = [r for r in led.of_type("next") if r.get("iteration") == led.next_iteration()]
    proposed = nxt[-1]["entry"] if nxt else None
    eid = entry or (proposed or {}).get("id") or "manual"
    eid = "manual" if eid.lower() == "manual" else eid.upper()
    name = proposed.get("name") if proposed and str(proposed.get("id", "")).upper() == eid else None
    if name is None and eid != "manual":
        pb = _playbook_rec(eid)
        name = pb.name if pb else None
    desc = note or (f"manual edit ({name})" if name else "manual edit")
    n = led.next_iteration()
    v = Version(f"iter-{n}", files, None, a.applied + (f"manual:{eid}",))
    res = ManualResult(desc, {}, changed_lines(a.files[s.kernel_file], files.get(s.kernel_file, "")))
    meta = {"entry": {"id": eid, "name": name or desc, "transform": None, "automatic": False, "note": note},
            "diagnosis": (nxt[-1].get("diagnosis") if nxt else None), "tried": []}
    label = f"{eid} manual: {desc}" if eid != "manual" else f"manual: {desc}"
    check_edit(runner, a, v, allow_noop=allow_noop, echo=echo)
    rec = runner.evaluate(n, a, [Candidate(v, res, {})], meta, label)
    # the same stop rules as the automatic loop, recorded the same way (status and --resume read them)
    chk = runner.check_stop()
    if chk.stop:
        runner.record_stop(chk.rule, chk.reason)
    return {**rec, "stop": chk.__dict__}


@dataclass
class Status:
    """What ``loop status`` shows: the branch and worktree, the kept commit, the table rows, a pending iteration, the
    latencies and the next command."""
    state_dir: str
    kernel: str
    branch: str
    on_branch: bool                  # the loop's worktree exists with its branch checked out
    head: str | None
    kept_commit: str | None
    dirty: list[str]
    pending: dict | None
    rows: list[dict]
    last_stop: dict | None
    stop_now: decide_mod.StopCheck
    baseline_ms: float | None
    best_ms: float | None
    hint: str
    worktree: str = ""
    take: list[str] = field(default_factory=list)     # how to bring the kept result into the user's branch
    evidence: list[dict] = field(default_factory=list)   # per iteration: latency change + IR diff + capture
    costs: list[dict] = field(default_factory=list)      # per iteration: where its wall time went (loop.costs)
    simulated: bool = False                              # latencies from a simulation spec, not a GPU
    loop_args: str = ""                                  # what names this loop to a loop command run here

    def to_json(self) -> dict:
        """Every field, with ``stop_now`` as a dict."""
        d = dict(self.__dict__)
        d["stop_now"] = self.stop_now.__dict__
        return d


def status(s: Session, led: Ledger, *, options: LoopOptions | None = None) -> Status:
    """Where the loop stands: its worktree and branch, kept commit, table, pending iteration, stop rules and what to
    run next."""
    opt = options or LoopOptions.from_json(s.options)
    git = s.git()
    have_wt = s.worktree.is_dir() and (s.worktree / ".git").exists()
    cur = git.branch() if have_wt else None
    kept = led.kept_commit() if led.last_kept() else None
    dirty = git.dirty_files() if have_wt else []
    pend = led.pending()
    base = next((r for r in led.iterations if r["iteration"] == 0), None)
    lk = led.last_kept()
    stop = decide_mod.stop_rules(led.decisions(), max_iterations=opt.max_iterations, keep_going=opt.keep_going)
    sel = loop_args(s.state_dir)          # the hints name this loop where a bare command would not find it
    if pend is not None:
        hint = f"iteration {pend['iteration']} was interrupted: `{prog()} loop recover{sel}` or `{prog()} optimize --resume{sel}`"
    elif not have_wt:
        hint = (f"the loop's worktree is gone (`loop clean`?); `{prog()} optimize --resume{sel}` makes it again from "
                f"its branch {s.branch}" if s.user_git().branch_exists(s.branch) else
                f"the loop's worktree and its branch {s.branch} are gone; the ledger stays in {s.state_dir}")
    elif cur != s.branch:
        hint = f"the loop's worktree {s.worktree} has {cur or 'a detached HEAD'} checked out, not {s.branch}"
    elif dirty:
        bad = [f for f in dirty if f not in s.allowed]
        hint = (f"changes in the loop's worktree outside the kernel and wrapper ({', '.join(bad[:3])}) would be "
                "refused" if bad else
                f"an edit is in the loop's worktree: record it with `{prog()} loop record{sel} --entry ID`")
    elif not led.iterations and (led.last_stop() or {}).get("rule") == "baseline-failed":
        hint = (f"the baseline failed: {led.last_stop().get('reason')}; fix that, then `{prog()} optimize "
                f"--resume{sel}` (give corrected --test-cmd/--bench-cmd there: they replace the stored ones)")
    elif not led.iterations:
        hint = f"no baseline yet: `{prog()} optimize --resume{sel}`"
    elif stop.stop:
        hint = f"stopped ({stop.reason}); `{prog()} loop next{sel}` for a manual step"
    elif led.last_stop() is not None:
        why = str(led.last_stop().get("reason", ""))
        hint = (f"stopped: {why}" + ("" if "loop next" in why else f"; `{prog()} loop next{sel}` for a manual step")
                + f"; `{prog()} optimize --resume{sel}` re-diagnoses and goes on")
    else:
        hint = f"continue with `{prog()} optimize --resume{sel}`, or `{prog()} loop next{sel}` for a manual step"
    return Status(state_dir=str(s.state_dir), kernel=s.kernel, branch=s.branch, on_branch=cur == s.branch,
                  head=git.head() if have_wt else None, kept_commit=kept, worktree=str(s.worktree),
                  take=s.take_commands(kept), dirty=dirty, pending=pend, rows=led.rows(),
                  last_stop=led.last_stop(), stop_now=stop, baseline_ms=base["latency_ms"] if base else None,
                  best_ms=lk["latency_ms"] if lk else None, hint=hint, evidence=iteration_evidence(led.iterations),
                  costs=[{"iteration": r["iteration"], "seconds": r.get("seconds"), **r["step_costs"]}
                         for r in led.iterations if r.get("step_costs")],
                  simulated=led.simulated, loop_args=sel)
