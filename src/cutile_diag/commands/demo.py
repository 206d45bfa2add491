"""``cutile-diag demo`` — the main job on the embedded default: the bundled example kernels.

On any machine: captures every example kernel ahead of time for sm_90 and prints what the
compiler made of each (ops by class, TMA vs gather loads, tensor-core use, registers /
shared memory / spills, remarks of note); then the later pipeline stages that are present
(structural diff of the naive vs the tuned GEMM, a diagnosis of every kernel).
"""
from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from ..output import console, err_console, print_json, prog, progress


def register(sub) -> None:
    """Add the ``demo`` subcommand and its flags."""
    p = sub.add_parser("demo", help="capture and summarise the bundled example kernels (no GPU needed)",
                       description="Capture every bundled example kernel ahead of time (no GPU), summarise what "
                                   "the compiler made of each, diff the naive against the tuned GEMM and "
                                   "diagnose every kernel; ends with the commands to go further.")
    p.add_argument("--arch", default="sm_90", help="target arch (default %(default)s)")
    p.add_argument("--out", default="cutile-diag-out/demo", help="capture folder (default %(default)s)")
    p.add_argument("--kernel", action="append", default=None, help="only these example kernels")
    p.add_argument("--no-campaign", action="store_true",
                   help="skip the simulated campaign (a repository of the example kernels with pytest perf tests)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _campaign(args, out: Path, show: bool) -> dict | None:
    """The simulated campaign over the selected example kernels that have perf tests in its repository."""
    from ..campaign.demo import KERNELS, run_demo
    kernels = [k for k in KERNELS if not args.kernel or k in args.kernel]
    if args.no_campaign or not kernels:
        return None
    say = (lambda m: err_console.print("│ " + m, markup=False, highlight=False, soft_wrap=True)) if show else None
    with progress(1, "simulated campaign", enabled=show) as bar:
        res = run_demo(out / "campaign", kernels, echo=lambda m: (bar.update(m[:70]), say and say(m)))
    return res.report


def _stages(captures: dict, arch: str, show: bool) -> dict:
    """The stages after capture that need no GPU: the naive-vs-tuned GEMM diff and a
    diagnosis of every kernel (the tuned ones too: what is left to gain is worth seeing)."""
    from ..diagnose.engine import diagnose_capture
    from ..diff.core import diff_paths
    results: dict = {}
    if "matmul" in captures and "matmul_tuned" in captures:
        results["diff"] = ("matmul", "matmul_tuned", diff_paths(captures["matmul"].path, captures["matmul_tuned"].path))
    results["diagnoses"] = {}
    with progress(len(captures), "diagnosing", enabled=show) as bar:
        for n, cap in captures.items():
            results["diagnoses"][n] = diagnose_capture(cap, arch=arch)
            bar.advance()
    return results


def _next_steps(out: Path, kernels: list[str]) -> list[tuple[str, str]]:
    """(command, what it shows) for the demo's closing hint, on the kernels just captured."""
    steps = []
    if "matmul" in kernels and "matmul_tuned" in kernels:
        steps.append((f"{prog()} ir-diff {out}/matmul {out}/matmul_tuned --html diff.html", "the full diff as a page"))
    k = kernels[0]
    steps.append((f"{prog()} diagnose {out}/{k} --all", "every fact behind a diagnosis"))
    steps.append((f"{prog()} roofline examples:softmax --config 32768x1024-f16 --device h200 --latency-ms 0.061",
                  "a timing placed on the H200's roofline, offline"))
    return steps


def run(args) -> int:
    """Capture, summarise, diff and diagnose the bundled example kernels, then the simulated campaign unless
    ``--no-campaign``; 0."""
    from ..capture.aot import capture_aot
    from ..capture.render import detail_lines, summary_table
    from ..capture.summary import summarize_capture
    from ..diagnose.render import render_diagnosis
    from ..diff.output import render_summary
    from ..examples import EXAMPLES_DIR, EXAMPLE_KERNELS
    from ..errors import UsageError
    refs = [(k, f"{EXAMPLES_DIR / f}::{k}") for f, ks in EXAMPLE_KERNELS.items() for k in ks]
    if args.kernel:
        known = {k for k, _ in refs}
        bad = [k for k in args.kernel if k not in known]
        if bad:
            raise UsageError(f"no example kernel {', '.join(bad)}", hint="examples: " + ", ".join(sorted(known)))
        refs = [(k, r) for k, r in refs if k in args.kernel]
    out = Path(args.out)
    show = not args.json
    captures = {}
    with progress(len(refs), "capturing examples", enabled=show) as bar:
        for k, ref in refs:
            bar.update(f"capturing {k} for {args.arch}")
            captures[k] = capture_aot(ref, archs=[args.arch], out_dir=out)
            bar.advance()
    summaries = {k: summarize_capture(c, args.arch) for k, c in captures.items()}
    stages = _stages(captures, args.arch, show)
    campaign = _campaign(args, out, show)
    if args.json:
        doc = {"out": str(out), "arch": args.arch, "kernels": summaries}
        if "diff" in stages:
            a, b, d = stages["diff"]
            doc["diff"] = {"before": a, "after": b, "result": d.to_json()}
        doc["diagnoses"] = {k: v.to_json() for k, v in stages["diagnoses"].items()}
        doc["campaign"] = campaign
        print_json(doc)
        return 0
    console.print(summary_table(list(summaries.values()),
                                title=f"cutile-diag demo: {len(captures)} example kernels, {args.arch}, captured into {out}"))
    for k, s in summaries.items():
        console.print(f"\n[bold]{k}[/]")
        for line in detail_lines(s):
            console.print(line)
    if "diff" in stages:
        a, b, d = stages["diff"]
        console.rule(f"structural IR diff: {a} → {b}")
        render_summary(d, console)
        console.print(f"[dim]full diff: {escape(f'{prog()} ir-diff {out}/{a} {out}/{b}')}[/]", soft_wrap=True)
    for k, dg in stages["diagnoses"].items():
        console.rule(f"diagnosis: {k}")
        render_diagnosis(dg, console, brief=True)
    if campaign:
        from ..campaign.run import ratio_text
        console.rule("simulated campaign: every kernel the perf tests launch, ranked and optimised")
        for r in campaign["kernels"]:
            console.print(f"  {r['ref']}: {r['start_ms']:.4f} -> {r['final_ms']:.4f} ms simulated "
                          f"({ratio_text(r, '.2f') or 'no ratio'}, {r['kept_steps']} kept step(s)); {r['stopped']}", highlight=False)
        console.print(f"[dim]report: {campaign['html']} ({prog()} campaign --help)[/]")
    console.print(f"\nArtifacts: {out}/<kernel>/ (TileIR, cubin, SASS, remarks, manifest.json)", soft_wrap=True)
    console.print("Next:")
    # whole commands on lines of their own, so they can be pasted as printed
    for cmd, why in _next_steps(out, list(captures)):
        console.print(f"  {escape(cmd)}   [dim]# {why}[/]", soft_wrap=True)
    return 0
