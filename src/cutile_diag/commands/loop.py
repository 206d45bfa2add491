"""``cutile-diag loop next|record|status|recover`` — the loop's manual steps and its state."""
from __future__ import annotations

from ..output import console, err_console, print_json, prog
from ._args import add_budget, loop_overrides


def register(sub) -> None:
    """Add the ``loop`` subcommand and its steps (next, record, status, recover, clean)."""
    p = sub.add_parser("loop", help="manual steps of the optimisation loop: next, record, status, recover, clean",
                       description="For the edits cutile-diag cannot make itself: `loop next` prints the next "
                                   "playbook entry with a recipe for this kernel; after you edit the kernel file "
                                   "(or its launch wrapper), `loop record` verifies, measures against the last kept "
                                   "version, decides, commits or reverts, and records.  `loop status` shows where "
                                   "the loop stands; `loop recover` closes an interrupted iteration; `loop clean` "
                                   "removes a finished loop's worktree.  Everything happens in the loop's own git "
                                   "worktree: your checkout is never changed.")
    ls = p.add_subparsers(dest="loop_command", metavar="STEP")
    common = []
    n = ls.add_parser("next", help="the next playbook entry, with a recipe for this kernel")
    n.add_argument("--entry", help="explain this playbook entry instead (e.g. B)")
    common.append(n)
    r = ls.add_parser("record", help="verify, measure, decide and record the edit in the work tree")
    r.add_argument("--entry", help="the playbook entry the edit implements (default: what `loop next` proposed)")
    r.add_argument("--note", help="one line describing the edit (the table's optimization column)")
    add_budget(r, help="time budget in seconds (default: the loop's)", metavar=None)
    r.add_argument("--rounds", type=int, help="interleaved measurement rounds (default: the loop's)")
    r.add_argument("--max-iterations", type=int, help="the loop's iteration cap (1..25; default: the loop's)")
    r.add_argument("--allow-noop", action="store_true",
                   help="measure an edit that leaves the kernel's IR unchanged (refused by default)")
    common.append(r)
    st = ls.add_parser("status", help="the table, the kept commit, pending work and what to do next")
    common.append(st)
    rc = ls.add_parser("recover", help="after a crash: reset the loop's worktree to the last kept commit and record "
                                       "the crash")
    common.append(rc)
    cl = ls.add_parser("clean", help="remove a finished loop's worktree (its branch and ledger stay)")
    cl.add_argument("--delete-branch", action="store_true",
                    help="also delete the loop's branch and its refs/cutile-diag/<branch>/* (take the result first)")
    common.append(cl)
    for q in common:
        q.add_argument("kernel", nargs="?", help="FILE.py::KERNEL (default: the loop in this repository)")
        q.add_argument("--out", help="the loop's state folder root, if not the default")
        q.add_argument("--json", action="store_true", help="machine-readable output")
    n.set_defaults(func=run_next)
    r.set_defaults(func=run_record)
    st.set_defaults(func=run_status)
    rc.set_defaults(func=run_recover)
    cl.set_defaults(func=run_clean)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _ref(args):
    from ..loop.api import LoopRef
    return LoopRef(args.kernel, args.out)


def run_next(args) -> int:
    """``loop next``: the next playbook entry for the kept version, with its recipe; 0."""
    from ..loop import api
    ns = api.next_step(_ref(args), entry=args.entry)
    if args.json:
        print_json(ns)
        return 0
    if ns.rec is None:
        console.print("no playbook entry applies to the kept version")
        return 0
    r = ns.rec
    kind = f"automatic ({r.transform})" if ns.automatic else "manual"
    console.print(f"[bold]{r.id} — {r.name}[/]  [dim]{kind}; diagnosis: {ns.diagnosis.bottleneck}[/]")
    if r.reason:
        console.print(f"why: {r.reason}")
    for e in r.evidence[:6]:
        console.print(f"  [dim]{e}[/]", markup=True)
    eff = r.predicted_effect or {}
    if eff:
        console.print(f"predicted: +{eff.get('low', 0):.0%} .. +{eff.get('high', 0):.0%}; risk {r.risk}")
    for why in ns.not_automatic:
        console.print(f"not automatic here: {why}", markup=False, highlight=False)
    for line in ns.recipe:
        console.print(line, markup=False, highlight=False)
    if ns.stop.stop:
        console.print(f"[yellow]note: the stop rules say stop ({ns.stop.reason})[/]")
    console.print(f"[bold]then:[/] {ns.command}")
    return 0


def run_record(args) -> int:
    """``loop record``: verify, measure and decide the user's edit; 143 on SIGTERM, the edit saved for ``loop
    recover``."""
    from ..loop.proc import exit_on_sigterm
    return exit_on_sigterm(lambda: _run_record(args), " (the edit is saved in the iteration's folder); "
                                                      f"`{prog()} loop recover` records it")


def _run_record(args) -> int:
    from ..loop import api
    echo = None if args.json else (lambda m: err_console.print("│ " + m, markup=False, highlight=False, soft_wrap=True))
    rec = api.record(_ref(args), entry=args.entry, note=args.note, options=loop_overrides(args),
                     allow_noop=args.allow_noop, echo=echo)
    if args.json:
        print_json(rec)
        return 0
    lat = "-" if rec.get("latency_ms") is None else f"{rec['latency_ms']:.6f} ms" + (
        " (simulated)" if rec.get("simulated") else "")
    console.print(f"iteration {rec['iteration']}: {rec['optimization']} — {lat}, {rec['correctness']}, "
                  f"[bold]{rec['status']}[/]")
    console.print(f"reason{' (simulated latencies)' if rec.get('simulated') else ''}: {rec['decision']['reason']}")
    if rec.get("stop", {}).get("stop"):
        console.print(f"[yellow]stop: {rec['stop']['reason']}[/] (recorded; `{prog()} loop next` for another "
                      "manual step)")
    console.print(f"[dim]{rec['table']}[/]")
    return 0


def run_status(args) -> int:
    """``loop status``: the loop's branch, worktree, ledger table and latency so far; 0."""
    from ..loop import api
    st = api.status(_ref(args))
    if args.json:
        print_json(st)
        return 0
    from .optimize import ledger_table
    console.print(f"[bold]{st.kernel}[/] on branch {st.branch} in the loop's worktree {st.worktree}"
                  + ("" if st.on_branch else " [yellow](missing)[/]"), highlight=False)
    console.print(ledger_table(st.rows, "perf_results.md"))
    if st.simulated:
        console.print("simulated: these latencies and changes come from the simulation spec; nothing ran on a GPU",
                      markup=False, highlight=False)
    for e in st.evidence:          # the latency change beside what changed in the IR
        pct = f"{e['change_pct']:+.2f}%" if isinstance(e.get("change_pct"), (int, float)) else "-"
        cap = f"; capture {e['capture']}" if e.get("capture") else ""
        console.print(f"  {e['iteration']:>3} {pct:>8}  {e['ir_diff']}{cap}", markup=False, highlight=False,
                      soft_wrap=True)
    if st.costs:
        from ..loop.costs import split_line
        console.print("wall time per step:", highlight=False)
        for c in st.costs:
            total = f"{c['seconds']:.1f} s" if isinstance(c.get("seconds"), (int, float)) else "-"
            console.print(f"  {c['iteration']:>3} {total:>8}  {split_line(c)}", markup=False, highlight=False)
    if st.baseline_ms and st.best_ms:
        from .optimize import latency_line
        console.print(latency_line(st.baseline_ms, st.best_ms, st.kept_commit, st.simulated), highlight=False)
    if st.last_stop:
        console.print(f"last stop: {st.last_stop.get('reason')}")
    if st.pending:
        console.print(f"[red]iteration {st.pending['iteration']} was interrupted[/]")
    if st.take:
        from .optimize import show_take
        show_take(st.branch, st.worktree, st.take, st.state_dir)
    console.print(f"next: {st.hint}")
    return 0


def run_recover(args) -> int:
    """``loop recover``: close an interrupted iteration, or say there was none; 0."""
    from ..loop import api
    r = api.recover(_ref(args))
    if args.json:
        print_json(r)
        return 0
    console.print(r.what or f"nothing to recover: no iteration was interrupted (the loop works only in its worktree "
                            f"{r.worktree}; your checkout is never changed)", highlight=False)
    return 0


def run_clean(args) -> int:
    """``loop clean``: remove a finished loop's worktree (and its branch with ``--delete-branch``); 0."""
    from ..loop import api
    c = api.clean(_ref(args), delete_branch=args.delete_branch)
    if args.json:
        print_json(c)
        return 0
    for d in c.done:
        console.print(d, markup=False, highlight=False)
    return 0
