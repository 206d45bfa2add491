#!/usr/bin/env python
"""A campaign on the GPU (issue 22): ``cutile-diag campaign`` (local executor) over TileGym's perf
tests of four ops — survey, ranked plan, one loop per kernel within the wall budget — resumable
across device calls: the whole work folder (the throw-away TileGym repository with the loops'
branches and worktrees, and the campaign's state in it) goes out as a tarball and comes back in.

    source .device/setup.sh
    python bench/gpu/campaign_suite.py --out $W/campaign_suite --tilegym /tmp/TileGym --budget-s 400 \\
        --state-out $OUT/campaign_state.tgz [--state-in .gpu/campaign_state.tgz]
    python bench/gpu/campaign_suite.py --out /tmp/cs-dry --dry-run [--state-in/--state-out ...]   # CPU

Steps (each a ``cutile-diag`` command, listed in report.md with exit code and time):
1. ``campaign --plan --json -- pytest <test files> -k "test_perf and cutile"``: the survey (it
   continues a survey an earlier call left unfinished), the ranked kernels, the derived commands;
   killed at half the budget (what it saw is kept: the next call continues it).
2. ``campaign --time-limit <left> ... -- <same command>`` (the survey reused), or ``campaign --resume
   --time-limit <left>`` when an earlier call started the loops; killed (SIGTERM: resumable) past it.
``--dry-run``: the demo repository of ``campaign.demo`` (three example kernels, CPU perf tests),
the survey with --dry-run and the loops with --simulate; everything else as on the GPU.
Output under --out: report.md, summary.json, plan.json, campaign/{campaign.md,campaign.html,
campaign-roofline.svg,campaign.json,diffs/,loops/<kernel>/{perf_results.md,ledger.jsonl}}, logs.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))
import optimize_suite as suite  # noqa: E402  (the throw-away TileGym repository, gpu_name)
from harness import parse_suite_args  # noqa: E402

OPS = ["softmax", "rms_norm", "layer_norm", "silu_and_mul"]
# fixed: the loops' worktrees record absolute paths, a later call restores the folder here
WORK = Path("/tmp/campaign-s5c")
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
# every loop: 2 interleaved rounds, one setting per sweep step; a TileGym pytest run is 17-20 s
LOOP = ["--rounds", "2", "--max-sweep", "1", "--budget", "240", "--max-tests", "2"]


def run(argv: list[str], cwd: Path, env: dict, timeout: float, log: Path, steps: list) -> tuple[int, str]:
    """One cutile-diag command; SIGTERM at the timeout (the campaign records a resumable state)."""
    t0 = time.monotonic()
    with open(log, "a") as err:
        p = subprocess.Popen([sys.executable, "-m", "cutile_diag", *argv], cwd=cwd, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=err, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=max(5.0, timeout))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                out, _ = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                out, _ = p.communicate()
    steps.append({"argv": ["cutile-diag", *argv], "rc": p.returncode, "seconds": round(time.monotonic() - t0, 1)})
    print(f"[campaign_suite] rc={p.returncode} in {time.monotonic() - t0:.0f} s: cutile-diag {' '.join(argv)[:160]}",
          flush=True)
    return p.returncode, out


def setup(args, env: dict) -> tuple[Path, list[str], list[str]]:
    """(repository, survey command, extra campaign flags) — restored, or made for a first call."""
    if args.state_in and Path(args.state_in).is_file():
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)
        with tarfile.open(args.state_in) as t:
            t.extractall(WORK)
        m = json.loads((WORK / "meta.json").read_text())
        # the loops' worktrees did not travel: git forgets them, a resumed loop makes its own again
        subprocess.run(["git", "worktree", "prune"], cwd=m["repo"], check=False)
        print(f"[campaign_suite] restored {WORK} from {args.state_in}", flush=True)
    elif not args.state_in or not (WORK / "meta.json").is_file():
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)
    meta = WORK / "meta.json"
    if meta.is_file():
        m = json.loads(meta.read_text())
        return Path(m["repo"]), m["command"], m["flags"]
    if args.dry_run:
        from cutile_diag.campaign.demo import SPECS, make_repo
        repo = make_repo(WORK)
        spec = WORK / "specs.json"
        spec.write_text(json.dumps(SPECS))
        cmd = [*PYTEST, "tests", "-k", "perf"]
        flags = ["--simulate", str(spec), "--no-capture"]
    else:
        repo = suite.tilegym_repo(WORK, Path(args.tilegym).resolve())
        # test_<op>.py, or its variants (TileGym 75a1430 has test_layer_norm_legacy.py only)
        files = sorted({p.relative_to(repo).as_posix() for op in args.ops.split(",")
                        for p in (repo / "tests" / "ops").glob(f"test_{op}*.py")})
        if not files:
            raise SystemExit(f"no tests/ops/test_<op>.py of {args.ops} in {repo}")
        cmd = [*PYTEST, *files, "-k", "test_perf and cutile"]
        flags = []
    meta.write_text(json.dumps({"repo": str(repo), "command": cmd, "flags": flags}))
    return repo, cmd, flags


def collect(repo: Path, out: Path) -> list[dict]:
    """The report, the state and every loop's table and ledger (no worktrees) under --out."""
    src = repo / "cutile-diag-out" / "campaign"
    dest = out / "campaign"
    if dest.exists():
        shutil.rmtree(dest)
    if not src.is_dir():
        return []
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("records", "iterations", "logs", "captures", "*.tmp"))
    rows = []
    if (src / "campaign.json").is_file():
        from cutile_diag.campaign.report import kernel_rows
        from cutile_diag.campaign.run import Campaign
        for r in kernel_rows(Campaign.load(src)):
            rows.append({k: r[k] for k in ("kernel", "ref", "status", "configs", "start_ms", "final_ms", "start_pct",
                                           "final_pct", "pct_of", "speedup", "kept_steps", "stop_rule", "stopped",
                                           "branch", "attempts")})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", help="a TileGym checkout (never modified)")
    ap.add_argument("--budget-s", type=float, default=400.0, help="wall budget of this call")
    ap.add_argument("--grace-s", type=float, default=30.0, help="kept back for the report and the tarball")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--state-in", help="a tarball of an earlier call's work folder: continue it")
    ap.add_argument("--state-out", help="write this call's work folder here (for the next call)")
    ap.add_argument("--dry-run", action="store_true", help="CPU: fixture repository, --dry-run survey, --simulate")
    args, out = parse_suite_args(ap)
    started = time.monotonic()
    env = dict(os.environ)
    env.pop("CUDA_HOME", None)
    env.pop("CUDA_PATH", None)
    repo, cmd, flags = setup(args, env)
    paths = [str(ROOT / "src")] + ([] if args.dry_run else [str(repo / "src")])
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
    # TileGym: the first config instead of an autotune per version; shorter timing per perf test
    env.update({"TILEGYM_DISABLE_AUTOTUNE": "1", "WARMUP": "20", "REP": "30"})
    log = out / "campaign.log"
    steps: list[dict] = []
    left = lambda: args.budget_s - args.grace_s - (time.monotonic() - started)   # noqa: E731
    state = repo / "cutile-diag-out" / "campaign" / "campaign.json"
    dry = ["--dry-run"] if args.dry_run else []
    if state.is_file():
        run(["campaign", "--resume", "--time-limit", f"{max(1.0, left() - 30):.0f}", "--json"],
            repo, env, left(), log, steps)
    else:
        # the survey may take most of a first call: it is kept when killed, and the next call continues it
        rc, text = run(["campaign", "--plan", "--json", *dry, "--", *cmd], repo, env, left() * 0.6, log, steps)
        if rc == 0:
            (out / "plan.json").write_text(text)
            # the loops get what is left, less the time a killed step takes to stop
            run(["campaign", "--time-limit", f"{max(1.0, left() - 30):.0f}", *flags, *LOOP, "--json", "--", *cmd],
                repo, env, left(), log, steps)
    rows = collect(repo, out)
    summary = {"gpu": "simulated (dry run)" if args.dry_run else suite.gpu_name(), "command": cmd, "steps": steps,
               "kernels": rows, "seconds": round(time.monotonic() - started, 1)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    md = [f"# campaign_suite ({summary['gpu']})", "", f"survey command: `{' '.join(cmd)}`", "",
          "| kernel | status | configs | start ms | final ms | start % | final % | of | speedup | kept | stopped |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v, s: "-" if v is None else format(v, s)   # noqa: E731
    for r in rows:
        md.append(f"| `{r['ref']}` | {r['status']} | {r['configs']} | {f(r['start_ms'], '.6f')} | {f(r['final_ms'], '.6f')} "
                  f"| {f(r['start_pct'], '.1f')} | {f(r['final_pct'], '.1f')} | {r['pct_of'] or '-'} "
                  f"| {f(r['speedup'], '.3f')} | {f(r['kept_steps'], 'd')} | {(r['stopped'] or '-')[:90]} |")
    md += ["", "| step | rc | s |", "|---|---|---|"]
    md += [f"| `{' '.join(s['argv'])[:200]}` | {s['rc']} | {s['seconds']} |" for s in steps]
    (out / "report.md").write_text("\n".join(md) + "\n")
    if args.state_out:
        # without the loops' worktrees (checkouts of their branches) and caches: the tarball must come back
        # from the device (16 MiB a file) and travel again
        def pack(drop: tuple[str, ...]) -> float:
            skip = lambda ti: None if any(d in f"/{ti.name}/" for d in drop) else ti   # noqa: E731
            with tarfile.open(args.state_out, "w:gz") as t:
                for p in WORK.iterdir():
                    t.add(p, arcname=p.name, filter=skip)
            return Path(args.state_out).stat().st_size
        drop = ("/.git/cutile-diag/worktrees/", "/__pycache__/")
        if pack(drop) > 15e6:                 # the loops' captures are remade by a resumed loop when needed
            print("[campaign_suite] state over 15 MB: packed again without the loops' captures", flush=True)
            pack(drop + ("/captures/",))
        print(f"[campaign_suite] state: {args.state_out} ({Path(args.state_out).stat().st_size / 1e6:.1f} MB)")
    print(f"[campaign_suite] {len(rows)} kernel(s), {sum(1 for r in rows if r['status'] == 'done')} done, "
          f"in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
