"""``cutile-diag campaign -- CMD``: every kernel a test suite launches, ranked, optimised."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import UsageError
from ..output import console, err_console, print_json, prog
from ._args import add_budget, loop_overrides, positive_arg

DEFAULT_OUT = Path("cutile-diag-out") / "campaign"


def register(sub) -> None:
    """Add the ``campaign`` subcommand and its flags."""
    p = sub.add_parser(
        "campaign", help="every kernel a test suite launches: survey, rank by headroom x GPU-time share, optimise each",
        description="Runs CMD once with every ct.launch observed (incrementally: a killed survey keeps what it saw "
                    "and the next run continues), maps each kernel to FILE.py::KERNEL and the tests that launched "
                    "it, derives its correctness and bench commands and its FLOPs/bytes per configuration, ranks "
                    "the kernels by the GPU time they can give back ((time - attainable time at their size) x "
                    "calls; a launch-bound kernel has only its time above the launch floor), then runs "
                    "the optimisation loop (the one `optimize` runs) on each, best expected gain first, each on "
                    "its own branch and worktree.  State and report (campaign.md, campaign.html) in --out.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Plan only:   {prog()} campaign --plan -- pytest tests/ops -k \"test_perf and cutile\"\n"
               f"Run:         {prog()} campaign --time-limit 420 -- pytest tests/ops -k \"test_perf and cutile\"\n"
               f"Continue:    {prog()} campaign --resume [--out DIR]\n"
               f"CI / demo:   {prog()} campaign --simulate SPECS.json -- pytest ...   (SPECS.json maps each kernel's\n"
               "             name to an `optimize --simulate` spec; the survey then records without executing)")
    p.add_argument("--plan", action="store_true", help="survey and rank only: print what would run, change nothing")
    p.add_argument("--dry-run", action="store_true",
                   help="record the launches without executing them (no GPU; static counts, no times)")
    p.add_argument("--select", help="comma-separated kernels to optimise (name or FILE.py::KERNEL)")
    # dests skip_kernels and total_time_limit: not the loop's --skip / --time-limit (``loop_overrides``)
    p.add_argument("--skip", dest="skip_kernels", metavar="SKIP", help="comma-separated kernels not to optimise")
    p.add_argument("--simulate", metavar="SPECS.json", help="a simulated GPU per kernel (CI and demos)")
    p.add_argument("--time-limit", dest="total_time_limit", metavar="S",
                   help="wall time for all the loops, split between kernels by expected gain; with --resume: "
                        "the time this run may take (default: what is left of the first limit)")
    p.add_argument("--baselines-first", action="store_true",
                   help="measure every selected kernel's baseline before any loop takes a step (each gets its "
                        "starting point even when --time-limit runs out), then spend what is left on steps")
    p.add_argument("--resume", action="store_true", help="continue the campaign in --out after a crash or kill")
    p.add_argument("--branch-prefix", metavar="PREFIX",
                   help="each loop's branch is PREFIX-<kernel>-<YYYYMMDD> (default cutile-perf); a name taken "
                        "already (a second campaign today) gets -2, -3, ...")
    p.add_argument("--resurvey", action="store_true", help="run the survey again instead of reusing it")
    p.add_argument("--no-replay", action="store_true",
                   help="record no launches for replay: every loop checks and times with the suite's own commands")
    p.add_argument("--out", help=f"state and report folder (default <repo>/{DEFAULT_OUT})")
    p.add_argument("--device", metavar="PRESET", help="device model for the ranking of a dry run (h100, h200, ...)")
    p.add_argument("--executor", choices=("local", "ray"), default=None,
                   help="local: this machine, one GPU, kernels in sequence (default; --gpus N: in parallel); "
                        "ray: one actor per GPU (cutile-diag[ray])")
    p.add_argument("--gpus", metavar="N|all",
                   help="local executor: one worker process per GPU, N of them or all this machine has, kernels in "
                        "parallel, this process the only writer (default 1: in this process; --simulate: N fake "
                        "GPUs on any machine; with --resume: as many as the campaign started with)")
    p.add_argument("--ray-address", metavar="ADDR", help="an existing Ray cluster (default: a local instance)")
    p.add_argument("--ray-gpus", type=int, metavar="N", help=argparse.SUPPRESS)   # tests: fake GPU resources
    lp = p.add_argument_group("loop options (as for optimize)")
    lp.add_argument("--max-iterations", type=int, help="per kernel (1..25)")
    lp.add_argument("--until-roof", type=float, metavar="F",
                    help="each loop goes on past small steps while below F of the time attainable at the kernel's "
                         "size; a kernel already there after its baseline takes no step (default 0.9 in a campaign)")
    lp.add_argument("--no-capture", action="store_true", help="no AOT capture for the diagnoses")
    lp.add_argument("--rounds", type=int,
                    help="interleaved measurement rounds per comparison (default 3; 2 when the 2 x 3 runs of "
                         "one comparison would take more than 1/8 of --budget, e.g. a pytest --bench-cmd)")
    lp.add_argument("--max-sweep", type=int,
                    help="parameter settings screened per sweep step (default 4; down to 2 when screening 4 "
                         "would take more than 1/8 of --budget, e.g. a pytest --bench-cmd)")
    add_budget(lp, help="time budget per iteration in seconds (default 600)")
    dp = p.add_argument_group("derived commands")
    dp.add_argument("--max-tests", type=int, metavar="N",
                    help="survey at most N parametrisations of each test function, and bench each kernel with its N "
                         "perf tests of the most GPU time (default: all)")
    dp.add_argument("--test-k", metavar="EXPR",
                    help="the correctness command's -k (default: the survey's -k with its perf word negated, "
                         "e.g. 'not test_perf and cutile')")
    p.add_argument("--json", action="store_true", help="machine-readable output (progress stays on stderr)")
    p.set_defaults(func=run)


def _names(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def _say(line: str) -> None:
    err_console.print("│ " + line, markup=False, highlight=False, soft_wrap=True)


def run(args) -> int:
    """Survey, rank and optimise (or ``--plan`` only); 1 when a kernel's loop crashed, 143 on SIGTERM (with the line
    to resume)."""
    from ..loop.proc import exit_on_sigterm
    return exit_on_sigterm(lambda: _run(args), f"; `{resume_hint(args)}` goes on")


def resume_hint(args) -> str:
    """The command that continues this campaign, as typed here (its --out when not the default)."""
    from ..campaign.run import resume_command
    root = _root()
    return resume_command(_out(args, root), root)


def _out(args, root: Path) -> Path:
    out = Path(args.out).expanduser() if args.out else root / DEFAULT_OUT
    return out.resolve()


def _root() -> Path:
    from ..errors import CutileDiagError
    from ..loop.git import repo_root
    try:
        return repo_root(Path.cwd())
    except CutileDiagError:
        return Path.cwd().resolve()


def _run(args) -> int:
    from ..campaign import api
    root = _root()
    out = _out(args, root)
    opts = loop_overrides(args)
    if args.gpus is not None and args.executor == "ray":
        raise UsageError("--gpus is the local executor's: the Ray executor runs one actor per GPU of its cluster")
    limit = positive_arg("--time-limit", args.total_time_limit)
    if args.resume:
        if args.passthrough:
            raise UsageError("--resume continues the campaign in --out: give no command")
        res = api.resume(out, executor=args.executor, ray_address=args.ray_address, num_gpus=args.ray_gpus,
                         gpus=args.gpus, time_limit=limit, baselines_first=args.baselines_first, echo=_say)
        return _show_run(args, res)
    if not args.passthrough:
        raise UsageError("give the command to survey after '--'",
                         hint=f'e.g. {prog()} campaign --plan -- pytest tests/ops -k "test_perf and cutile"')
    if args.dry_run and not (args.plan or args.simulate):
        raise UsageError("--dry-run executes nothing, so no loop can measure: it goes with --plan (or --simulate)")
    sim = None
    if args.simulate:
        try:
            sim = json.loads(Path(args.simulate).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise UsageError(f"--simulate {args.simulate}: cannot read: {e}") from None
        if not isinstance(sim, dict) or not all(isinstance(v, dict) for v in sim.values()):
            raise UsageError(f"--simulate {args.simulate}: must map each kernel's name to an `optimize --simulate` spec")
    req = api.CampaignRequest(command=list(args.passthrough), root=root, out=out, plan_only=args.plan,
                              execute=not (args.dry_run or sim is not None), select=_names(args.select),
                              skip=_names(args.skip_kernels), simulate=sim, time_limit=limit,
                              baselines_first=args.baselines_first,
                              resurvey=args.resurvey, device=args.device, options=opts, max_tests=args.max_tests,
                              test_k=args.test_k, replay=not args.no_replay,
                              executor=args.executor or "local", ray_address=args.ray_address, num_gpus=args.ray_gpus,
                              gpus=args.gpus, branch_prefix=args.branch_prefix)
    res = api.campaign(req, echo=_say)
    if args.plan:
        return _show_plan(args, res)
    return _show_run(args, res)


def _show_plan(args, res) -> int:
    plan, selected = res.plan, res.selected
    if args.json:
        print_json({"survey": res.survey, "plan": plan.to_json(), "selected": [k.name for k in selected]})
        return 0
    from rich.markup import escape
    from rich.table import Table
    t = Table(title=escape(f"{len(plan.kernels)} kernel(s) launched by {' '.join(plan.command)[:80]}"),
              caption=escape(f"ranked by {plan.ranked_by}; attainable: max(launch floor, bytes at the measured copy "
                             "bandwidth for that many bytes, FLOPs at the compute ceiling) x calls; bound launch: "
                             "every configuration at its launch floor; vs pytorch: the kernel's time over the "
                             "pytorch variant's at the same test parameters"), title_justify="left")
    numeric = ("#", "configs", "calls", "GPU ms", "attainable ms", "% ceiling", "% attainable", "share", "headroom",
               "expected gain", "vs pytorch")
    for col in ("#", "kernel", "FILE.py::KERNEL", "configs", "calls", "GPU ms", "attainable ms", "% ceiling",
                "% attainable", "bound", "share", "headroom", "expected gain", "vs pytorch", "runs"):
        t.add_column(col, justify="right" if col in numeric else "left")
    chosen = {k.name for k in selected}

    def span(k, key):
        v = [c[key] for c in k.configs if c.get(key) is not None]
        return (f"{min(v):.0f}%" if round(min(v)) == round(max(v)) else f"{min(v):.0f}-{max(v):.0f}%") if v else "-"
    for i, k in enumerate(plan.kernels, 1):
        ref = k.reference or {}
        t.add_row(str(i), escape(k.name), escape(f"{k.file}::{k.ref.rsplit('::', 1)[1]}"), str(len(k.configs)),
                  str(sum(c["calls"] for c in k.configs)), "-" if k.gpu_ms is None else f"{k.gpu_ms:.3f}",
                  "-" if k.attainable_ms is None else f"{k.attainable_ms:.3f}", span(k, "pct_of_ceiling"),
                  span(k, "pct_attainable"), "[cyan]launch[/]" if k.bound == "launch" else "",
                  f"{k.share * 100:.0f}%",
                  "-" if k.headroom is None else f"{k.headroom * 100:.0f}%", f"{k.expected_gain * 100:.1f}%",
                  f"{ref['ratio']:.2f}x" if ref.get("ratio") else "-",
                  "[green]yes[/]" if k.name in chosen else ("[red]no: " + escape("; ".join(k.problems))[:60] + "[/]"
                                                           if k.problems else "[dim]no[/]"))
    console.print(t)
    if res.survey:
        console.print(f"survey: {res.survey['launches']} launches of {res.survey['tests']} test(s) in "
                      f"{res.survey['seconds']:g} s", highlight=False)
    for k in plan.kernels:
        if k.name not in chosen:
            continue
        console.print(f"[bold]{escape(k.name)}[/]: {len(k.tests)} test(s)")
        console.print(f"  correctness: {k.test_cmd}", markup=False, highlight=False)
        console.print(f"  bench:       {k.bench_cmd}", markup=False, highlight=False)
        for cfg in k.configs:
            times = [f"{cfg['median_ms']:.4f} ms" if cfg.get("median_ms") is not None else "",
                     f"attainable {cfg['attainable_ms']:.4f} ms" if cfg.get("attainable_ms") is not None else "",
                     "launch-bound" if cfg.get("bound") == "launch" else "",
                     f"pytorch {cfg['reference_ms']:.4f} ms" if cfg.get("reference_ms") is not None else ""]
            console.print(f"  config {cfg['label']}: grid {cfg['grid']}, {cfg['calls']} call(s), "
                          + (f"{cfg['bytes'] / 1e6:.2f} MB" if cfg["bytes"] else "? MB")
                          + (f", {cfg['flops'] / 1e9:.3f} GFLOP" if cfg["flops"] else "")
                          + "".join(f", {x}" for x in times if x)
                          + (f", replay {cfg['replay']}" if cfg.get("replay") else ""), markup=False,
                          highlight=False)
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}")
    return 0


def _show_run(args, res) -> int:
    rep = res.report
    if args.json:
        print_json({"out": str(res.out), "report": rep, "plan": res.plan.to_json() if res.plan else None})
        return 1 if any(r["status"] == "crashed" for r in rep["kernels"]) else 0
    from rich.markup import escape
    from rich.table import Table

    from ..campaign.report import ms_text
    t = Table(title=f"campaign ({rep['markdown']})", title_justify="left")
    for col in ("kernel", "status", "start ms", "final ms", "start %", "final %", "final % att.", "speedup", "kept",
                "stopped", "branch"):
        t.add_column(col)
    for r in rep["kernels"]:
        f = lambda v, s: "-" if v is None else format(v, s)   # noqa: E731
        t.add_row(escape(r["kernel"]), r["status"], ms_text(r, "start_ms"), ms_text(r, "final_ms"),
                  f(r["start_pct"], ".1f"), f(r["final_pct"], ".1f"),
                  f(r["final_pct_attainable"], ".1f") + (" launch" if r["bound"] == "launch" else ""),
                  f(r["speedup"], ".3f"), f(r["kept_steps"], "d"),
                  escape((r["stopped"] or "-")[:60]), escape(r["branch"] or "-"))
    console.print(t)
    console.print(f"report: {rep['html']}", highlight=False)
    left = [r["kernel"] for r in rep["kernels"] if r["status"] in ("pending", "paused", "running")]
    if left:
        console.print(f"not finished: {', '.join(left)} — `{resume_hint(args)}` goes on", highlight=False)
    return 1 if any(r["status"] == "crashed" for r in rep["kernels"]) else 0
