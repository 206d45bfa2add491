"""``cutile-diag optimize`` — run the diagnose-and-optimise loop on a kernel."""
from __future__ import annotations

import argparse

from ..output import console, err_console, print_json, prog
from ._args import add_budget, loop_overrides


def register(sub) -> None:
    """Add the ``optimize`` subcommand and its flags."""
    p = sub.add_parser(
        "optimize", help="make a kernel faster: diagnose, apply one step, verify, measure, keep or revert",
        description="The perf recipe as a loop: refuses a dirty tree, creates branch cutile-perf-<kernel>-<date> in "
                    "its own git worktree (your checkout, index and files are never changed), "
                    "measures the unchanged kernel (iteration 0), then applies one playbook step per iteration, "
                    "checks correctness, measures it against the last kept version (interleaved, every "
                    "configuration), commits, and keeps or reverts by the recipe's rules.  Results: "
                    "<out>/perf_results.md (the table) and <out>/ledger.jsonl (everything behind it).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Measure with a workload:   optimize my_op.py::my_kernel --workload examples:softmax\n"
               "or TileGym-style commands: optimize src/tilegym/ops/cutile/softmax.py::_softmax_kernel \\\n"
               "    --test-cmd \"pytest tests/ops/test_softmax.py -k 'test_ and cutile and not test_perf'\" \\\n"
               "    --bench-cmd \"pytest tests/ops/test_softmax.py -k 'test_perf and cutile' --print-record -s\"\n"
               "    (add --bytes CONFIG=N [--flops CONFIG=N --unit f16:tensor] for the roofline guard)\n"
               "TileGym kernels are module-private: their names start with '_' (_softmax_kernel, _matmul_kernel).\n"
               "Continue an interrupted loop: optimize --resume [KERNEL] (new --test-cmd/--bench-cmd replace the\n"
               f"stored ones).  Manual steps: {prog()} loop next|record.")
    p.add_argument("kernel", nargs="?", help="FILE.py::KERNEL (the @ct.kernel to optimise)")
    m = p.add_argument_group("measurement (choose one)")
    m.add_argument("--workload", help="workload reference: examples:<kernel>, tilegym:<op>, or file.py::Workload")
    m.add_argument("--workload-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword argument for the workload (repeatable; JSON values)")
    m.add_argument("--test-cmd", help="correctness command (exit 0 = PASS), run in the root of the loop's worktree")
    m.add_argument("--bench-cmd", help="benchmark command printing --print-record records (median = latency)")
    m.add_argument("--framework", default="cutile", help="record framework to read from --bench-cmd (default cutile)")
    m.add_argument("--flops", action="append", default=[], metavar="CONFIG=N",
                   help="FLOPs of a --bench-cmd configuration (CONFIG: its test id or a part of it; repeatable): "
                        "with --bytes, the roofline guard and class for command-measured loops")
    m.add_argument("--bytes", action="append", default=[], metavar="CONFIG=N",
                   help="bytes moved by a --bench-cmd configuration (as --flops)")
    m.add_argument("--unit", metavar="DTYPE:UNIT", help="compute roof for --flops, e.g. f16:tensor or f32:cuda")
    m.add_argument("--roof-device", metavar="PRESET",
                   help="device preset for that roofline (h100, h200, ...; default: the live GPU)")
    m.add_argument("--no-replay", action="store_true",
                   help="command mode without replay: every check and timed run is a run of --test-cmd/--bench-cmd "
                        "(default: the baseline's check records the kernel's launches and versions are checked and "
                        "timed on them; --test-cmd confirms each kept step, --bench-cmd runs at start and end)")
    m.add_argument("--direction", default="forward", choices=("forward", "backward", "both"),
                   help="which record direction is the latency (default forward)")
    m.add_argument("--simulate", metavar="SPEC.json", help="a simulated GPU (CI, demos, no GPU): latencies from the transforms applied, "
                        "planted failures; keys and an example: docs/simulate.md")
    m.add_argument("--configs", help="comma-separated subset of the workload's configurations")
    m.add_argument("--rep-ms", type=float, help="timed budget per measurement (ms; workload backend)")
    m.add_argument("--warmup-ms", type=float, help="warm-up budget per measurement (ms; workload backend)")
    m.add_argument("--no-batch", action="store_true",
                   help="time every launch on its own (default: kernels under 0.5 ms are timed in CUDA-graph "
                        "batches; workload backend)")
    m.add_argument("--device", type=int, help="CUDA device index for the workload backend")
    lp = p.add_argument_group("loop")
    lp.add_argument("--max-iterations", type=int, default=None, help="stop after N iterations (1..25, default 25)")
    add_budget(lp, help="time budget per iteration in seconds (default 600); a candidate that hangs is killed "
                         "and recorded as crash; a sweep point killed at its share, or a screened one "
                         "killed while confirming, is recorded as out of time (budget)")
    lp.add_argument("--time-limit", type=float, default=None, metavar="S",
                    help="wall time for this run in seconds: no step starts that would not fit, and the loop "
                         "stops with a resumable record (rule time-limit); not inherited by --resume")
    lp.add_argument("--rounds", type=int, default=None,
                    help="interleaved measurement rounds per comparison (default 3; 2 when the 2 x 3 runs of "
                         "one comparison would take more than 1/8 of --budget, e.g. a pytest --bench-cmd)")
    lp.add_argument("--continue", dest="keep_going", action="store_true",
                    help="go on after a step that gained < 2 %% (the recipe stops there)")
    lp.add_argument("--until-roof", type=float, default=None, metavar="F",
                    help="go on past a < 2 %% step (and past two steps without gain) while the kept "
                         "version is below F (0..1) of the time attainable at the kernel's size; stop once it is there")
    lp.add_argument("--lookahead", type=float, default=None, metavar="F",
                    help="with --until-roof/--continue: a structural step at most F slower (default 0.05; 0: off) "
                         "stays a frontier for one more step, whose candidates are screened on it too")
    lp.add_argument("--beam", type=int, default=None, metavar="N",
                    help="keep the N best measured transform sets and try each step on the one most likely "
                         "to gain, dropping transforms too (default 3 with --until-roof/--continue; 1: the greedy walk)")
    lp.add_argument("--max-sweep", type=int, default=None,
                    help="parameter settings screened per sweep step (default 4; down to 2 when screening 4 "
                         "would take more than 1/8 of --budget, e.g. a pytest --bench-cmd)")
    lp.add_argument("--only", help="comma-separated playbook ids the loop may try (e.g. A,B,E)")
    lp.add_argument("--skip", help="comma-separated playbook ids the loop must not try")
    lp.add_argument("--wrapper", action="append", default=[], metavar="FILE.py[::FN]",
                    help="launch wrapper in another file (it may change too; repeatable)")
    lp.add_argument("--branch", help="branch name (default cutile-perf-<kernel>-<YYYYMMDD>)")
    lp.add_argument("--out", help="state folder root (default <repo>/cutile-diag-out/optimize)")
    lp.add_argument("--arch", action="append", default=None, help="AOT capture arch for the diagnosis (default sm_90)")
    lp.add_argument("--no-capture", action="store_true", help="no AOT capture (diagnosis from the source only)")
    lp.add_argument("--capture-arg", action="append", default=[], metavar="NAME=SPEC",
                    help="argument spec for the AOT capture when the module has no CAPTURE_SPECS")
    lp.add_argument("--capture-workload", metavar="REF",
                    help="take the capture's kernel arguments from this workload's launch (default: the --workload; "
                         "useful with --test-cmd on a machine without a GPU, or --simulate)")
    lp.add_argument("--resume", action="store_true", help="continue an interrupted loop from its ledger")
    lp.add_argument("--plan", action="store_true", help="locate, classify and diagnose only; change nothing")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def request(args):
    """The flags as the loop's one typed request."""
    from ..loop.api import Measurement, OptimizeRequest
    m = Measurement(workload=args.workload, workload_args=args.workload_arg, test_cmd=args.test_cmd,
                    bench_cmd=args.bench_cmd, framework=args.framework, direction=args.direction,
                    simulate=args.simulate, configs=[c.strip() for c in args.configs.split(",")] if args.configs
                    else None, rep_ms=args.rep_ms, warmup_ms=args.warmup_ms, batch=not args.no_batch, device=args.device, flops=args.flops,
                    bytes=args.bytes, unit=args.unit, roof_device=args.roof_device, replay=not args.no_replay)
    return OptimizeRequest(kernel=args.kernel, measurement=m, options=loop_overrides(args), resume=args.resume, out=args.out,
                           branch=args.branch, wrappers=args.wrapper)


def _echo(args):
    """Progress lines on stderr (stdout keeps the result; nothing extra with --json)."""
    if args.json:
        return None
    return lambda s: err_console.print("│ " + s, markup=False, highlight=False, soft_wrap=True)


def run(args) -> int:
    """Run the loop (or ``--plan`` only) and show its table; 143 on SIGTERM, the worktree on the last kept commit."""
    from ..loop.proc import exit_on_sigterm
    # like Ctrl-C: the child's process group is killed, the loop's worktree is on the last kept commit
    return exit_on_sigterm(lambda: _run(args), f"; `{prog()} optimize --resume` records it and goes on")


def _run(args) -> int:
    from ..loop import api
    if args.plan:
        return _plan(args)
    result = api.optimize(request(args), echo=_echo(args))
    if args.json:
        print_json(result)
        return 0
    _show(result)
    return 0


def ledger_table(rows, title: str):
    """The perf_results.md rows for a terminal (``optimize``, ``loop status``): within 100 columns,
    the optimization text wraps inside its own column, the figures stay one line."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("it", "optimization", "latency_ms", "correctness", "status"):
        t.add_column(c, justify="right" if c in ("it", "latency_ms") else "left",
                     ratio=1 if c == "optimization" else None, no_wrap=c != "optimization")
    colors = {"keep": "green", "revert": "yellow", "crash": "red", "inconclusive": "cyan"}
    for r in rows:
        lat = "-" if r.get("latency_ms") is None else f"{r['latency_ms']:.6f}"
        t.add_row(str(r["iteration"]), escape(str(r["optimization"])), lat, escape(str(r.get("correctness") or "-")),
                  f"[{colors.get(r['status'], 'white')}]{escape(str(r['status']))}[/]")
    return t


def _show(result) -> None:
    from ..loop.session import loop_args
    console.print(ledger_table(result.rows, f"perf_results.md  ({result.table})"))
    for c, info in list((result.classification or {}).items())[:3]:
        console.print(f"{c}: arithmetic intensity {info['ai']:.3g} FLOP/B ({info['recipe_class']}"
                      + (f"; {info['bound']} roof" if info.get("bound") else "") + ")")
    guard = result.roofline_guard or {}
    if guard and not guard.get("ran"):
        console.print(f"[yellow]roofline guard not run:[/] {guard.get('why')}", highlight=False)
    elif guard.get("unchecked"):
        console.print(f"[yellow]roofline guard partial:[/] {guard.get('why')}", highlight=False)
    console.print(f"stopped: {result.stop_reason}")
    if result.baseline_ms and result.final_ms:
        console.print(latency_line(result.baseline_ms, result.final_ms, result.kept_commit, result.simulated))
    for m in result.manual[:3]:
        console.print(f"manual entry {m['id']} ({m['name']}): {prog()} loop next{loop_args(result.state_dir)} "
                      f"--entry {m['id']}")
    show_take(result.branch, result.worktree, result.take, result.state_dir)
    console.print(f"[dim]ledger: {result.ledger}[/]")


def latency_line(baseline_ms: float, final_ms: float, kept_commit: str | None, simulated: bool) -> str:
    """The one-line latency summary; a simulated run says its ratio is no speedup."""
    ratio = f"{baseline_ms / final_ms:.3f}x"
    if simulated:
        return (f"simulated latency {baseline_ms:.6f} ms -> {final_ms:.6f} ms ({ratio} in the simulation spec: "
                f"nothing ran on a GPU, not a speedup); kept commit {str(kept_commit)[:12]}")
    return f"latency {baseline_ms:.6f} ms -> {final_ms:.6f} ms ({ratio}); kept commit {str(kept_commit)[:12]}"


def show_take(branch: str, worktree: str, take: list[str], state_dir: str | None = None) -> None:
    """How to bring the kept result into the user's branch (the loop never does it itself)."""
    from ..loop.session import loop_args
    sel = loop_args(state_dir) if state_dir else ""
    if not take:
        console.print(f"nothing kept to take; the loop's worktree: {worktree} (`{prog()} loop clean{sel}` removes it)",
                      highlight=False)
        return
    console.print(f"the kept result is on branch [bold]{branch}[/] (worktree {worktree}); take it into your branch "
                  "with one of:", highlight=False)
    for c in take:
        console.print(f"  {c}", markup=False, highlight=False)
    console.print(f"then `{prog()} loop clean{sel}` removes the worktree (--delete-branch: the branch too)",
                  highlight=False)


def _plan(args) -> int:
    """Locate, capture (temp), diagnose and list what the loop would try — nothing is changed."""
    from rich.markup import escape

    from ..loop import api
    p = api.plan(request(args))
    if args.json:
        print_json(p)
        return 0
    loc, cap, diag = p.location, p.capture, p.diagnosis
    console.print(f"[bold]{loc['function']}[/] in {loc['path']} (line {loc['line']}); "
                  f"wrappers: {', '.join(loc['wrappers']) or '-'}")
    if cap is not None and not cap["ok"]:
        # escaped: the error holds specs like X=DTYPE[d0,d1], which rich would take for markup
        console.print(f"[yellow]capture failed:[/] {escape(cap['error'])}", highlight=False)
    elif cap is not None:
        console.print(f"capture: arguments from {cap.get('source') or 'specs'}", highlight=False)
    console.print(f"bottleneck: {diag.bottleneck} ({diag.confidence}); " + escape("; ".join(diag.reasons[:2])))
    for n in diag.notes[:3]:
        console.print(f"[dim]note: {escape(n)}[/]")
    for r in diag.recommendations:
        how = f"automatic: {r.transform}" if r.automatic else "manual (loop next)"
        console.print(f"  {r.id:>2} {r.name} — {how}" + (f" [dim](tried {r.tried})[/]" if r.tried else ""))
    if diag.escalate:
        console.print("[yellow]the loop would hand over to a person right away[/]")
    return 0
