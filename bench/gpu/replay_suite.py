#!/usr/bin/env python
"""Issue 29 (a): command mode with replay against ``--no-replay``, side by side in one run.

On TileGym kernels of ``command_mode.TARGETS`` (default geglu, dropout), in a throw-away copy of
TileGym per run: ``cutile-diag optimize FILE.py::KERNEL --test-cmd T --bench-cmd B --time-limit S
--rounds 1 --max-sweep 1 --no-capture`` with replay (the default: the baseline's bench run records the launches
the perf tests time, every version is checked and timed on them, the test command confirms each
kept step, the bench command runs at the start and the end) on every target, and with
``--no-replay`` (every check and timed run a run of the commands) on the first target.  The same
loop options for both, so the step wall times compare.  Each loop is stopped (SIGTERM, resumable)
after ``--steps`` iterations or at its time limit.

Reported per run (results.json, results.md): the median step wall time (the ledger's records, as
command_mode.py reads them), each step's split (check / compile / time runs), the suite's start and
final numbers (ledger ``suite`` records) and any disagreement between the replay and the suite.
Target: median step <= 20 s with replay (the --no-replay steps of session 7 took 181-195 s).

    source .device/setup.sh
    python bench/gpu/replay_suite.py --out $W/replay_suite --tilegym /tmp/TileGym --budget-s 300
    python bench/gpu/replay_suite.py --out /tmp/rs-dry --dry-run    # CPU: command_mode's fixture, simulated GPU

``--dry-run``: command_mode.py's row_norm fixture on CPU tensors (launches recorded without
executing: there is no recorded answer, so the replay run falls back to the commands and says so).
Expected wall time on an H200: about 5 minutes (``--budget-s 300``).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import command_mode as cm  # noqa: E402  (TileGym targets, the fixture, run_loop, summarize)
import optimize_suite as suite  # noqa: E402
from harness import ROOT, child_env, parse_suite_args  # noqa: E402

GOAL_STEP_S = 20.0
# no AOT capture: 28-30 s a version on TileGym; --continue: without it a < 2 % keep ends the loop after one
# step (session 10: one step per loop, each a keep that ran the test command, 26-32 s)
LOOP = ("--rounds", "1", "--max-sweep", "1", "--no-capture", "--continue")
SHARES = {"replay": 1.0, "no-replay": 1.2}     # --no-replay: a ~45 s baseline and ~60 s steps with LOOP; one step is enough


def _steps(s: dict) -> list[float]:
    return [r["wall_s"] for r in s["rows"] if r["iteration"] > 0]


def _suite_records(out: Path) -> list[dict]:
    led = out / "ledger.jsonl"
    if not led.exists():
        return []
    return [r for r in (json.loads(ln) for ln in led.read_text().splitlines() if ln.strip()) if r.get("type") == "suite"]


def one(name: str, target: dict, mode: str, args, time_limit: float, out: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix="cutile-diag-replay-suite-"))
    sub = out / f"{name}-{mode}"
    sub.mkdir(parents=True, exist_ok=True)
    try:
        if args.dry_run:
            repo = cm.dry_repo(work)
            env = child_env()
        else:
            repo = suite.tilegym_repo(work, Path(args.tilegym).resolve())
            env = child_env(repo)
            env["TILEGYM_DISABLE_AUTOTUNE"] = "1"
        env.update(target.get("env", {}))
        extra = LOOP + (("--no-replay",) if mode == "no-replay" else ())
        print(f"[replay_suite] {name} {mode}: optimize --time-limit {time_limit:.0f}", flush=True)
        run = cm.run_loop(repo, target, env, time_limit, timeout=time_limit + 20, out=sub, stop_after=args.steps,
                          extra=extra)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    s = cm.summarize(run)
    steps = _steps(s)
    base = next((r for r in s["rows"] if r["iteration"] == 0), None)
    res = {"target": name, "mode": mode, "argv": run["argv"], "rc": run["rc"], "wall_s": run["wall_s"],
           "time_limit_s": round(time_limit), "baseline_wall_s": base["wall_s"] if base else None,
           "steps": len(steps), "step_wall_s": steps, "median_step_s": statistics.median(steps) if steps else None,
           "rows": [{k: r[k] for k in ("iteration", "optimization", "status", "latency_ms", "wall_s", "runs", "split")}
                    for r in s["rows"]],
           "suite": _suite_records(sub), "stop": s["stop"]}
    print(f"[replay_suite] {name} {mode}: {len(steps)} step(s), median "
          f"{res['median_step_s'] if steps else '-'} s", flush=True)
    return res


def versions() -> dict:
    """python, torch, cuda.tile and this checkout's commit (the GPU line carries the driver)."""
    import subprocess
    out = {"python": sys.version.split()[0]}
    for mod in ("torch", "cuda.tile"):
        try:
            out[mod] = getattr(__import__(mod, fromlist=["__version__"]), "__version__", "?")
        except Exception as e:
            out[mod] = f"unavailable ({type(e).__name__})"
    out["cutile-diag"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True).stdout.strip() or "?"
    return out


def render(args, runs: list[dict], gpu: str) -> tuple[str, str]:
    lines = [f"# Replay vs --no-replay, command mode (issue 29){' — DRY RUN (CPU)' if args.dry_run else ''}", "",
             f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; GPU, driver: {gpu}",
             f"- versions: {', '.join(f'{k} {v}' for k, v in versions().items())}",
             f"- command: `python bench/gpu/replay_suite.py {' '.join(sys.argv[1:])}`",
             f"- loop options for both modes: `{' '.join(LOOP)}`; stopped after {args.steps} iterations or the time "
             f"limit", f"- target: median step <= {GOAL_STEP_S:g} s with replay", "",
             "| target | mode | steps | median step s | baseline s | step walls s | suite start -> final ms | stop |",
             "|---|---|---:|---:|---:|---|---|---|"]
    for r in runs:
        st = {x["when"]: x for x in r["suite"]}
        suite_txt = " -> ".join(f"{st[w]['median_ms']:.6f}" for w in ("start", "end") if st.get(w, {}).get("median_ms"))
        if st.get("end", {}).get("disagrees"):
            suite_txt += f" (disagrees: {st['end']['disagrees']})"
        med = f"{r['median_step_s']:.1f}" if r["median_step_s"] is not None else "-"
        lines.append(f"| {r['target']} | {r['mode']} | {r['steps']} | {med} | {r['baseline_wall_s'] or '-'} | "
                     f"{', '.join(f'{w:.0f}' for w in r['step_wall_s']) or '-'} | {suite_txt or '-'} | "
                     f"{((r['stop'] or {}).get('rule') or r['rc'])} |")
    rep = [r["median_step_s"] for r in runs if r["mode"] == "replay" and r["median_step_s"] is not None]
    verdict = (f"median step with replay {statistics.median(rep):.1f} s: "
               f"{'met' if statistics.median(rep) <= GOAL_STEP_S else 'NOT met'} (<= {GOAL_STEP_S:g} s)"
               if rep else "no replayed step recorded: NOT met")
    return "\n".join(lines + ["", verdict, ""]), verdict


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", help="a TileGym checkout (never modified); required unless --dry-run")
    ap.add_argument("--budget-s", type=float, default=300.0, help="this suite's wall time")
    ap.add_argument("--target", default="geglu,dropout", help=f"TileGym kernels ({', '.join(cm.TARGETS)})")
    ap.add_argument("--steps", type=int, default=3, help="iterations per loop before it is stopped")
    ap.add_argument("--dry-run", action="store_true", help="CPU: command_mode's fixture, simulated GPU")
    args, out = parse_suite_args(ap)
    names = ["dry"] if args.dry_run else [n.strip() for n in args.target.split(",") if n.strip()]
    known = cm.DRY_TARGETS if args.dry_run else cm.TARGETS
    if any(n not in known for n in names):
        print(f"replay_suite: unknown target in {names}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    plan = [(n, "replay") for n in names] + [(names[0], "no-replay")]
    weights = [SHARES[m] for _n, m in plan]
    started = time.monotonic()
    runs = []
    for i, (name, mode) in enumerate(plan):
        left = args.budget_s - (time.monotonic() - started) - 10
        limit = max(30.0, left * weights[i] / sum(weights[i:]) - 20)
        runs.append(one(name, known[name], mode, args, limit, out))
    gpu = "CPU (dry run)" if args.dry_run else suite.gpu_name()
    md, verdict = render(args, runs, gpu)
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps({"gpu": gpu, "versions": versions(), "argv": sys.argv[1:],
                                                  "runs": runs, "verdict": verdict}, indent=1, default=str))
    print(md, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
