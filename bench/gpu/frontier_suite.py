#!/usr/bin/env python3
"""Issue #30 on one H200, in one device call: the beam loop against the best known versions,
the decisions on a compute-bound kernel, the matmul loop against cuBLAS.

Usage (repository root, on the GPU machine)::

    source .device/setup.sh && python bench/gpu/frontier_suite.py --out $OUT/frontier \\
        --tilegym /tmp/TileGym --budget-s 550 [--only layer_norm,calibrate,matmul]
    python bench/gpu/frontier_suite.py --out /tmp/fs-dry --dry-run [--budget-s 330]  # no GPU: the plumbing

Parts (run in this order, each bounded by its share of what is left of --budget-s; a part whose
share is below its minimum is listed as not run, and results.json / results.md are rewritten
after every part, so a killed suite leaves what finished):

layer_norm  ``optimize src/tilegym/ops/cutile/layer_norm_legacy.py::_layer_norm_fwd_kernel
            --workload tilegym:layer_norm_legacy --configs 16384x4096-bf16 --until-roof 0.9``
            (beam at its default, 3) under ``--time-limit``, in a throw-away git repository holding
            the TileGym checkout (which is never modified); then, in one process, interleaved
            (side_by_side.py): the original, (1) the persistent grid + occupancy=8 hint, (2)
            occupancy=4 hint + approximate division (both built from the original source by the
            project's transforms through the loop's recipe) and the loop's final version; the
            ratios, and whether the loop ended at or below the best of (1) and (2).
calibrate   ``cutile-diag calibrate tilegym:matmul --configs 8192-bf16``: the same version against
            itself, interleaved, >= 10 decisions, each sampled as the loop samples (to a CI of
            +-1 % or the cap): the CI half-width, false keeps, inconclusive decisions, rounds per
            decision; every round and decision in calibration.json.gz.
matmul      ``optimize src/tilegym/ops/cutile/matmul.py::_matmul_kernel --workload tilegym:matmul
            --configs 8192-bf16 --until-roof 0.9`` under a short ``--time-limit`` (past small steps
            until the time is up); then the original, the loop's final
            version and torch.matmul (cuBLAS) side by side: the final version's speed relative to
            torch (goal >= 0.95).

``--dry-run``: a copy of TileGym from --tilegym, or else from the stored snapshot
(/work/.mirror/NVIDIA+TileGym/repo), and a simulated GPU: the loops run ``optimize --simulate``
(AOT captures, diagnosis, real transforms, the beam), calibrate ``--simulate``, and the side-by-side
imports every version's file and takes its rounds from the simulated GPU; every number of a dry
run is labelled DRY RUN and means nothing.

Writes into --out: results.json, results.md (date, GPU, driver, versions, the exact command, the
tables, the "not run" list), and per loop part <part>/{perf_results.md, ledger.jsonl, kept.diff,
stderr.txt, side_by_side.json, v<i>.diff (each version against the original)}.
"""
from __future__ import annotations

import argparse
import gzip
import difflib
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import optimize_suite as base  # noqa: E402  (the throw-away TileGym repository, run_optimize)
from harness import ROOT, elapsed, log, run_captured  # noqa: E402
from harness import child_env as _child_env  # noqa: E402
from structural_suite import kept_diff  # noqa: E402

sys.path.insert(0, str(ROOT / "src"))
from cutile_diag.loop import recipe as rc  # noqa: E402
from cutile_diag.loop.backends import Version  # noqa: E402
from cutile_diag.loop.beam import frontier  # noqa: E402
from cutile_diag.loop.candidate import transform_key  # noqa: E402
from cutile_diag.loop.runner import LoopOptions  # noqa: E402
from cutile_diag.loop.stats import RunStat, compare_config  # noqa: E402
from cutile_diag.transforms import TRANSFORMS  # noqa: E402

SNAPSHOT = Path("/work/.mirror/NVIDIA+TileGym/repo")   # --dry-run without --tilegym
ORDER = ("layer_norm", "calibrate", "matmul")
# a part's weight in the share of what is left, its minimum (below it: not run) and, for a loop
# part, the side-by-side's share of it (compiles, checks, TileGym's matmul autotune, the rounds)
WEIGHT = {"layer_norm": 300.0, "calibrate": 90.0, "matmul": 140.0}
MIN_S = {"layer_norm": 100.0, "calibrate": 45.0, "matmul": 75.0}
SIDE_S = {"layer_norm": 45.0, "matmul": 50.0}
GRACE_S = 20.0              # a loop is killed this long after its --time-limit (the ledger keeps what finished)
LOOP_OPTS = ["--rep-ms", "30", "--warmup-ms", "20"]
KH = "kernel_hints"


def key(name: str, **params) -> str:
    return transform_key(name, params)


TARGETS = {
    "layer_norm": {"file": "src/tilegym/ops/cutile/layer_norm_legacy.py", "kernel": "_layer_norm_fwd_kernel",
                   "workload": "tilegym:layer_norm_legacy", "config": "16384x4096-bf16",
                   "module": "tilegym.ops.cutile.layer_norm_legacy", "function": "layer_norm_legacy",
                   "loop": ["--until-roof", "0.9"], "torch": False,
                   # name, transform set on the original source, the latency measured earlier (ms)
                   "known": [("(1) persistent grid + occupancy=8", (key(KH, occupancy=8),
                                                                    key("persistent_grid", blocks_per_sm=8)), 0.0774),
                             ("(2) occupancy=4 + approx division", (key(KH, occupancy=4), "approx_div"), 0.0741)],
                   "original_ms": 0.0861},
    "matmul": {"file": "src/tilegym/ops/cutile/matmul.py", "kernel": "_matmul_kernel", "workload": "tilegym:matmul",
               "config": "8192-bf16", "module": "tilegym.ops.cutile.matmul", "function": "matmul",
               "loop": ["--until-roof", "0.9"], "torch": True, "known": [], "original_ms": None},
}
# --dry-run's simulated GPUs (the numbers mean nothing): layer_norm plants the issue's two versions
# (0.0774 and 0.0741 ms from 0.0861) and makes the grid cost with occupancy=4, so the greedy path
# (grid first) is not the best; torch.matmul is a version whose text holds "torch.matmul"
SIM = {
    "layer_norm": {"configs": {"16384x4096-bf16": 0.0861}, "bytes": {"16384x4096-bf16": 2.686e8},
                   "unit": ["bf16", "cuda"], "noise": 0.002, "run_noise": 0.001, "samples": 15,
                   "effects": {"persistent_grid": 0.95, key(KH, occupancy=8): 0.946, key(KH, occupancy=4): 0.92,
                               "approx_div": 0.935, "gather_to_load": 1.01},
                   "interactions": {f"persistent_grid+{key(KH, occupancy=4)}": 1.05}},
    "matmul": {"configs": {"8192-bf16": 1.6}, "flops": {"8192-bf16": 1.1e12}, "unit": ["bf16", "tensor"],
               "noise": 0.003, "run_noise": 0.001, "samples": 15,
               "effects": {"tile_size_sweep": 0.97, "marker:torch.matmul": 0.93}},
    "calibrate": {"configs": {"8192-bf16": 1.6}, "noise": 0.004, "run_noise": 0.002, "flops": {"8192-bf16": 1.1e12},
                  "unit": ["bf16", "tensor"]},
}


def environment(env: dict) -> dict:
    code = ("import json, torch\ntry:\n import cuda.tile as ct; v = ct.__version__\nexcept Exception as e:\n"
            " v = f'unavailable ({type(e).__name__})'\np = torch.cuda.get_device_properties(0) if "
            "torch.cuda.is_available() else None\nprint(json.dumps({'torch': torch.__version__, 'cuda.tile': v, "
            "'gpu': p.name if p else None, 'cuda': torch.version.cuda}))")
    rc_, out, _err, _s = run_captured([sys.executable, "-c", code], 120, env)
    info = json.loads(out.strip().splitlines()[-1]) if rc_ == 0 and out.strip() else {}
    rc_, drv, _err, _s = run_captured(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], 30, env)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return {**info, "driver": drv.strip() if rc_ == 0 else None, "python": platform.python_version(),
            "cutile_diag_commit": commit.stdout.strip() or None}


# --------------------------------------------------------------------------------------------
# the loop's final version and the known ones

def ledger(state: Path) -> list[dict]:
    p = state / "ledger.jsonl"
    return [json.loads(ln) for ln in p.read_text().splitlines() if ln.strip()] if p.exists() else []


def final_of(recs: list[dict]) -> dict | None:
    """The loop's last word: the final ``parent`` record (the beam's best member, on the branch); for
    a loop killed before it, the best member of the ledger's frontier (``loop.beam.frontier``)."""
    its = [r for r in recs if r.get("type") == "iteration"]
    fin = next((r for r in reversed(recs) if r.get("type") == "parent" and r.get("final")), None)
    if fin is not None:
        it = next((r for r in its if r["iteration"] == fin.get("iteration")), {})
        return {"iteration": fin.get("iteration"), "commit": fin.get("commit"), "how": "the loop's final record",
                "set": list(rc.recipe(it.get("applied") or ())), "frontier": fin.get("frontier")}
    members = frontier(its, 1)
    if not members:
        return None
    best = members[0].record
    return {"iteration": best["iteration"], "commit": (best.get("commits") or {}).get("kept"),
            "how": "no final record (the loop was killed): the best member of its ledger's frontier",
            "set": list(rc.recipe(best.get("applied") or ())), "frontier": None}


def beam_width(recs: list[dict]) -> int | None:
    """The beam the loop ran with (``LoopOptions.beam_width``: --beam, else 3 under --until-roof)."""
    setup = next((r for r in recs if r.get("type") == "setup"), None)
    if setup is None:
        return None
    o = setup.get("options") or {}
    return LoopOptions(beam=o.get("beam"), until_roof=o.get("until_roof"), keep_going=bool(o.get("keep_going"))).beam_width


def known_versions(t: dict, original: str) -> list[dict]:
    """The original and the known versions, each built by the loop's recipe from the original source."""
    orig = Version("original", {t["file"]: original}, None, ())
    out = [{"name": "original", "applied": [], "source": original, "earlier_ms": t["original_ms"]}]
    for name, keys, ms in t["known"]:
        v = rc.build(keys, orig, kernel_file=t["file"], kernel=t["kernel"], transforms=TRANSFORMS)
        out.append({"name": name, "applied": list(v.applied) if v else list(keys), "earlier_ms": ms,
                    "source": v.files[t["file"]] if v else None,
                    "error": None if v else "a transform of the set refused the original source"})
    return out


# --------------------------------------------------------------------------------------------
# side by side: run side_by_side.py, then the ratios from its rounds

def side_by_side(part: str, t: dict, versions: list[dict], dest: Path, env: dict, budget_s: float,
                 dry_run: bool, work: Path) -> dict:
    """The versions' files go to the temporary folder (no TileGym file lands in --out; each
    version's diff to the original does)."""
    job_versions = []
    for i, v in enumerate(versions):
        if v.get("source") is None or v.get("same_as"):
            continue
        f = work / part / f"v{i}" / Path(t["file"]).name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(v["source"])
        job_versions.append({"name": v["name"], "file": str(f), "applied": v["applied"]})
        if i:
            diff = difflib.unified_diff(versions[0]["source"].splitlines(True), v["source"].splitlines(True),
                                        f"a/{t['file']}", f"b/{t['file']}")
            (dest / f"v{i}.diff").write_text(f"# {v['name']}: {', '.join(v['applied'])}\n" + "".join(diff))
    job = {"workload": t["workload"], "config": t["config"], "module": t["module"], "function": t["function"],
           "versions": job_versions, "torch": t["torch"], "budget_s": budget_s, "max_rounds": 25,
           "rep_ms": 30, "warmup_ms": 20, "simulate": None}
    if dry_run:
        sim = dest / "side_by_side.sim.json"
        sim.write_text(json.dumps(SIM[part]))
        job["simulate"] = str(sim)
    (dest / "side_by_side.job.json").write_text(json.dumps(job, indent=1))
    out = dest / "side_by_side.json"
    log(f"{part}: side by side, {len(job['versions']) + bool(job['torch'])} versions, {budget_s:.0f} s")
    # it stops starting rounds at budget_s; the kill is for a hang (a compile, TileGym's autotune)
    rc_, _o, err, wall = run_captured([sys.executable, str(HERE / "side_by_side.py"), str(dest / "side_by_side.job.json"),
                                       str(out)], budget_s + 20, env, ROOT)
    (dest / "side_by_side.stderr.txt").write_text(err[-100_000:])
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc.update(rc=rc_, wall_s=round(wall, 1))
    if rc_ != 0:
        doc["error"] = (err.strip().splitlines() or [f"exit {rc_}"])[-1][:300]
    return doc


def runs_of(row: dict) -> list[RunStat]:
    return [RunStat(float(r["median"]), r.get("rel_std"), r.get("nrep"), r.get("samples")) for r in row.get("runs") or []]


def ratio(sbs: dict, cand: str, basis: str) -> dict | None:
    """``cand``'s latency over ``basis``'s, paired by round (the loop's comparison: geometric mean of
    the per-round ratios with its 95 % CI); None when either has no rounds."""
    rows = {r["name"]: r for r in sbs.get("versions") or []}
    a, b = runs_of(rows.get(basis, {})), runs_of(rows.get(cand, {}))
    n = min(len(a), len(b))
    if n == 0:
        return None
    c = compare_config(sbs.get("config", ""), a[:n], b[:n])
    return {"candidate": cand, "basis": basis, "ratio": round(c.ratio, 4), "lo": round(c.lo, 4),
            "hi": round(c.hi, 4), "rounds": n}


def median_ms(row: dict) -> float | None:
    meds = [r["median"] for r in row.get("runs") or []]
    return statistics.median(meds) if meds else None


# --------------------------------------------------------------------------------------------
# the parts

def loop_part(part: str, share: float, args, tg_repo: Path, tg_branch: str, env: dict, out: Path, work: Path) -> dict:
    t = TARGETS[part]
    dest = out / part
    dest.mkdir(parents=True, exist_ok=True)
    side_s = SIDE_S[part] * min(1.0, share / WEIGHT[part])
    limit = max(30.0, share - side_s - GRACE_S)
    res: dict = {"part": part, "kernel": f"{t['file']}::{t['kernel']}", "config": t["config"],
                 "time_limit_s": round(limit), "side_by_side_budget_s": round(side_s)}
    kenv = dict(env)
    kenv["PYTHONPATH"] = os.pathsep.join([str(tg_repo / "src"), env["PYTHONPATH"]])
    kenv["TILEGYM_DISABLE_AUTOTUNE"] = "1"      # earlier suites' setting (layer_norm's kernel has no autotune)
    branch = f"cutile-perf-frontier-{part}"
    measure = (["--simulate", str(_sim_file(work, part)), "--capture-workload", t["workload"]] if args.dry_run
               else ["--workload", t["workload"], "--configs", t["config"], *LOOP_OPTS])
    argv = [f"{tg_repo / t['file']}::{t['kernel']}", *measure, *t["loop"], "--branch", branch,
            "--time-limit", f"{limit:.0f}"]
    res["command"] = "cutile-diag optimize " + " ".join(shlex.quote(a) for a in argv)
    log(f"{part}: optimize --time-limit {limit:.0f} s")
    t0 = time.monotonic()
    loop_res, note = base.run_optimize(argv, tg_repo, kenv, limit + GRACE_S, dest / "stderr.txt")
    res["loop_wall_s"] = round(time.monotonic() - t0, 1)
    res["loop_note"] = note
    state = tg_repo / "cutile-diag-out" / "optimize" / t["kernel"]
    recs = ledger(state)
    for f in ("perf_results.md", "ledger.jsonl"):
        if (state / f).exists():
            shutil.copy(state / f, dest / f)
    its = [r for r in recs if r.get("type") == "iteration"]
    stop = next((r for r in reversed(recs) if r.get("type") == "stop"), {})
    res.update(iterations=max(0, len(its) - 1), beam=beam_width(recs), stop=stop.get("reason"),
               loop_baseline_ms=its[0]["latency_ms"] if its else None,
               steps=[f"{r['iteration']}: {str(r.get('optimization'))[:110]} [{r['status']}]" for r in its[1:]])
    if loop_res:
        res["loop_final_ms"] = loop_res.get("final_ms")
    original = (tg_repo / t["file"]).read_text()       # the checkout itself: the loop works in its own worktree
    fin = final_of(recs)
    res["final"] = fin
    versions = known_versions(t, original)
    if fin and fin.get("commit"):
        src = subprocess.run(["git", "show", f"{fin['commit']}:{t['file']}"], cwd=tg_repo, capture_output=True,
                             text=True)
        final = {"name": "loop final", "applied": fin["set"], "source": src.stdout if src.returncode == 0 else None,
                 "earlier_ms": None}
        same = next((v["name"] for v in versions if v.get("source") == final["source"]), None)
        if same:                       # the same text is timed once; its row stands for both
            final["same_as"] = same
        versions.append(final)
        diff = kept_diff(tg_repo, state)
        if diff:
            (dest / "kept.diff").write_text(diff)
    else:
        res["not_run"] = "the loop left no final version (see loop_note)"
    res["versions"] = [{k: v.get(k) for k in ("name", "applied", "earlier_ms", "same_as", "error")} for v in versions]
    base.sh(base.GIT + ["checkout", "-q", "-f", tg_branch], tg_repo)
    left = args.deadline - time.monotonic()
    budget = min(side_s, left - 20)
    if budget < 20:
        res["side_by_side"] = {"error": f"not run: {max(left, 0):.0f} s of the suite's budget left"}
        return res
    sbs = side_by_side(part, t, versions, dest, kenv, budget, args.dry_run, work)
    res["side_by_side"] = {k: sbs.get(k) for k in ("rounds", "simulated", "device", "rc", "wall_s", "error")}
    res["table"] = table(t, versions, sbs)
    res["verdict"] = verdict(part, t, versions, sbs)
    return res


def _sim_file(work: Path, part: str) -> Path:
    p = work / f"{part}.sim.json"
    p.write_text(json.dumps(SIM[part]))
    return p


def table(t: dict, versions: list[dict], sbs: dict) -> list[dict]:
    rows = {r["name"]: r for r in sbs.get("versions") or []}
    names = [v["name"] for v in versions] + (["torch"] if t["torch"] else [])
    out = []
    for v in [*versions, *([{"name": "torch", "applied": [], "earlier_ms": None}] if t["torch"] else [])]:
        timed = v.get("same_as") or v["name"]
        r = rows.get(timed, {})
        out.append({"name": v["name"], "same_as": v.get("same_as"), "set": v.get("applied"),
                    "status": r.get("status") or v.get("error") or "not timed", "error": r.get("error"),
                    "earlier_ms": v.get("earlier_ms"), "median_ms": median_ms(r), "rounds": len(r.get("runs") or []),
                    "vs_original": ratio(sbs, timed, "original") if timed != "original" else None,
                    "vs_torch": ratio(sbs, timed, "torch") if "torch" in names and timed != "torch" else None})
    return out


def verdict(part: str, t: dict, versions: list[dict], sbs: dict) -> dict:
    fin = next((v for v in versions if v["name"] == "loop final"), None)
    if fin is None:
        return {"met": None, "why": "no final version"}
    timed = fin.get("same_as") or fin["name"]
    if part == "matmul":
        r = ratio(sbs, timed, "torch")
        if r is None:
            return {"met": None, "why": "the final version or torch has no timed rounds"}
        speed = 1.0 / r["ratio"]
        return {"met": speed >= 0.95, "speed_vs_torch": round(speed, 4),
                "why": f"torch.matmul / loop final latency = {speed:.3f} (goal >= 0.95; 95 % CI "
                       f"{1 / r['hi']:.3f}-{1 / r['lo']:.3f}, {r['rounds']} rounds)"}
    known = [(v["name"], median_ms({"runs": next((x.get("runs") for x in sbs.get("versions") or []
                                                  if x["name"] == v["name"]), [])}))
             for v in versions if v["name"].startswith("(")]
    known = [(n, ms) for n, ms in known if ms]
    if not known:
        return {"met": None, "why": "neither known version has timed rounds"}
    best = min(known, key=lambda kv: kv[1])[0]
    if timed == best:
        return {"met": True, "best_known": best, "why": f"the loop's final version is {best} itself"}
    r = ratio(sbs, timed, best)
    if r is None:
        return {"met": None, "best_known": best, "why": "the loop's final version has no timed rounds"}
    tie = r["lo"] <= 1.0 <= r["hi"]
    return {"met": r["ratio"] <= 1.0, "best_known": best, "final_vs_best": r,
            "why": f"loop final / {best} = {r['ratio']:.4f} (95 % CI {r['lo']:.4f}-{r['hi']:.4f}, {r['rounds']} "
                   f"rounds){'; within the noise' if tie else ''}"}


def calibrate_part(share: float, args, env: dict, out: Path, work: Path) -> dict:
    argv = [sys.executable, "-m", "cutile_diag", "calibrate", "-n", str(args.decisions), "--no-save", "--json",
            "--budget-s", f"{max(30.0, share - 15):.0f}"]
    if args.dry_run:
        argv += ["--simulate", str(_sim_file(work, "calibrate"))]
    else:
        argv += ["tilegym:matmul", "--configs", "8192-bf16"]
    log("calibrate: " + " ".join(argv[3:]))
    rc_, stdout, stderr, wall = run_captured(argv, share + 30, env, work)
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError:
        doc = {"error": (stderr.strip().splitlines() or ["no output"])[-1][:400]}
    if "decisions" in doc:          # every round and decision, for the record (clocks, basis, sampling)
        with gzip.open(out / "calibration.json.gz", "wt") as f:
            json.dump(doc, f, default=str)
    decided = [d for d in doc.get("decisions") or [] if d.get("status") != "inconclusive"]
    halves = sorted(d["half_width_pct"] for d in decided)
    ratios = [d["ratio"] for d in doc.get("decisions") or [] if d.get("ratio")]
    part = {"part": "calibrate", "kernel": "simulated 8192-bf16" if args.dry_run else "tilegym:matmul 8192-bf16",
            "rc": rc_, "wall_s": round(wall, 1), "command": "cutile-diag " + " ".join(argv[3:]),
            **{k: doc.get(k) for k in ("n", "rounds", "half_width_pct", "false_keeps", "false_reverts", "inconclusive",
                                       "rounds_sampled", "noise_floor", "noise_floor_used", "error") if k in doc},
            "basis": sorted({d.get("basis") for d in doc.get("decisions") or []}),
            "decided_max_half_width_pct": halves[-1] if halves else None,
            # a bias between the two processes shows as A/A ratios on one side of 1
            "ratios_below_1": sum(r < 1 for r in ratios), "mean_ratio": sum(ratios) / len(ratios) if ratios else None,
            "offset_pct": doc.get("offset_pct"), "offset_ci_pct": doc.get("offset_ci_pct"),
            # the order's share of it: rounds alternate A B B A / B A A B
            "offset_by_first": doc.get("offset_by_first"),
            # TileGym's matmul autotunes in every process: held at the first worker's pick (measure.tuning)
            "tuning": doc.get("tuning")}
    # the issue's line: 0 false keeps in >= 10 decisions with a CI <= 1 %
    if "n" in doc:
        part["met"] = doc["n"] >= 10 and doc["false_keeps"] == 0 and doc["half_width_pct"] <= 1.0
    return part


# --------------------------------------------------------------------------------------------
# the report

def fmt(v, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)) else "-"


def _r(r: dict | None) -> str:
    return f"{r['ratio']:.4f} ({r['lo']:.4f}-{r['hi']:.4f})" if r else "-"


def markdown(res: dict) -> str:
    dry = res["dry_run"]
    env = res["environment"]
    lines = [f"# frontier_suite (#30){' — DRY RUN (simulated GPU; no number here is a measurement)' if dry else ''}",
             "", f"- date {res['date']}; GPU {env.get('gpu')}; driver {env.get('driver')}; torch {env.get('torch')}; "
             f"cuda.tile {env.get('cuda.tile')}; CUDA {env.get('cuda')}; python {env.get('python')}; cutile-diag "
             f"{env.get('cutile_diag_commit')}; wall {res['wall_s']:.0f} s of --budget-s {res['budget_s']:.0f}",
             f"- command: `{res['command']}`", ""]
    for part in ORDER:
        p = res["parts"].get(part)
        if not p:
            continue
        if part == "calibrate":
            lines += ["## calibrate: A/A on TileGym matmul 8192³ bf16", "", f"`{p.get('command')}`", "",
                      "Each decision samples as the loop does: 3 rounds, then more until the 95 % CI is within ±1 % "
                      "or the cap (inconclusive at the cap).", "",
                      "| kernel | decisions | median 95 % CI half-width | false keeps | false reverts | inconclusive | "
                      "rounds per decision | basis | per-measurement noise | ratios < 1 | mean ratio | met | rc | wall s |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
                      f"| {p.get('kernel')} | {p.get('n')} | {fmt(p.get('half_width_pct'), '.3f')} % | {p.get('false_keeps')} | "
                      f"{p.get('false_reverts')} | {p.get('inconclusive', '-')} | "
                      f"{', '.join(map(str, p.get('rounds_sampled') or [])) or '-'} | {'/'.join(p.get('basis') or []) or '-'} | "
                      f"{fmt(100 * p['noise_floor'] if p.get('noise_floor') else None, '.2f')} % | "
                      f"{p.get('ratios_below_1', '-')} | {fmt(p.get('mean_ratio'), '.4f')} | {p.get('met', '-')} | "
                      f"{p.get('rc')} | {p.get('wall_s')} |", ""]
            if p.get("offset_ci_pct"):
                lo, hi = p["offset_ci_pct"]
                tune = p.get("tuning") or {}
                held = ", ".join(tune.get("held") or []) or "nothing"
                lines += [f"The copy's offset across decisions: {fmt(p.get('offset_pct'), '+.2f')} % (95 % CI "
                          f"{lo:+.2f} to {hi:+.2f} %). Autotune held: {held}; searched again: "
                          f"{tune.get('searched_again') or 'nothing'}.", ""]
                if p.get("offset_by_first"):
                    lines += ["By which version started the round: " + ", ".join(
                        f"{f} first {v:+.2f} %" for f, v in p["offset_by_first"].items()) + ".", ""]
            if p.get("error"):
                lines += [f"error: {p['error']}", ""]
            continue
        title = {"layer_norm": "the beam loop on TileGym layer_norm_legacy 16384×4096 bf16 vs the known versions",
                 "matmul": "the matmul loop (TileGym 8192³ bf16) vs torch.matmul (cuBLAS)"}[part]
        lines += [f"## {part}: {title}", "", f"`{p.get('command')}`", "",
                  f"- loop: {p.get('iterations')} iterations in {p.get('loop_wall_s')} s (--time-limit "
                  f"{p.get('time_limit_s')} s, beam {p.get('beam')}); {p.get('loop_note')}; stop: "
                  f"{p.get('stop')}",
                  f"- final version: iteration {(p.get('final') or {}).get('iteration')}, set "
                  f"{(p.get('final') or {}).get('set')} ({(p.get('final') or {}).get('how')})"]
        lines += [f"  - {s}" for s in p.get("steps") or []]
        sbs = p.get("side_by_side") or {}
        lines += [f"- side by side ({'DRY RUN: rounds from the simulated GPU' if sbs.get('simulated') else 'one process, interleaved'}): "
                  f"{sbs.get('rounds')} rounds in {sbs.get('wall_s')} s" + (f"; error: {sbs['error']}" if sbs.get("error") else ""),
                  "", "| version | transform set | status | earlier ms | median ms | vs original (95 % CI) |"
                  + (" vs torch (95 % CI) |" if part == "matmul" else ""),
                  "|---|---|---|---|---|---|" + ("---|" if part == "matmul" else "")]
        for row in p.get("table") or []:
            name = row["name"] + (f" (= {row['same_as']})" if row.get("same_as") else "")
            lines.append(f"| {name} | {', '.join(row.get('set') or []) or '-'} | {row['status']} | "
                         f"{fmt(row.get('earlier_ms'), '.4f')} | {fmt(row.get('median_ms'), '.5f')} | "
                         f"{_r(row.get('vs_original'))} |" + (f" {_r(row.get('vs_torch'))} |" if part == "matmul" else ""))
        v = p.get("verdict") or {}
        goal = ("loop final at or below the best of (1) and (2)" if part == "layer_norm"
                else "loop final >= 0.95x torch.matmul")
        met = {True: "MET", False: "NOT MET", None: "UNDECIDED"}[v.get("met")]
        lines += ["", f"**{goal}: {met}{' (DRY RUN)' if dry else ''}** — {v.get('why')}", ""]
    lines += ["## Not run", ""] + [f"- {s}" for s in res["not_run"]] if res["not_run"] else ["Not run: nothing"]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", help="TileGym checkout root (never modified: the loops run in a copy)")
    ap.add_argument("--budget-s", type=float, default=550.0, help="the suite's wall time, shared by the parts")
    ap.add_argument("--only", default=",".join(ORDER), help=f"comma-separated parts of {', '.join(ORDER)}")
    ap.add_argument("--decisions", type=int, default=12)
    ap.add_argument("--dry-run", action="store_true", help="a simulated GPU (optimize/calibrate --simulate)")
    args = ap.parse_args()
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    bad = sorted(set(only) - set(ORDER))
    if bad:
        ap.error(f"--only: no part {', '.join(bad)} (parts: {', '.join(ORDER)})")
    if not args.dry_run and not args.tilegym:
        ap.error("--tilegym PATH is required (or --dry-run)")
    if args.tilegym and not (Path(args.tilegym) / "src" / "tilegym").is_dir():
        ap.error(f"--tilegym {args.tilegym}: no src/tilegym there")
    if args.dry_run and not args.tilegym and not SNAPSHOT.is_dir():
        ap.error(f"--dry-run needs --tilegym PATH (no snapshot at {SNAPSHOT})")
    args.deadline = time.monotonic() - elapsed() + args.budget_s
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cutile-diag-frontier-"))
    env = _child_env(args.tilegym)
    res = {"suite": "frontier_suite", "issue": 30, "dry_run": args.dry_run, "budget_s": args.budget_s,
           "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "environment": environment(env),
           "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv]), "parts": {},
           "not_run": [f"{p} (not in --only)" for p in ORDER if p not in only], "wall_s": elapsed()}

    def save() -> None:
        res["wall_s"] = elapsed()
        (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
        (out / "results.md").write_text(markdown(res))

    save()
    tg_repo = tg_branch = None
    try:
        todo = [p for p in ORDER if p in only]
        for i, part in enumerate(todo):
            left = args.deadline - time.monotonic()
            share = left * WEIGHT[part] / sum(WEIGHT[q] for q in todo[i:])
            if share < MIN_S[part]:
                res["not_run"].append(f"{part}: out of time ({max(left, 0):.0f} s of --budget-s left, "
                                      f"share {share:.0f} s < {MIN_S[part]:.0f} s)")
                continue
            try:
                if part == "calibrate":
                    res["parts"][part] = calibrate_part(share, args, env, out, work)
                else:
                    if tg_repo is None:
                        tg_repo = base.tilegym_repo(work, tilegym_source(args, work))
                        tg_branch = base.current_branch(tg_repo)
                    res["parts"][part] = loop_part(part, share, args, tg_repo, tg_branch, env, out, work)
            except Exception as e:          # one part's failure is a fact of the report, not the end of it
                res["parts"][part] = {"part": part, "error": f"{type(e).__name__}: {e}"}
                res["not_run"].append(f"{part}: failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
            sbs = (res["parts"][part].get("side_by_side") or {}).get("error") if part != "calibrate" else None
            if sbs and sbs.startswith("not run"):
                res["not_run"].append(f"{part} side by side: {sbs}")
            log(f"{part}: done")
            save()
    finally:
        save()
        shutil.rmtree(work, ignore_errors=True)
    print((out / "results.md").read_text())
    errs = [p for p in res["parts"].values() if p.get("error") or p.get("rc") not in (None, 0)]
    return 1 if errs or not res["parts"] else 0


def tilegym_source(args, work: Path) -> Path:
    """The TileGym checkout the throw-away repository copies: --tilegym, or for a dry run the snapshot."""
    if args.tilegym:
        return Path(args.tilegym).resolve()
    dest = work / "TileGym-snapshot"
    dest.mkdir()
    arc = subprocess.run(["git", f"--git-dir={SNAPSHOT}", "archive", "HEAD"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=arc.stdout, check=True)
    return dest


if __name__ == "__main__":
    sys.exit(main())
