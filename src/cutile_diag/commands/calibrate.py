"""``cutile-diag calibrate`` — A/A calibration of the loop's measurement on this machine."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError
from ..output import console, print_json, prog, progress
from ._args import positive_arg


def register(sub) -> None:
    """Add the ``calibrate`` subcommand and its flags."""
    p = sub.add_parser(
        "calibrate", help="measure a kernel against itself: the noise floor and false-keep rate of the loop",
        description="Measures one version against an identical copy of itself, interleaved the way the loop "
                    "measures a candidate, N times; reports the 95 % CI half-width of the A/A difference, the "
                    "false keeps and false reverts of the loop's decision rule over the N decisions, and the "
                    "per-measurement noise.  The noise floor is stored for this machine (GPU name + driver) and "
                    "new optimisation loops on it decide with it.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Workload:  {prog()} calibrate examples:softmax\n"
               f"Commands:  {prog()} calibrate --bench-cmd \"pytest tests/ops/test_softmax.py -k 'test_perf and "
               "cutile' --print-record -s\"\n"
               f"No GPU:    {prog()} calibrate --simulate sim.json   (checks the plumbing, not a GPU)")
    p.add_argument("workload", nargs="?", help="workload reference: examples:<kernel>, tilegym:<op>, file.py::Workload")
    p.add_argument("--workload-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="keyword argument for the workload (repeatable; JSON values)")
    p.add_argument("--configs", help="comma-separated subset of the workload's configurations")
    p.add_argument("--bench-cmd", help="benchmark command printing --print-record records (command mode)")
    p.add_argument("--test-cmd", help="correctness command run once first (command mode; optional)")
    p.add_argument("--framework", default="cutile", help="record framework to read from --bench-cmd")
    p.add_argument("--direction", default="forward", choices=("forward", "backward", "both"))
    p.add_argument("--simulate", metavar="SPEC.json", help="a simulated GPU (the plumbing only; nothing is timed; keys: docs/simulate.md)")
    p.add_argument("-n", "--decisions", default="20", help="A/A decisions to measure (default 20)")
    p.add_argument("--rounds", default="3", help="interleaved rounds per decision (the loop's --rounds; default 3)")
    p.add_argument("--rep-ms", help="timed budget per measurement (ms; workload mode)")
    p.add_argument("--warmup-ms", help="warm-up budget per measurement (ms; workload mode)")
    p.add_argument("--no-batch", action="store_true", help="time every launch on its own (workload mode; default: "
                   "kernels under 0.5 ms are timed in CUDA-graph batches)")
    p.add_argument("--device", type=int, help="CUDA device index (workload mode)")
    p.add_argument("--budget-s", help="stop after the last decision that fits in this many seconds")
    p.add_argument("--no-save", action="store_true", help="do not store the noise floor for this machine")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _backend(args):
    from ..loop.factory import backend_spec, make_backend
    if args.test_cmd and not args.bench_cmd:
        raise UsageError("--test-cmd goes with --bench-cmd")
    if not (args.workload or args.bench_cmd or args.simulate):
        raise UsageError("give what to calibrate: a WORKLOAD (examples:softmax, tilegym:rms_norm), "
                         "--bench-cmd CMD, or --simulate SPEC.json")
    opts = {k: positive_arg(f"--{k.replace('_', '-')}", v)
            for k, v in (("rep_ms", args.rep_ms), ("warmup_ms", args.warmup_ms)) if v is not None}
    if args.no_batch:
        opts["batch"] = None
    # command mode: the A/A needs no correctness command ("true" stands in; --test-cmd runs once if given)
    spec = backend_spec(workload=args.workload, workload_args=args.workload_arg,
                        test_cmd=(args.test_cmd or "true") if args.bench_cmd else None,
                        bench_cmd=args.bench_cmd, simulate=args.simulate,
                        configs=[c.strip() for c in args.configs.split(",")] if args.configs else None,
                        framework=args.framework, direction=args.direction, bench_options=opts,
                        device=args.device)
    if args.bench_cmd:
        from ..loop.factory import check_commands
        check_commands(spec, Path.cwd())
    return make_backend(spec)


def run(args) -> int:
    """Run the A/A calibration, store this machine's noise floor and report it; 0 (bad flags are a usage error)."""
    from ..loop.backends import closing
    from ..loop.calibrate import calibrate, save
    n = positive_arg("-n", args.decisions, integer=True)
    rounds = positive_arg("--rounds", args.rounds, integer=True)
    if n < 2 or rounds < 2:
        raise UsageError("calibration needs -n >= 2 decisions of --rounds >= 2 rounds")
    budget = positive_arg("--budget-s", args.budget_s) if args.budget_s is not None else None
    backend = _backend(args)
    with closing(backend), progress(n, "A/A decisions", enabled=not args.json) as bar:
        cal = calibrate(backend, n=n, rounds=rounds, root=Path.cwd(), budget_s=budget,
                        check=not args.bench_cmd or bool(args.test_cmd), progress=lambda i, _n: bar.advance())
    if not args.no_save:
        save(cal)
    if args.json:
        print_json(cal)
        return 0
    _show(cal, args)
    return 0


def _show(cal, args) -> None:
    from rich.table import Table
    t = Table(title=f"A/A calibration: {cal.what}", title_justify="left")
    for c in ("configuration", "median ms", "rel_std %", "round-to-round sd %"):
        t.add_column(c, justify="left" if c == "configuration" else "right")
    for c, d in cal.per_config.items():
        rs = "-" if d.get("rel_std_pct") is None else f"{d['rel_std_pct']:.2f}"
        t.add_row(c, f"{d['median_ms']:.6f}", rs, f"{d['round_sd_pct']:.2f}")
    console.print(t)
    ok = "green" if cal.false_keeps == 0 else "red"
    console.print(f"95 % CI half-width of one A/A decision ({cal.rounds} rounds): [bold]{cal.half_width_pct:.2f} %[/]"
                  f"  (observed spread of the A/A ratios: ±{cal.spread_pct:.2f} %)")
    console.print(f"false keeps: [{ok}]{cal.false_keeps} of {cal.n}[/] decisions"
                  f"  ·  false reverts: {cal.false_reverts} of {cal.n}  ·  measuring took {cal.gpu_s:.1f} s")
    if cal.per_class:
        t = Table(title="per kernel class (its configurations decided on their own)", title_justify="left")
        for c in ("class", "configurations", "false keeps", "false reverts", "CI half-width %", "compared in"):
            t.add_column(c, justify="left" if c in ("class", "configurations", "compared in") else "right")
        for cls, d in cal.per_class.items():
            t.add_row(cls, ", ".join(d["configs"]), f"{d['false_keeps']} of {d['n']}", f"{d['false_reverts']} of {d['n']}",
                      f"{d['half_width_pct']:.2f}", "/".join(d["basis"]))
        console.print(t)
    console.print(f"noise floor: {cal.noise_floor * 100:.3f} % per measurement on {cal.machine or 'an unknown machine'}")
    if cal.saved_to:
        console.print(f"[dim]stored in {cal.saved_to}: new optimisation loops on this machine decide with it[/]")
    elif not cal.machine:
        console.print("[yellow]not stored: the machine (GPU name + driver) is not known here[/]")
    if cal.tuning.get("held"):
        console.print(f"autotune held equal in both processes: {', '.join(cal.tuning['held'])} at the first "
                      "worker's picks")
    for k, why in (cal.tuning.get("searched_again") or {}).items():
        console.print(f"[yellow]autotune {k} searched in each process ({why}): the decisions include two searches[/]")
    if cal.offset_ci_pct and (cal.offset_ci_pct[0] > 0 or cal.offset_ci_pct[1] < 0):
        lo, hi = cal.offset_ci_pct
        console.print(f"[yellow]the copy measures {cal.offset_pct:+.2f} % (95 % CI {lo:+.2f} to {hi:+.2f} %) across the "
                      "decisions: an offset between the two measurement processes that more rounds do not remove; "
                      f"a gain under {max(abs(lo), abs(hi)):.1f} % is not proven on this machine[/]")
    if cal.offset_by_first:
        console.print("the copy's offset by which version started the round: " + ", ".join(
            f"{f} first {v:+.2f} %" for f, v in cal.offset_by_first.items()))
    if cal.spread_pct > 1.5 * cal.half_width_pct and cal.n >= 10:
        console.print("[yellow]the A/A ratios spread wider than the CI says: the measurement drifts between "
                      "decisions (clocks, other processes); more --rounds help[/]")
    if args.simulate:
        console.print("[yellow]simulated: nothing ran on a GPU; this checks the plumbing, not the machine[/]")
