"""``cutile-diag diagnose KERNEL`` — the bottleneck and the next optimisations, with evidence.

KERNEL is any of:

* a capture folder (or a folder of captures)  -> static evidence: TileIR + cubin side
* a bare TileIR file                          -> static evidence from the IR only (says what is missing)
* ``file.py::kernel`` or an example name      -> captured ahead of time first, then as a capture folder
* a workload: ``examples:<kernel>``, ``tilegym:<op>``, ``file.py::Workload`` (or an example name
  with ``--gpu``) -> captured, then measured on the GPU: roofline class, % of roof, host time,
  configurations; offline with ``--device PRESET --latency-ms X``.

``--ncu`` (after KERNEL) profiles a workload's diagnosed configuration with Nsight Compute and
puts its rule findings beside the entries they support; ``--ncu FILE`` reads a saved report.
Past loop steps (``--calibrate``, ``--ledger``, or ``./cutile-diag-out/optimize``) calibrate
the expected gains and are listed as predicted vs measured.
"""
from __future__ import annotations

from ..output import console, err_console, print_json, prog

NCU_COLLECT = "collect"     # diagnose.api.NCU_COLLECT (not imported: `--help` stays light)


def register(sub) -> None:
    """Add the ``diagnose`` subcommand and its flags."""
    p = sub.add_parser(
        "diagnose", help="classify the bottleneck and rank the next optimisations, with evidence",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("kernel", help="capture folder, TileIR file, FILE.py::KERNEL, example name or workload")
    p.add_argument("--arch", default=None, help="target arch for captures (default sm_90, or the GPU's)")
    p.add_argument("--entry", help="TileIR entry to analyse when a file holds several (name or symbol)")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=SPEC",
                   help="argument spec for FILE.py::KERNEL without CAPTURE_SPECS (repeatable)")
    p.add_argument("--out", help="keep the capture made for a kernel ref / workload in this folder")
    p.add_argument("--tried", default="", help="playbook ids already tried for this kernel, e.g. B,E (demoted)")
    p.add_argument("--ledger", help="the optimisation loop's ledger.jsonl (or its state folder): the entries it "
                                    "demotes count as tried")
    p.add_argument("--gpu", action="store_true", help="treat an example name as its workload (measure it)")
    p.add_argument("--static", action="store_true", help="never measure, even for a workload")
    p.add_argument("--config", action="append", default=None, help="workload configuration(s) to measure")
    p.add_argument("--device", help="offline: device preset (a100, h100, h200, b200) for --latency-ms")
    p.add_argument("--latency-ms", type=float,
                   help="offline: a recorded latency (ms) of the configuration diagnosed: the costliest of the "
                        "selected ones (pick it with --config)")
    p.add_argument("--roofline", help=f"add GPU evidence from a saved roofline JSON ({prog()} roofline --json)")
    p.add_argument("--ncu", nargs="?", const=NCU_COLLECT, metavar="FILE",
                   help="Nsight Compute evidence: alone, profile the workload's diagnosed configuration with the "
                        "rule-carrying sections (ncu --set full) and read its guided analysis; with FILE, read a "
                        ".ncu-rep, an export JSON (cutile-diag's ncu-export.json) or a {metric: value} JSON")
    p.add_argument("--calibrate", action="append", default=[], metavar="LEDGER",
                   help="the loop's ledgers (files, state folders, or folders searched for ledger.jsonl) whose "
                        "measured steps calibrate the predicted gains (repeatable; --ledger counts too; default: "
                        "./cutile-diag-out/optimize when the loop ran here)")
    p.add_argument("--timeout", type=float, default=300.0, help="per-measurement timeout in seconds")
    p.add_argument("--all", action="store_true", help="show every evidence line")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def request(args):
    """The flags as the diagnose stage's one request."""
    from ..diagnose.api import DiagnoseRequest
    return DiagnoseRequest(kernel=args.kernel, arch=args.arch, entry=args.entry, arg=args.arg, out=args.out,
                           tried=args.tried, ledger=args.ledger, gpu=args.gpu, static=args.static,
                           config=args.config, device=args.device, latency_ms=args.latency_ms,
                           roofline=args.roofline, ncu=args.ncu, calibrate=args.calibrate, timeout=args.timeout)


def run(args) -> int:
    """Diagnose the kernel and print each diagnosis (or the JSON); 0."""
    from ..diagnose.api import diagnose
    echo = None if args.json else err_console.print
    result = diagnose(request(args), echo=echo)
    if args.json:
        print_json(result.to_json())
        return 0
    from ..diagnose.render import render_diagnosis
    for i, d in enumerate(result.diagnoses):
        if i:
            console.rule()
        render_diagnosis(d, console, all_evidence=args.all)
    return 0
