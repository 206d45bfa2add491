"""``cutile-diag roofline <kernel>``: achieved TB/s and TFLOP/s, class, percent of roof, verdict.

    cutile-diag roofline examples:matmul [--config 4096-f16 ...] [--json] [--plot roof.svg] [--ncu]
    cutile-diag roofline path/to/workloads.py::MyOp --config big
    cutile-diag roofline examples:softmax --config 32768x1024-f16 --device h200 --latency-ms 0.061   # offline
    cutile-diag roofline examples:matmul --device h200 --config 4096-f16 2048-f16 --latency-ms 4096-f16=0.25 2048-f16=0.04

``<kernel>`` is a workload reference (``examples:<kernel>``, ``tilegym:<op>``,
``file.py::Workload``).  Each configuration is checked for correctness on fresh random inputs
(a new seed each time, printed and kept in ``--json``; ``--check-seed N`` replays one), then
timed in a subprocess that is killed after ``--timeout`` seconds.  Percent of roof is
given against NVIDIA's datasheet figure and the measured ceiling (offline presets carry the
project's committed measurement where one exists); the theoretical roof (table rate x max
clock) is in ``--json`` and the plot.  Exit status: 0 when every
configuration produced a valid point, 1 when one failed (mismatch, error, timeout) or was
flagged INVALID by the above-roof guard, 2 for bad input.

Two forms need no workload class:

    cutile-diag roofline path/ops/softmax.py::softmax_kernel --arg X=f16[4096,4096] ... [--grid 4096]
    cutile-diag roofline -- pytest tests/ops/test_softmax.py -k "test_perf and cutile"

A kernel reference takes the module's ``CAPTURE_SPECS`` (and ``--arg`` on top); its FLOPs and
bytes are the static count of its TileIR at those specs (``workloads.kernel``), its latency
measured on fresh inputs (no reference, so no correctness check) or given offline.  A command
is run once with every ``ct.launch`` observed (``measure.observe``): one point per
kernel and configuration, measured times (CUDA events per launch) against static FLOPs/bytes
(``roofline.observed``).  Such a command exits 1 when it fails (its exit code and stderr
tail are reported, nothing is written) or launches no cuTile kernel.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import UsageError
from ..output import console, err_console, print_json, prog
from ._args import number_arg


def register(subparsers) -> None:
    """Add the ``roofline`` subcommand and its flags (a workload, a bare kernel, or ``-- COMMAND``)."""
    p = subparsers.add_parser(
        "roofline", help="place a workload's configurations on the device roofline",
        description="Measure (or take recorded latencies for) each configuration of a workload, then report "
                    "TB/s, TFLOP/s, arithmetic intensity, the class, percent of the applicable roof against the "
                    "datasheet peak and the measured ceiling, and a verdict.")
    p.add_argument("kernel", nargs="?",
                   help="workload (examples:<kernel>, tilegym:<op>, path/file.py::Workload) or a bare kernel "
                        "path/file.py::KERNEL; or nothing, and -- COMMAND to place every kernel a command launches")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=SPEC",
                   help="kernel reference: argument spec as for capture (on top of the module's CAPTURE_SPECS)")
    p.add_argument("--grid", metavar="X[,Y[,Z]]",
                   help="kernel reference: launch grid (default: from the module's launch wrapper, run on a CPU)")
    p.add_argument("--pad-us", metavar="US",
                   help="-- COMMAND: GPU spin queued ahead of a launch on an idle stream so its events time the "
                        "kernel, not the host's enqueue (default 50; 0 = off)")
    p.add_argument("--dry-run", action="store_true",
                   help="-- COMMAND: record the launches without executing any kernel (no GPU): static counts only")
    p.add_argument("--config", nargs="+", action="extend", metavar="NAME", help="configurations (default: all)")
    p.add_argument("--list", action="store_true", help="list the workload's configurations and exit")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", metavar="FILE", help="write a roofline chart (.png or .svg)")
    p.add_argument("--device", metavar="PRESET", help="offline device preset (a100, h100, h200, b200)")
    p.add_argument("--latency-ms", nargs="+", metavar="MS|NAME=MS",
                   help="recorded latency: one number (one configuration) or NAME=MS per configuration")
    p.add_argument("--gpu", metavar="N", help="CUDA device index")
    p.add_argument("--ncu", action="store_true", help="also collect Nsight Compute metrics (needs ncu on PATH)")
    p.add_argument("--no-check", action="store_true", help="skip the correctness check (not recommended)")
    p.add_argument("--check-seed", metavar="N", help="seed of the correctness check's inputs (default: a fresh one "
                                                     "per check, reported so that a failure can be replayed)")
    p.add_argument("--no-static", action="store_true", help="skip the static FLOP/byte count from the TileIR")
    p.add_argument("--no-peaks", action="store_true", help="do not measure ceilings when none are cached")
    p.add_argument("--timeout", metavar="S", help="per-configuration timeout (s, default 300); -- COMMAND: "
                                                     "kill the command after S seconds (default: no limit)")
    p.add_argument("--in-process", action="store_true", help="measure in this process (no timeout protection)")
    p.add_argument("--warmup-ms", metavar="MS", help="warm-up budget per configuration (ms)")
    p.add_argument("--rep-ms", metavar="MS", help="timed budget per configuration (ms)")
    p.add_argument("--cuda-graph", action="store_true", help="time CUDA-graph replays (tiny kernels)")
    p.add_argument("--no-flush", action="store_true", help="do not flush L2 between repetitions (warm cache)")
    p.add_argument("--no-batch", action="store_true",
                   help="one event pair per launch, also for short kernels (default: kernels under 0.5 ms are "
                        "timed in CUDA-graph batches, flush subtracted)")
    p.add_argument("--workload-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="argument for the workload's constructor, e.g. source=variant.py")
    p.set_defaults(func=run)


def _kwargs(items: list[str]) -> dict:
    out = {}
    for it in items:
        if "=" not in it:
            raise UsageError(f"--workload-arg '{it}' must look like KEY=VALUE")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _latencies(items: list[str] | None, cfgs) -> dict[str, float] | None:
    if not items:
        return None
    names = [c.name for c in cfgs]
    out: dict[str, float] = {}

    def num(text, where):
        return number_arg(f"--latency-ms {where}", text)      # nan, inf, 0 and negatives are no latency

    if len(items) == 1 and "=" not in items[0]:
        if len(cfgs) != 1:
            raise UsageError(f"one --latency-ms for {len(cfgs)} configurations",
                             hint="pick one with --config, or give NAME=MS for each of " + ", ".join(names))
        return {names[0]: num(items[0], names[0])}
    for it in items:
        if "=" not in it:
            raise UsageError(f"--latency-ms '{it}': with several values give NAME=MS",
                             hint="configurations: " + ", ".join(names))
        k, v = it.split("=", 1)
        if k not in names:
            raise UsageError(f"--latency-ms: no configuration '{k}' selected", hint="selected: " + ", ".join(names))
        out[k] = num(v, k)
    return out


def _check_plot_path(text: str) -> None:
    """Fail before minutes of measuring, not after: the suffix, and a folder that exists or can be made."""
    path = Path(text)
    if path.suffix.lower() not in (".png", ".svg"):
        raise UsageError(f"--plot {path}: the file must end in .png or .svg")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)     # plot_roofline would make it anyway
    except OSError as e:
        raise UsageError(f"--plot {path}: cannot create {path.parent}: {e.strerror or e}") from None
    if not os.access(path.parent, os.W_OK):
        raise UsageError(f"--plot {path}: {path.parent} is not writable")


def _pct(v) -> str:
    return "-" if v is None else f"{v:.0f}%"


def _grid(text: str | None) -> list[int] | None:
    if text is None:
        return None
    parts = [x.strip() for x in text.replace("x", ",").split(",") if x.strip()]
    try:
        grid = [int(x) for x in parts]
    except ValueError:
        grid = []
    if not 1 <= len(grid) <= 3 or any(g <= 0 for g in grid):
        raise UsageError(f"--grid '{text}': give 1 to 3 positive sizes, e.g. 4096 or 32,32")
    return grid


def _is_kernel_ref(ref: str) -> bool:
    """``file.py::name`` naming a @ct.kernel (not a workload)."""
    if "::" not in ref:
        return False
    from ..capture.loader import import_file, is_kernel
    from ..source.ref import split_ref
    path, name = split_ref(ref)
    if not name or not path.exists():
        return False
    return is_kernel(getattr(import_file(path), name, None))


# options that belong to one form only: rejected elsewhere rather than ignored
_FORM_OPTIONS = {"arg": ("kernel",), "grid": ("kernel",), "dry_run": ("command",), "pad_us": ("command",), "config": ("workload",),
                 "list": ("workload",), "workload_arg": ("workload",), "check_seed": ("workload",),
                 "no_check": ("workload",), "latency_ms": ("workload", "kernel"),
                 # the harness's knobs: a command times its own launches
                 **{k: ("workload", "kernel") for k in ("cuda_graph", "in_process", "warmup_ms", "rep_ms", "no_flush",
                                                        "no_static")}}
_FORM_NAMES = {"kernel": "a kernel reference FILE.py::KERNEL", "command": "-- COMMAND", "workload": "a workload"}


def _check_form(args, form: str) -> None:
    for opt, forms in _FORM_OPTIONS.items():
        if form not in forms and getattr(args, opt) not in (None, [], False):
            raise UsageError(f"--{opt.replace('_', '-')} applies only to "
                             + " or ".join(_FORM_NAMES[f] for f in forms))


def run(args: argparse.Namespace) -> int:
    """Place a workload's configurations (or a command's kernels) on the roofline; 1 when one failed, else 0."""
    cmd = getattr(args, "passthrough", None) or []
    if cmd and args.kernel:
        raise UsageError("give a workload or kernel, or -- COMMAND, not both")
    if not cmd and not args.kernel:
        # --config and --latency-ms take several values: a kernel written after them is one of those
        for flag, values in (("--config", args.config), ("--latency-ms", args.latency_ms)):
            eaten = [v for v in values or [] if "::" in v or v.startswith(("examples:", "tilegym:"))]
            if eaten:
                raise UsageError(f"{eaten[0]} was read as a {flag} value ({flag} takes several)",
                                 hint=f"put the kernel before {flag}: {prog()} roofline {eaten[0]} {flag} …")
        raise UsageError("nothing to place on the roofline",
                         hint="give a workload (examples:matmul), a kernel FILE.py::KERNEL, or -- COMMAND")
    if args.plot:
        _check_plot_path(args.plot)
    if cmd:
        _check_form(args, "command")
        from ._roofline_command import run_command
        return run_command(args, cmd)
    form = "kernel" if _is_kernel_ref(args.kernel) else "workload"
    _check_form(args, form)
    return _run_workload(args, form)


def request(args: argparse.Namespace, form: str):
    """The flags (a workload or FILE.py::KERNEL) as the roofline stage's request."""
    from ..measure.roofline import RooflineRequest
    timeout = number_arg("--timeout", args.timeout if args.timeout is not None else "300")
    warmup_ms = number_arg("--warmup-ms", args.warmup_ms, strict=False)
    rep_ms = number_arg("--rep-ms", args.rep_ms, strict=False)
    gpu = number_arg("--gpu", args.gpu, strict=False, integer=True)
    check_seed = number_arg("--check-seed", args.check_seed, strict=False, integer=True)
    kernel = form == "kernel"
    return RooflineRequest(ref=args.kernel, kernel=kernel, arg=args.arg if kernel else [],
                           grid=_grid(args.grid) if kernel else None,
                           workload_args={} if kernel else _kwargs(args.workload_arg), configs=args.config,
                           device=args.device, gpu=gpu, measure_peaks=not args.no_peaks, ncu=args.ncu,
                           flush_l2=not args.no_flush, cuda_graph=args.cuda_graph, batch=not args.no_batch,
                           warmup_ms=warmup_ms, rep_ms=rep_ms, check=not args.no_check, check_seed=check_seed,
                           isolated=not args.in_process, timeout_s=timeout, static=not args.no_static,
                           plot=args.plot)


def _run_workload(args: argparse.Namespace, form: str) -> int:
    from ..measure import roofline as analysis
    req = request(args, form)
    wl = analysis.load_target(req)
    if args.list:
        if args.json:
            print_json(wl.describe())
        else:
            for c in wl.configs:
                console.print(f"{c.name}  {c.params}")
        return 0
    r = analysis.run(req, wl, latencies=lambda cfgs: _latencies(args.latency_ms, cfgs), show=not args.json)
    if r.plot_note:
        err_console.print(r.plot_note)
    if args.json:
        print_json(r.to_json())
        return 1 if r.failed else 0
    _print_table(wl, r.device, r.ceilings, r.results)
    if r.plot:
        console.print(f"plot: {r.plot}")
    return 1 if r.failed else 0


def _print_table(wl, dev, ceilings, results) -> None:
    from rich.markup import escape
    from rich.table import Table
    from ._roofline_command import level_cell
    # one line per configuration in 100 columns: the class and the ridge go to its lines below
    t = Table(title=escape(f"{wl.name} on {dev.name} ({dev.kind})"), box=None, pad_edge=False, header_style="bold",
              caption="bound: by the theoretical ridge (table rate x max clock), launch at the launch floor; "
                      "% datasheet: of NVIDIA's figure for this variant; % measured: of the measured ceiling"
                      + (" (recorded for this preset)" if ceilings and ceilings.recorded_from else "")
                      + "; % attainable: of what is attainable at this size (max of the launch floor, the bytes at "
                        "the measured copy bandwidth for that many bytes, the FLOPs at the compute ceiling); "
                        "--json also has % of the theoretical roof")
    for col, j in (("config", "left"), ("ms", "right"), ("±%", "right"), ("TB/s", "right"), ("TFLOP/s", "right"),
                   ("AI", "right"), ("bound", "left"), ("% datasheet", "right"), ("% measured", "right"),
                   ("% attainable", "right"), ("verdict", "left")):
        t.add_column(col, justify=j, no_wrap=col != "config")
    for r in results:
        p = r.point
        if p is None:
            t.add_row(escape(r.config), "-", "-", "-", "-", "-", "-", "-", "-", "-", f"[red]{r.status.upper()}[/red]")
            continue
        rel = f"{p.stats['rel_std']:.2f}" if p.stats else "rec."
        level = level_cell(p)
        t.add_row(escape(p.config), f"{p.latency_ms:.4f}", rel, f"{p.achieved_tbps:.3f}", f"{p.achieved_tflops:.2f}",
                  "-" if p.ai is None else f"{p.ai:.1f}", p.bound, _pct(p.pct_datasheet), _pct(p.pct_measured),
                  _pct(p.pct_attainable), level)
    console.print(t)
    if getattr(wl, "counts_source", "declared") == "static":
        specs = " ".join(f"{k}={v}" for k, v in wl.configs[0].params.items())
        console.print(escape(f"{wl.name}: {specs}; grid {wl.grid} ({wl.grid_source}); FLOPs and bytes are static "
                             "estimates from the TileIR, the latency is measured on fresh inputs or recorded"))
    for r in results:
        if r.point is None:
            console.print(f"[bold]{escape(r.config)}[/bold]: [red]{r.status}[/red]: {escape(str(r.error))}")
            chk = getattr(r.measure, "check", None)
            if chk is not None and not chk.passed and chk.seed is not None:
                console.print(f"  replay the failing inputs with --check-seed {chk.seed}")
            continue
        p = r.point
        console.print(f"[bold]{escape(p.config)}[/bold]: {escape(p.verdict)}")
        ridge = f"by the theoretical ridge ({p.ridge_theoretical:.0f} FLOP/B): " if p.ridge_theoretical else ""
        console.print(f"  class {escape(p.recipe_class)}; {ridge}{escape(p.bound)}")
        if p.attainable_ms is not None:
            floor = f"; launch floor {p.floor_ms * 1e3:.2f} µs" if p.floor_ms is not None else ""
            console.print(escape(f"  attainable {p.attainable_ms:.4f} ms ({p.attainable_basis}; "
                                 f"{p.attainable_tbps or 0:.2f} TB/s{floor})"))
        if p.check and p.check.get("summary"):
            console.print(f"  correctness: {escape(p.check['summary'])} on inputs from seed {p.check.get('seed')}")
        st = p.static
        if st and st.get("available"):
            ratios = st.get("ratios") or {}
            bt = st.get("bytes_total")
            parts = [f"static: {bt / 1e6:.1f} MB issued" if bt is not None else "static: bytes unknown"]
            if ratios.get("bytes") is not None:
                parts.append(f"{ratios['bytes']:.2f}x declared")
            if st.get("mma_flops"):
                parts.append(f"mma {st['mma_flops'] / 1e9:.1f} GFLOP"
                             + (f" ({ratios['mma_flops']:.2f}x declared)" if ratios.get("mma_flops") else ""))
            parts.append(f"grid {tuple(st['grid'])}")
            if not st.get("exact"):
                unknown = st.get("unknown") or []
                parts.append(("not exact: " + "; ".join(unknown)) if unknown else "upper bound")
            console.print("  " + escape(", ".join(parts)))
        if p.ncu and not p.ncu.get("error"):
            ks = p.ncu.get("kernels") or []
            for k in ks[:3]:
                console.print(f"  ncu {escape(k['name'][:40])}: dram {((k.get('dram_bytes') or 0) / 1e6):.1f} MB, "
                              f"SM {k.get('sm_throughput_pct') or 0:.0f}%, memory {k.get('memory_throughput_pct') or 0:.0f}%, "
                              f"occupancy {k.get('achieved_occupancy_pct') or 0:.0f}%, "
                              f"spills {'yes' if k.get('spills') else 'no'}")
        elif p.ncu:
            console.print(f"  ncu: {escape(str(p.ncu['error']))}")
        seen = set()
        for n in p.notes:
            if n in seen:
                continue
            seen.add(n)
            console.print(f"  [dim]- {escape(n)}[/dim]")
    for w in dev.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}")
