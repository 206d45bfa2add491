#!/usr/bin/env python3
"""Benchmark of ``cutile-diag ir-diff`` on ~10,000-op TileIR pairs (issue 3: < 1 s per pair
on the 2-core CI machine; issue 14: still so on the networkx graph).  CPU only; no GPU.

Usage (repository root)::

    python bench/bench_diff.py [--ops 10000] [--repeat 7] [--source aot|jit] [--no-write]

Inputs are synthesised from real dumps (``cutile_diag.diff.synth``): the innermost ``for``
loops of real kernels are unrolled until an entry has ``--ops`` ops, and the after side is
derived from the before side:

* ``equivalent``   matmul_tuned (nested loops), every SSA value renamed and independent ops
                   reordered: the worst case for matching (nothing lines up by name or line);
* ``hints``        matmul, renamed, with a latency hint on every 10th load (attribute deltas);
* ``tile``         matmul vs its TM=64 variant, unrolled, renamed, reordered: every tile type
                   changes (~4,000 attribute deltas; only the untouched ops anchor exactly);
* ``topology``     vector_add_persistent unrolled 5 % further, renamed and reordered: ~500 ops
                   added (topology deltas);
* ``loc``          matmul_tuned with ``-g`` source locations on both sides (the capture
                   folder's ``kernel.loc.tileir`` form), renamed: location aliases resolved too.

``--source aot`` (default) exports the example kernels with cuTile and disassembles them
here (with ``-g``); ``--source jit`` uses the H200 JIT dumps committed under
tests/capture/fixtures/jit-h200 (no locations; no cuTile needed).

Each repetition is timed as the CLI runs it, minus interpreter start-up: ``diff_paths`` on
the two files (read + parse both, graph, match, deltas, classification) and the JSON report
exactly as ``--json`` prints it; the rich and HTML renderings are timed separately.  The parser's
template/type caches are cleared and the heap collected before every repetition, so each
one starts as a fresh process would.  Reports the median (headline), min and max; writes
bench/results/diff_benchmark.json and .md.

Side by side in the same run, on the same files: ``array`` is the whole pipeline with the
positional-array graph and matcher the networkx graph replaced (frozen under
``bench/array_matcher/`` as of commit 24ec50e, read from git: no networkx graph, no signature stage, no impact slices; the same
parser, deltas, classification and JSON), and ``difflib`` a unified line diff.  The load
average (``uptime``) is recorded before and after: the machine is shared.
"""
from __future__ import annotations

import argparse
import datetime as dt
import gc
import io
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))      # the checkout's cutile_diag, installed or not

TARGET_S = 1.0
KERNELS = ("matmul", "matmul_tuned", "vector_add_persistent")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def base_dumps(source: str) -> dict[str, str]:
    """name -> TileIR text of the real kernels the inputs are made from."""
    if source == "jit":
        d = ROOT / "tests" / "capture" / "fixtures" / "jit-h200"
        out = {k: (d / f"{k}.tileir").read_text() for k in KERNELS}
        # the TM=64 variant, as the symbol and the tile types print it (a text edit of the dump)
        out["matmul_tm64"] = tm64_by_text(out["matmul"])
        return out
    os.environ.pop("CUDA_HOME", None)        # tileiras would load an older libnvvm from there
    from cutile_diag.capture import loader, spec as spec_mod
    from cutile_diag.capture.aot import export_bytecode, specs_for
    from cutile_diag.examples import EXAMPLE_KERNELS, EXAMPLES_DIR
    from cutile_diag.toolchain import run_tool
    files = {k: f for f, ks in EXAMPLE_KERNELS.items() for k in ks}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, name, over in [(k, k, {}) for k in KERNELS] + [("matmul", "matmul_tm64", {"TM": "64"})]:
            loaded = loader.load_kernel(f"{EXAMPLES_DIR / files[k]}::{k}")
            specs = dict(specs_for(loaded, None))
            specs.update({p: spec_mod.parse_spec(v, where=p) for p, v in over.items()})
            bc = export_bytecode(loaded, spec_mod.bind(loaded, specs))
            p = Path(tmp) / f"{name}.tileirbc"
            p.write_bytes(bc)
            out[name] = run_tool("tileirdisasm", ["-g", str(p)]).stdout
    return out


def tm64_by_text(text: str) -> str:
    """matmul 128x128x64 -> 64x128x64 on the printed dump (for --source jit, no cuTile)."""
    t = text.replace("_I128_I128_I64(", "_I64_I128_I64(")
    t = t.replace("tile=(128x64)", "tile=(64x64)").replace("tile<128x64xf16>", "tile<64x64xf16>")
    t = t.replace("tile=(128x128)", "tile=(64x128)")
    return t.replace("tile<128x128xf32>", "tile<64x128xf32>").replace("tile<128x128xf16>", "tile<64x128xf16>")


def strip_locations(text: str) -> str:
    """The plain tileirdisasm form of a -g dump: no loc(...) suffixes, no alias table."""
    import re
    body = [ln for ln in text.split("\n") if not ln.startswith("#")]
    return "\n".join(re.sub(r" loc\(#[^)]*\)$", "", ln) for ln in body)


def scenarios(bases: dict[str, str], ops: int, has_loc: bool) -> list[dict]:
    from cutile_diag.diff import synth
    from cutile_diag.ir_parsers.tileir import parse_tileir

    def plain(t: str) -> str:
        return strip_locations(t) if has_loc else t

    out = []
    a = synth.unroll(plain(bases["matmul_tuned"]), 10 ** 6, max_ops=ops)
    out.append({"name": "equivalent", "what": "matmul_tuned unrolled; after: every value renamed, "
                "independent ops reordered", "a": a, "b": synth.shuffle(synth.renumber(a, 1), 1),
                "expect": "equivalent"})
    a = synth.unroll(plain(bases["matmul"]), 10 ** 6, max_ops=ops)
    b = synth.renumber(a, 2, style="shuffle")
    loads = synth.op_lines(b, "load_view_tko")[::10]
    out.append({"name": "hints", "what": f"matmul unrolled; after: renamed, latency=3 on {len(loads)} "
                "loads (1 in 10)", "a": a, "b": synth.set_op_hint(b, loads, "latency", 3),
                "expect": ("op_hint", len(loads))})
    a = synth.unroll(plain(bases["matmul"]), 10 ** 6, max_ops=ops)
    b = synth.unroll(plain(bases["matmul_tm64"]), 10 ** 6, max_ops=ops)
    out.append({"name": "tile", "what": "matmul unrolled; after: the TM=64 variant, renamed, reordered "
                "(every tile type changes: ~4,000 attribute deltas, no exact anchors there)",
                "a": a, "b": synth.shuffle(synth.renumber(b, 5), 5), "expect": ("tile_shape", 3)})
    a = synth.unroll(plain(bases["vector_add_persistent"]), 10 ** 6, max_ops=ops)
    b = synth.unroll(plain(bases["vector_add_persistent"]), 10 ** 6, max_ops=int(ops * 1.05))
    out.append({"name": "topology", "what": "vector_add_persistent unrolled; after: unrolled 5 % "
                "further, renamed, reordered", "a": a, "b": synth.shuffle(synth.renumber(b, 3), 3),
                "expect": "added"})
    if has_loc:
        a = synth.unroll(bases["matmul_tuned"], 10 ** 6, max_ops=ops)
        out.append({"name": "loc", "what": "matmul_tuned unrolled, with -g locations; after: renamed",
                    "a": a, "b": synth.renumber(a, 4), "expect": "equivalent"})
    for s in out:
        s["ops_a"] = synth.module_size(parse_tileir(s["a"]))
        s["ops_b"] = synth.module_size(parse_tileir(s["b"]))
    return out


def clear_caches() -> None:
    from cutile_diag.ir_parsers import tileir, tileir_types
    tileir._TEMPLATES.clear()
    tileir._TYPES_CACHE.clear()
    tileir_types._TYPE_CACHE.clear()


def check(s: dict, res) -> str | None:
    """Why the diff is wrong for this scenario, or None."""
    exp = s["expect"]
    if exp == "equivalent":
        return None if res.equivalent else f"expected equivalent, got {len(res.changes)} changes"
    if exp == "added":
        sd = res.summary()["structural"]
        added = sd.get("added", 0)
        want = s["ops_b"] - s["ops_a"]
        return None if added == want and set(sd) <= {"added", "rewired"} else \
            f"expected {want} added ops, got {sd}"
    kind, n = exp
    got = [c for c in res.changes if c.kind == kind]
    others = [c for c in res.changes if c.kind != kind]
    return None if len(got) == n and not others else \
        f"expected {n} {kind} changes, got {len(got)} (+{len(others)} others)"


def load_average() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


# the commit whose bench/array_matcher/ froze the array matcher that issue 14 replaced: read from
# git history rather than kept as a second copy of diff/graph.py and diff/match.py in the tree
FROZEN_MATCHER = "24ec50e"


def frozen_matcher() -> Path:
    """A folder holding the package ``array_matcher`` as committed at FROZEN_MATCHER."""
    import subprocess
    dest = Path(tempfile.mkdtemp(prefix="bench-diff-")) / "array_matcher"
    dest.mkdir()
    for name in ("__init__.py", "graph.py", "match.py"):
        p = subprocess.run(["git", "-C", str(ROOT), "show", f"{FROZEN_MATCHER}:bench/array_matcher/{name}"],
                           capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(f"bench_diff: the frozen array matcher needs this checkout's git history "
                             f"(commit {FROZEN_MATCHER}): {p.stderr.strip()}")
        (dest / name).write_text(p.stdout)
    return dest.parent


def legacy_total(pa: Path, pb: Path) -> dict:
    """The same diff + JSON with the array graph and matcher this benchmark compares against."""
    from cutile_diag.diff import core
    from cutile_diag.diff.output import to_json
    from cutile_diag.output import dumps
    sys.path.insert(0, str(frozen_matcher()))
    from array_matcher.graph import build_graph as array_graph
    from array_matcher.match import match_graphs as array_match
    saved = core.build_graph, core.match_graphs, core.impact_slices
    core.build_graph, core.match_graphs, core.impact_slices = array_graph, array_match, lambda *a, **k: None
    try:
        clear_caches()
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        res = core.diff_paths(pa, pb, cubin=False)
        dumps(to_json(res))
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        core.build_graph, core.match_graphs, core.impact_slices = saved
    tm = res.timings
    return {"total": total, "cpu": cpu, "graph": tm["graph"], "match": tm["match"], "_res": res}


def same_matching(new, old) -> bool:
    """Both pipelines report the same changes and deltas."""
    key = lambda r: (sorted((c.kind, repr(c.before), repr(c.after)) for c in r.changes),  # noqa: E731
                     r.summary()["structural"])
    return key(new) == key(old)


def time_one(pa: Path, pb: Path) -> dict:
    from rich.console import Console
    from cutile_diag.diff.core import diff_paths
    from cutile_diag.diff.output import render, render_html, to_json
    from cutile_diag.output import dumps
    clear_caches()
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    res = diff_paths(pa, pb, cubin=False)
    t1 = time.perf_counter()
    text = dumps(to_json(res))              # what `ir-diff --json` prints
    t2, c2 = time.perf_counter(), time.process_time()
    # as cutile_diag.output.console is configured (no repr highlighting), into memory
    render(res, Console(file=io.StringIO(), width=120, highlight=False, soft_wrap=False), limit=200)
    t3 = time.perf_counter()
    render_html(res)
    t4 = time.perf_counter()
    tm = res.timings
    return {"total": t2 - t0, "cpu": c2 - c0, "diff_paths": t1 - t0, "parse": tm["parse"], "graph": tm["graph"],
            "match": tm["match"], "deltas": tm["deltas"] + tm["classify"], "impact": tm["impact"],
            "json": t2 - t1,
            "rich": t3 - t2, "html": t4 - t3, "json_bytes": len(text), "_res": res}


def line_diff(pa: Path, pb: Path) -> tuple[float, int]:
    """The baseline a kernel author has today: a unified line diff (difflib) of the same files.
    Returns (seconds, changed lines)."""
    import difflib
    t0 = time.perf_counter()
    a, b = pa.read_text().splitlines(), pb.read_text().splitlines()
    n = sum(1 for ln in difflib.unified_diff(a, b, lineterm="", n=0)
            if ln[:1] in "+-" and not ln.startswith(("+++", "---")))
    return time.perf_counter() - t0, n


def cli_wall(pa: Path, pb: Path, repeat: int = 3) -> float:
    """`cutile-diag ir-diff --json` as a user runs it: a new interpreter, imports included."""
    import subprocess
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "cutile_diag", "ir-diff", "--json", str(pa), str(pb)],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - t0)
        if r.returncode not in (0, 1):
            raise SystemExit(f"ir-diff failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    return statistics.median(times)


def versions() -> dict:
    from importlib import metadata
    out = {"python": platform.python_version()}
    for pkg in ("cutile-diag", "networkx", "rich", "cuda-tile", "hypothesis"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    try:
        from cutile_diag.toolchain import tool_version
        out["tileirdisasm"] = tool_version("tileirdisasm")
    except Exception:
        out["tileirdisasm"] = None
    return out


def machine() -> dict:
    model = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) // 1024 // 1024} GiB"
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "memory": mem, "os": platform.platform(),
            "gpu": "none used"}


COLS = ("parse", "graph", "match", "deltas", "impact", "json", "total", "cpu")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=10000, help="ops per side (default %(default)s)")
    ap.add_argument("--repeat", type=int, default=7, help="timed repetitions per pair (default %(default)s)")
    ap.add_argument("--source", choices=("aot", "jit"), default="aot")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    exe = Path(sys.executable)
    py = os.path.relpath(exe, ROOT) if str(exe).startswith(str(ROOT)) else "python"
    command = " ".join(shlex.quote(x) for x in [py, os.path.relpath(__file__, ROOT), *sys.argv[1:]])

    log(f"base dumps ({args.source}) ...")
    bases = base_dumps(args.source)
    log("synthesising inputs ...")
    cases = scenarios(bases, args.ops, has_loc=args.source == "aot")
    rows = []
    failures = []
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        for s in cases:
            pa, pb = Path(tmp) / f"{s['name']}.before.tileir", Path(tmp) / f"{s['name']}.after.tileir"
            pa.write_text(s["a"])
            pb.write_text(s["b"])
            time_one(pa, pb)                                   # warm-up (imports, code paths)
            legacy_total(pa, pb)
            reps, old = [], []
            for _ in range(args.repeat):                       # interleaved: the same load for both
                r = time_one(pa, pb)
                res = r.pop("_res")
                reps.append(r)
                del res
                o = legacy_total(pa, pb)
                o.pop("_res")
                old.append(o)
            res = time_one(pa, pb)["_res"]
            why = check(s, res)
            if why:
                failures.append(f"{s['name']}: {why}")
            agree = same_matching(res, legacy_total(pa, pb)["_res"])
            med = {k: statistics.median(r[k] for r in reps) for k in reps[0]}
            old_med = {k: statistics.median(r[k] for r in old) for k in old[0]}
            ld = [line_diff(pa, pb) for _ in range(3)]
            line_s, line_n = statistics.median(x[0] for x in ld), ld[0][1]
            wall = cli_wall(pa, pb)
            row = {"name": s["name"], "what": s["what"], "ops_before": s["ops_a"], "ops_after": s["ops_b"],
                   "bytes_before": pa.stat().st_size, "bytes_after": pb.stat().st_size,
                   "median_s": {k: round(v, 4) for k, v in med.items() if k != "json_bytes"},
                   "min_total_s": round(min(r["total"] for r in reps), 4),
                   "max_total_s": round(max(r["total"] for r in reps), 4),
                   "ops_per_s": round((s["ops_a"] + s["ops_b"]) / med["total"]),
                   "json_bytes": int(med["json_bytes"]),
                   "line_diff_s": round(line_s, 4), "line_diff_changed_lines": line_n,
                   "vs_line_diff": round(med["total"] / line_s, 2), "cli_wall_s": round(wall, 3),
                   "array_s": {k: round(v, 4) for k, v in old_med.items()},
                   "vs_array": round(med["total"] / old_med["total"], 2), "same_as_array": agree,
                   "changes": len(res.changes),
                   "correct": why is None, "meets_target": med["total"] < TARGET_S}
            rows.append(row)
            log(f"  {s['name']}: {row['ops_before']} → {row['ops_after']} ops, median {med['total']:.3f} s")

    load_after = load_average()
    head = f"{'pair':<11} {'ops A':>6} {'ops B':>6} " + " ".join(f"{c:>7}" for c in COLS) + \
        f" {'ops/s':>8} {'rich':>6} {'html':>6} {'array':>7} {'a.cpu':>6} {'x':>5} {'difflib':>8} {'ratio':>6} {'cli':>6}"
    print(head)
    print("-" * len(head))
    for r in rows:
        m = r["median_s"]
        print(f"{r['name']:<11} {r['ops_before']:>6} {r['ops_after']:>6} "
              + " ".join(f"{m[c]:>7.3f}" for c in COLS)
              + f" {r['ops_per_s']:>8} {m['rich']:>6.3f} {m['html']:>6.3f} {r['array_s']['total']:>7.3f}"
              + f" {r['array_s']['cpu']:>6.3f}"
              + f" {r['vs_array']:>4.2f}x {r['line_diff_s']:>8.3f}"
              + f" {r['vs_line_diff']:>5.1f}x {r['cli_wall_s']:>6.2f}")
    print(f"(seconds, median of {args.repeat}; total = read + parse both files + graph + match + "
          f"deltas/classify + impact slices + JSON report, wall clock; cpu = its process CPU time (what load "
          f"on the shared machine inflates least); ops/s counts both sides; array / a.cpu = the same with "
          f"the array graph/matcher this replaced, x = total / array; difflib = unified line diff of "
          f"the same files, ratio = total / difflib; cli = whole `cutile-diag ir-diff --json` process)")
    print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}")
    worst = max(r["median_s"]["total"] for r in rows)
    failures += [f"{r['name']}: changes differ from the array matcher's" for r in rows if not r["same_as_array"]]
    ok = all(r["meets_target"] for r in rows) and not failures
    print(f"target < {TARGET_S:.1f} s per ~{args.ops}-op pair: {'MET' if ok else 'NOT MET'} "
          f"(worst median {worst:.3f} s)")
    for f in failures:
        print(f"WRONG RESULT: {f}")

    doc = {"schema": "cutile-diag.bench-diff/1",
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "command": command, "machine": machine(), "versions": versions(),
           "ops_per_side": args.ops, "repeat": args.repeat, "source": args.source,
           "target_s": TARGET_S, "target_met": ok, "wrong_results": failures,
           "load_average": {"before": load_before, "after": load_after}, "pairs": rows}
    if not args.no_write:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "diff_benchmark.json").write_text(json.dumps(doc, indent=2) + "\n")
        (args.out / "diff_benchmark.md").write_text(markdown(doc))
        log(f"wrote {args.out / 'diff_benchmark.json'} and .md")
    return 0 if ok else 1


def markdown(doc: dict) -> str:
    m, v = doc["machine"], doc["versions"]
    lines = [
        "# ir-diff benchmark: ~10,000-op TileIR pairs",
        "",
        f"- date: {doc['date']}",
        f"- machine: {m['cpu']}, {m['cores']} cores, {m['memory']}, {m['os']} (no GPU)",
        f"- versions: Python {v['python']}, cutile-diag {v['cutile-diag']}, networkx {v['networkx']}, "
        f"rich {v['rich']}, cuda-tile {v['cuda-tile']}, tileirdisasm {v['tileirdisasm']}",
        f"- command: `{doc['command']}`",
        f"- inputs: synthesised from real dumps (`--source {doc['source']}`), {doc['ops_per_side']} ops per "
        "side; see the script's docstring",
        f"- target: < {doc['target_s']:.1f} s per pair: **{'met' if doc['target_met'] else 'NOT met'}**",
        f"- load average (1/5/15 min, shared 2-core machine): before {doc['load_average']['before']}, "
        f"after {doc['load_average']['after']}",
        "",
        f"Seconds, median of {doc['repeat']} runs (each starts with cleared parser caches and a collected "
        "heap). total = read + parse both files + networkx graph + match + deltas/classification + impact "
        "slices + JSON report; "
        "cpu = the process CPU time of the same work (on this shared machine, what other users' load inflates "
        "least). ops/s counts the ops of both sides. rich / html: rendering, not part of total. "
        "Side by side in the same run (interleaved repetitions): `array` is the same pipeline with the "
        "positional-array graph and matcher the networkx graph replaced (bench/array_matcher/ at 24ec50e; no networkx "
        "graph, signatures or impact slices), `×array` = total / array, `same` = both report the same "
        "changes and delta counts; `difflib` is a unified line diff of the same two files (what a "
        "kernel author has without this tool; `lines` = the +/- lines it reports, `changes` = what "
        "ir-diff reports), `ratio` = total / difflib; `cli` = the whole `cutile-diag ir-diff --json` "
        "process, interpreter start and imports included (median of 3).",
        "",
        "| pair | ops before | ops after | parse | graph | match | deltas | impact | json | **total** | cpu | min–max "
        "| ops/s | rich | html | array (graph+match) | array cpu | ×array | same | difflib | ratio | lines | changes | cli |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:-:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["pairs"]:
        s = r["median_s"]
        o = r["array_s"]
        lines.append(f"| {r['name']} | {r['ops_before']} | {r['ops_after']} | {s['parse']:.3f} | {s['graph']:.3f} | "
                     f"{s['match']:.3f} | {s['deltas']:.3f} | {s['impact']:.3f} | {s['json']:.3f} | **{s['total']:.3f}** | "
                     f"{s['cpu']:.3f} | "
                     f"{r['min_total_s']:.3f}–{r['max_total_s']:.3f} | {r['ops_per_s']:,} | {s['rich']:.3f} | "
                     f"{s['html']:.3f} | {o['total']:.3f} ({o['graph'] + o['match']:.3f}) | {o['cpu']:.3f} | {r['vs_array']:.2f}× | "
                     f"{'yes' if r['same_as_array'] else '**no**'} | {r['line_diff_s']:.3f} | {r['vs_line_diff']:.1f}× | "
                     f"{r['line_diff_changed_lines']:,} | {r['changes']} | {r['cli_wall_s']:.2f} |")
    lines += ["", "Pairs:", ""]
    lines += [f"- **{r['name']}**: {r['what']}" + ("" if r["correct"] else " — WRONG RESULT") for r in doc["pairs"]]
    if doc["wrong_results"]:
        lines += ["", "Wrong results:", ""] + [f"- {w}" for w in doc["wrong_results"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
