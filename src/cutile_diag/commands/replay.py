"""``cutile-diag replay FOLDER`` — time a recorded launch and check it against its recorded outputs."""
from __future__ import annotations

from ..errors import UsageError
from ..output import console, print_json


def register(sub) -> None:
    """Add the ``replay`` subcommand and its flags."""
    p = sub.add_parser(
        "replay", help="time a recorded launch and check it against the recorded outputs",
        description="A recording (made by the campaign's survey or the loop's first check run in command mode) "
                    "holds one launch of a kernel: its inputs, grid, the wrapper call that made it and the "
                    "outputs it gave. This times the kernel's module as it is now on those inputs (L2 flushed, "
                    "CUDA graphs) and checks the outputs, by dtype tolerance.")
    p.add_argument("folder", help="a replay folder (replay.json inside) or a folder of them")
    p.add_argument("--file", help="import the kernel's module from this file instead (e.g. an edited copy)")
    p.add_argument("--rep-ms", type=float, default=None, help="timed budget per recording (ms)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args) -> int:
    """Time and check each recording in the folder; 0 when all check, else 1."""
    from ..harness.timing import BenchOptions
    from ..measure.replay import replay_folder
    opts = BenchOptions()
    if args.rep_ms is not None:
        if args.rep_ms <= 0:
            raise UsageError("--rep-ms must be > 0")
        opts.rep_ms = args.rep_ms
    res = replay_folder(args.folder, options=opts, file=args.file)
    if args.json:
        print_json(res.to_json())
    else:
        for r in res.results:
            t = f"{r.median_ms:.4f} ms" if r.median_ms is not None else "-"
            check = r.check.summary if r.check else ""
            console.print(f"{res.kernel} {r.config}: {r.status}  median {t}  {check or r.error or ''}")
        for c, n in res.notes.items():
            console.print(f"[dim]{c}: {n}[/]")
    gpu = next((r for r in res.results if r.status == "no_gpu"), None)
    if gpu is not None:
        raise UsageError(gpu.error)
    return 0 if res.ok else 1
