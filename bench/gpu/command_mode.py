#!/usr/bin/env python
"""Issue 21's last acceptance item: "command mode on a TileGym perf test with default options
completes the baseline and at least three iterations within 10 minutes".

In a throw-away copy of TileGym, ``cutile-diag optimize FILE.py::KERNEL --test-cmd '...'
--bench-cmd '...' --time-limit T`` and nothing else (every loop option at its default: rounds,
sweep size, budget, capture), with TileGym's own pytest correctness tests as the test command and
its perf tests (``--print-record``) as the benchmark, on small memory-bound kernels without
CAPTURE_SPECS (``--target``, see TARGETS). The ledger is watched while the loop runs: when the
baseline and each iteration were recorded (seconds since ``optimize`` started), and each one's
``step_costs`` (where its time went, how many runs of each command).

The recipe's own stop rules (a kept step under 2 %, two steps in a row without gain) end a loop
before three iterations on a kernel whose first steps do not pay (session 6: layer_norm, two
reverts, stopped at 207 s). ``--target a,b,c`` therefore tries the kernels in order: the next one
only when a loop ended before three iterations and at least MIN_NEXT_S of the budget is left. Every
attempt is reported; the item is met when one loop recorded its third iteration within 600 s.

    source .device/setup.sh
    python bench/gpu/command_mode.py --out $OUT/command_mode --tilegym /tmp/TileGym --budget-s 530 \
        --target geglu,dropout
    python bench/gpu/command_mode.py --out /tmp/cm-dry --dry-run --target dry_stalls,dry   # CPU: same plumbing

``--dry-run``: the spec-less ``row_norm`` example (2-D gathers, like the rms_norm kernel) in a
fixture repository with TileGym-style pytest tests on CPU tensors: the correctness test runs the
launch wrapper (the loop's launch observer records the launch without executing it: a simulated
GPU), the perf test records a latency computed from the kernel's source (``DRY_MS``); everything
else — the loop, its captures from the check run, compiles, ledger, this report — as on the GPU.
``dry_stalls`` makes every change 5 % slower (the recipe stops it after two steps: the fallback).
Writes results.json and results.md under --out (one folder per target when there are several);
prints whether "baseline + >= 3 iterations within 600 s" was met.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import optimize_suite as suite  # noqa: E402  (the throw-away TileGym repository, gpu_name)
from harness import ROOT, child_env, parse_suite_args, plugin_flag  # noqa: E402

sys.path.insert(0, str(ROOT / "src"))

GOAL_S = 600.0               # the 10 minutes
GOAL_ITERATIONS = 3
GRACE_S = 25.0               # kept back from --budget-s: a step the loop kills, the report
PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider"
LN_PERF = "tests/ops/test_layer_norm_legacy.py::Test_LayerNorm::test_perf[cutile-n=4096-n=16384-torch.float16]"
GEGLU_PERF = "tests/ops/activation/test_geglu.py::Test_GEGLU::test_perf[cutile-(256, 64, 16, 128)-3-torch.float16-{}]"
DROPOUT_PERF = "tests/ops/test_dropout.py::Test_Dropout::test_perf[cutile-{}-0.5-False-torch.float16]"
MIN_NEXT_S = 300.0           # the next target is tried only with this much left: a baseline and 3 steps
TARGETS = {
    # three passes over the row through gathers, 71 % of the measured ceiling at this shape (session 5's
    # campaign): room for steps that gain, so the recipe's own stop rules are less likely to end the loop
    # before three iterations
    "layer_norm": {
        "file": "src/tilegym/ops/cutile/layer_norm_legacy.py", "kernel": "_layer_norm_fwd_kernel",
        "test": f"{PYTEST} tests/ops/test_layer_norm_legacy.py -x -k 'Test_LayerNorm and test_op and cutile'",
        "bench": f"WARMUP=20 REP=30 {PYTEST} -s --print-record {plugin_flag()}'{LN_PERF}'"},
    # session 3's command-mode target (loop_capture.py rms_norm-command), already ~90 % of the ceiling
    "rms_norm": {
        "file": "src/tilegym/ops/cutile/rms_norm.py", "kernel": "_rms_norm_kernel_gather",
        "test": f"{PYTEST} tests/ops/test_rms_norm.py -x -k 'test_op and cutile and multi_wave_reload and 31072'",
        "bench": f"WARMUP=20 REP=30 {PYTEST} tests/ops/test_rms_norm.py -s --print-record {plugin_flag()}"
                 "-k 'test_perf and cutile and multi_wave_reload and 262144 and 1024'"},
    # session 6's campaign: 48 % of the ceiling, 256-element tiles and no hints (C and G apply)
    "geglu": {
        "file": "src/tilegym/ops/cutile/activation/geglu.py", "kernel": "_geglu_fwd_kernel",
        "test": f"{PYTEST} tests/ops/activation/test_geglu.py -x -k 'not test_perf and cutile and not cutile_rs "
                "and 3-torch.float16'",
        "bench": f"WARMUP=20 REP=30 {PYTEST} -s --print-record {plugin_flag()}"
                 f"'{GEGLU_PERF.format('none')}' '{GEGLU_PERF.format('tanh')}'"},
    # session 6's campaign: 63 % (a 64 M-element copy at 88 %, a 1 M one at 38 %); A, B, C, G apply
    "dropout": {
        "file": "src/tilegym/ops/cutile/dropout.py", "kernel": "_dropout_kernel",
        "test": f"{PYTEST} tests/ops/test_dropout.py -x -k 'not test_perf and cutile and not cutile_rs "
                "and float16 and False'",
        "bench": f"WARMUP=20 REP=30 {PYTEST} -s --print-record {plugin_flag()}"
                 f"'{DROPOUT_PERF.format(1048576)}' '{DROPOUT_PERF.format(67108864)}'"},
}

# --- the dry run's fixture: a TileGym-like repository on CPU tensors --------------------------

DRY_CONFTEST = '''import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
# a simulated GPU: no kernel executes.  Under the loop's launch observer (its check run) the launch
# is recorded without executing; otherwise a stand-in takes it (and answers torch.cuda's queries)
if os.environ.get("CUTILE_DIAG_LAUNCH_DIR"):
    os.environ["CUTILE_DIAG_LAUNCH_EXECUTE"] = "0"
import cuda.tile as ct  # noqa: E402

if not os.environ.get("CUTILE_DIAG_LAUNCH_DIR"):
    from cutile_diag.capture.launches import cpu_cuda
    CPU = cpu_cuda()           # held for the session (dropped, the stand-in would be undone)
    CPU.__enter__()
    ct.launch = lambda *a, **k: None
'''

DRY_TEST = '''import hashlib
import os
import pathlib
import re
import time

import torch

KERNEL = pathlib.Path(__file__).resolve().parents[1] / "ops" / "row_norm.py"
ORIGINAL = "@ORIGINAL@"
OCCUPANCY = {1: 1.04, 2: 0.97, 4: 0.95, 8: 0.99}
TILE_N = {512: 1.02, 2048: 0.96, 4096: 0.97}


def simulated_ms() -> float:
    """The simulated GPU's latency of the kernel file as it is: tile loads instead of gathers 30 %
    faster, the row read once 10 %, stores off TMA 5 %, latency hints 4 %, occupancy per OCCUPANCY,
    the wrapper's tile per TILE_N, a persistent grid 2 %; +-0.1 % from the text."""
    src = KERNEL.read_text()
    t = float(os.environ.get("DRY_MS", "0.09"))
    t *= 1.0 if "ct.gather(" in src else 0.7
    t *= 0.9 if src.count("for j in range") < 2 else 1.0
    t *= 0.95 if "allow_tma=False" in src else 1.0
    t *= 0.96 if "latency=" in src else 1.0
    m = re.search(r"occupancy=(\\d+)", src)
    t *= OCCUPANCY.get(int(m.group(1)), 1.0) if m else 1.0
    m = re.search(r"tile_n=(\\d+)", src)
    t *= TILE_N.get(int(m.group(1)), 1.0) if m else 1.0
    t *= 0.98 if "num_blocks" in src else 1.0
    if os.environ.get("DRY_NO_GAIN") and hashlib.sha256(src.encode()).hexdigest() != ORIGINAL:
        t = float(os.environ.get("DRY_MS", "0.09")) * 1.05       # every change 5 % slower: the loop stops early
    return t * (1 + (int(hashlib.sha256(src.encode()).hexdigest()[:6], 16) % 200 - 100) * 1e-5)


def _run():
    from ops import row_norm
    x = torch.randn(512, 1000)
    row_norm.launch(x, torch.empty_like(x), torch.empty(512), torch.empty(512))


def test_op_row_norm():
    _run()
    time.sleep(float(os.environ.get("DRY_CHECK_S", "0")))


def test_perf_row_norm(record_property):
    _run()
    time.sleep(float(os.environ.get("DRY_RUN_S", "0")))
    ms = simulated_ms()
    record_property("benchmark", {"cutile": {"forward": {"median": ms, "mean": ms, "rel_std": 0.2, "nrep": 30}}})
'''


def dry_repo(work: Path) -> Path:
    from cutile_diag.examples import EXAMPLES_DIR
    repo = work / "kernels"
    (repo / "ops").mkdir(parents=True)
    (repo / "tests").mkdir()
    shutil.copy(EXAMPLES_DIR / "row_norm.py", repo / "ops" / "row_norm.py")
    (repo / "ops" / "__init__.py").write_text("")
    (repo / "tests" / "conftest.py").write_text(DRY_CONFTEST)
    original = hashlib.sha256((repo / "ops" / "row_norm.py").read_bytes()).hexdigest()
    (repo / "tests" / "test_row_norm.py").write_text(DRY_TEST.replace("@ORIGINAL@", original))
    (repo / ".gitignore").write_text("__pycache__/\ncutile-diag-out/\n")
    for c in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "row_norm and its tests"]):
        suite.sh(suite.GIT + c, repo)
    return repo


_DRY = {"file": "ops/row_norm.py", "kernel": "row_norm",
        "test": f"{PYTEST} tests/test_row_norm.py -k test_op",
        "bench": f"{PYTEST} tests/test_row_norm.py -k test_perf -s --print-record {plugin_flag()}".strip()}
DRY_TARGETS = {
    # every change measures 5 % slower: the recipe stops the loop after two steps, and the next target
    # is tried (the GPU run's fallback, on the CPU)
    "dry_stalls": {**_DRY, "env": {"DRY_NO_GAIN": "1"}},
    "dry": _DRY,
}


# --- the run ---------------------------------------------------------------------------------

class LedgerWatch:
    """Polls a ledger while the loop writes it: when (seconds since ``t0``) each record appeared."""

    def __init__(self, path: Path, t0: float, every: float = 0.25):
        self.path, self.t0, self.every = path, t0, every
        self.seen: list[tuple[float, dict]] = []
        self._n = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _poll(self) -> None:
        try:
            lines = [ln for ln in self.path.read_text().splitlines() if ln.strip()]
        except OSError:
            return
        now = time.monotonic() - self.t0
        for ln in lines[self._n:]:
            try:
                self.seen.append((now, json.loads(ln)))
            except ValueError:
                return                  # a line being written: read again next time
            self._n += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._poll()
            self._stop.wait(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._poll()


def iterations_seen(seen: list[tuple[float, dict]]) -> int:
    return sum(1 for _, r in seen if r.get("type") == "iteration" and r.get("iteration", 0) > 0)


def run_loop(repo: Path, target: dict, env: dict, time_limit: float, timeout: float, out: Path,
             stop_after: int | None = None, extra: tuple[str, ...] = ()) -> dict:
    """``optimize`` with the defaults and --time-limit; what it wrote, and when.  ``stop_after``:
    SIGTERM the loop (resumable, as a user's Ctrl-C) once that many iterations are recorded —
    what the acceptance item asks is then answered, and device time is not spent past it.  ``extra``:
    more optimize flags (replay_suite: --no-replay, --rounds)."""
    ref = f"{repo / target['file']}::{target['kernel']}"
    argv = [sys.executable, "-m", "cutile_diag", "optimize", ref, "--test-cmd", target["test"],
            "--bench-cmd", target["bench"], "--time-limit", f"{time_limit:.0f}", *extra]
    state = repo / "cutile-diag-out" / "optimize" / target["kernel"]
    t0 = time.monotonic()
    with open(out / "optimize.stderr.txt", "w") as err, LedgerWatch(state / "ledger.jsonl", t0) as watch:
        p = subprocess.Popen(argv, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                             start_new_session=True)
        got: dict = {}
        reader = threading.Thread(target=lambda: got.update(out=p.communicate()[0]), daemon=True)
        reader.start()
        end, stopped, killed_at = time.monotonic() + timeout, None, None
        while reader.is_alive():
            reader.join(0.5)
            if not reader.is_alive():
                break
            why = ("goal" if stop_after and iterations_seen(watch.seen) >= stop_after else
                   "timeout" if time.monotonic() > end else None)
            if why and stopped is None:
                stopped, killed_at = why, time.monotonic()
                os.killpg(p.pid, 15)           # SIGTERM: the loop records a resumable state
            elif stopped and time.monotonic() > killed_at + 30:
                os.killpg(p.pid, 9)
                reader.join()
        stdout = got.get("out")
        rc = {"goal": f"stopped after {stop_after} iterations", "timeout": "timeout"}.get(stopped, p.returncode)
    wall = time.monotonic() - t0
    (out / "optimize.stdout.txt").write_text(stdout or "")
    for f in ("ledger.jsonl", "perf_results.md"):
        if (state / f).exists():
            shutil.copy(state / f, out / f)
    if rc != 0 and (state / "logs").is_dir():       # the commands' output says why
        shutil.copytree(state / "logs", out / "logs", dirs_exist_ok=True)
    return {"argv": ["cutile-diag", *argv[3:]], "rc": rc, "wall_s": round(wall, 1), "seen": watch.seen}


def summarize(run: dict) -> dict:
    """The baseline and each iteration: when recorded, how long, where the time went."""
    from cutile_diag.loop.costs import split_line
    rows, prev, begin0, stop = [], None, None, None
    for at, rec in run["seen"]:
        if rec.get("type") == "begin" and rec.get("iteration") == 0 and begin0 is None:
            begin0 = at
        if rec.get("type") == "stop":
            stop = {"rule": rec.get("rule"), "reason": rec.get("reason"), "at_s": round(at, 1)}
        if rec.get("type") != "iteration":
            continue
        sc = rec.get("step_costs") or {}
        rows.append({"iteration": rec["iteration"], "optimization": rec.get("optimization"),
                     "status": rec.get("status"), "latency_ms": rec.get("latency_ms"),
                     "recorded_at_s": round(at, 1),
                     "wall_s": round(at - (prev if prev is not None else (begin0 or 0.0)), 1),
                     "step_wall_s": sc.get("wall_s"), "seconds": rec.get("seconds"),
                     "runs": {p: (sc.get(p) or {}).get("runs") for p in ("check", "time", "compile", "capture")
                              if sc.get(p)},
                     "rounds": (rec.get("rounds") or {}).get("n") or (rec.get("plan") or {}).get("confirm_rounds"),
                     "capture": (rec.get("capture") or {}).get("source") or (rec.get("capture") or {}).get("error"),
                     "split": split_line(sc), "step_costs": sc})
        prev = at
    done = [r for r in rows if r["iteration"] > 0]
    at3 = done[GOAL_ITERATIONS - 1]["recorded_at_s"] if len(done) >= GOAL_ITERATIONS else None
    met = at3 is not None and at3 <= GOAL_S
    # when the loop ended early: where iteration 3 would have landed at the steps' mean wall time
    base = next((r for r in rows if r["iteration"] == 0), None)
    projected = None
    if at3 is None and base is not None and done:
        mean = sum(r["wall_s"] for r in done) / len(done)
        projected = round(done[-1]["recorded_at_s"] + (GOAL_ITERATIONS - len(done)) * mean, 1)
    rule = (stop or {}).get("rule")
    head = f"baseline + >= {GOAL_ITERATIONS} iterations within {GOAL_S:.0f} s: "
    if met:
        verdict = head + f"met (iteration {GOAL_ITERATIONS} recorded at {at3:.0f} s)"
    elif at3 is not None:
        verdict = head + f"NOT met (iteration {GOAL_ITERATIONS} recorded at {at3:.0f} s)"
    else:
        why = ("--time-limit ended the loop" if rule == "time-limit" else
               f"the loop stopped by its own rule '{rule}', not the clock" if rule else "the loop did not finish")
        verdict = head + (f"NOT met: {why} after {len(done)} iteration(s) at {run['wall_s']:.0f} s"
                          + (f"; at the steps' mean wall time iteration {GOAL_ITERATIONS} would be recorded "
                             f"at about {projected:.0f} s" if projected is not None else ""))
    return {"startup_s": round(begin0, 1) if begin0 is not None else None, "rows": rows, "stop": stop,
            "iterations": len(done), "goal": {"seconds": GOAL_S, "iterations": GOAL_ITERATIONS,
                                              "iteration_3_at_s": at3, "projected_at_s": projected, "met": met},
            "verdict": verdict}


def render_attempt(name: str, target: dict, run: dict, s: dict) -> list[str]:
    lines = [f"## {name}: `{target['file']}::{target['kernel']}`", "",
             f"- command: `{' '.join(a if ' ' not in a else repr(a) for a in run['argv'])}` (exit {run['rc']}, "
             f"{run['wall_s']:.0f} s)",
             f"- start-up (process start to the baseline's begin record): {s['startup_s']} s",
             f"- stop: {(s['stop'] or {}).get('reason', '-')}", "",
             "| it | step | status | latency ms | recorded at s | wall s | rounds | runs (check / time / compile) "
             "| capture | where the time went |",
             "|---:|---|---|---:|---:|---:|---:|---|---|---|"]
    for r in s["rows"]:
        lat = f"{r['latency_ms']:.6f}" if isinstance(r.get("latency_ms"), (int, float)) else "-"
        rn = r["runs"]
        lines.append(f"| {r['iteration']} | {str(r['optimization'])[:60].replace('|', '/')} | {r['status']} | {lat} | "
                     f"{r['recorded_at_s']} | {r['wall_s']} | {r['rounds'] or '-'} | "
                     f"{rn.get('check', 0)} / {rn.get('time', 0)} / {rn.get('compile', 0)} | {r['capture'] or '-'} | "
                     f"{r['split']} |")
    return lines + ["", s["verdict"], ""]


def render(args, attempts: list[dict], gpu: str, verdict: str) -> str:
    lines = [f"# Command mode, default options: baseline + {GOAL_ITERATIONS} iterations within "
             f"{GOAL_S:.0f} s (issue 21){' — DRY RUN (simulated GPU, CPU)' if args.dry_run else ''}", "",
             f"- GPU: {gpu}" + (f"; {args.dry_cost_s[0]:g} s / {args.dry_cost_s[1]:g} s added to each test / bench "
                                f"run" if args.dry_run and any(args.dry_cost_s) else ""),
             f"- targets, in order: {', '.join(a['name'] for a in attempts)} (the next one is tried when a loop ends "
             f"by its own rule before {GOAL_ITERATIONS} iterations and at least {MIN_NEXT_S:.0f} s are left)",
             f"- verdict: {verdict}", ""]
    for a in attempts:
        lines += render_attempt(a["name"], a["target"], a["run"], a["summary"])
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", help="a TileGym checkout (never modified); required unless --dry-run")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="this suite's wall time (default 530; 420 with --dry-run): each loop's --time-limit is what "
                         "is left of it, less a grace for the report")
    ap.add_argument("--target", default=None,
                    help="comma-separated TileGym kernels tried in order until one loop records "
                         f"{GOAL_ITERATIONS} iterations ({', '.join(TARGETS)}; default layer_norm); "
                         f"--dry-run: {', '.join(DRY_TARGETS)} (default dry)")
    ap.add_argument("--dry-run", action="store_true", help="CPU: fixture repository, simulated GPU (see above)")
    ap.add_argument("--dry-cost-s", type=float, nargs=2, default=(0.0, 0.0), metavar=("CHECK", "RUN"),
                    help="--dry-run: seconds added to each run of the test / bench command, to play the GPU's "
                         "per-run costs (the H200's TileGym runs: about 12-14 s and 17-22 s in all)")
    ap.add_argument("--run-on", action="store_true",
                    help=f"let the loop go on after its {GOAL_ITERATIONS}th iteration (default: stop it there)")
    args, out = parse_suite_args(ap)
    known = DRY_TARGETS if args.dry_run else TARGETS
    names = [n.strip() for n in (args.target or ("dry" if args.dry_run else "layer_norm")).split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        print(f"command_mode: unknown target(s) {', '.join(unknown) or '(none)'}; known: {', '.join(known)}",
              file=sys.stderr)
        return 2
    budget = args.budget_s if args.budget_s is not None else (420.0 if args.dry_run else 530.0)
    started = time.monotonic()
    attempts: list[dict] = []
    for i, name in enumerate(names):
        left = budget - (time.monotonic() - started)
        if i and left < MIN_NEXT_S:
            print(f"[command_mode] {name}: not tried, {left:.0f} s left (< {MIN_NEXT_S:.0f} s)", flush=True)
            break
        work = Path(tempfile.mkdtemp(prefix="cutile-diag-command-mode-"))
        sub = out / name if len(names) > 1 else out
        sub.mkdir(parents=True, exist_ok=True)
        try:
            target = known[name]
            if args.dry_run:
                repo = dry_repo(work)
                env = child_env()
                env.update({"DRY_CHECK_S": str(args.dry_cost_s[0]), "DRY_RUN_S": str(args.dry_cost_s[1])})
            else:
                repo = suite.tilegym_repo(work, Path(args.tilegym).resolve())
                env = child_env(repo)        # TileGym's src on PYTHONPATH (the loop moves it to its worktree)
                env["TILEGYM_DISABLE_AUTOTUNE"] = "1"
            env.update(target.get("env", {}))
            left = budget - (time.monotonic() - started)
            time_limit = max(30.0, left - GRACE_S)
            print(f"[command_mode] {target['kernel']}: optimize --time-limit {time_limit:.0f}", flush=True)
            run = run_loop(repo, target, env, time_limit, timeout=time_limit + GRACE_S - 5, out=sub,
                           stop_after=None if args.run_on else GOAL_ITERATIONS)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        s = summarize(run)
        attempts.append({"name": name, "target": target, "time_limit_s": round(time_limit), "run": run, "summary": s})
        print(f"[command_mode] {name}: {s['verdict']}", flush=True)
        if s["goal"]["met"]:
            break
    met = [a for a in attempts if a["summary"]["goal"]["met"]]
    verdict = (f"met on {met[0]['name']}: {met[0]['summary']['verdict']}" if met else
               f"NOT met on any of {', '.join(a['name'] for a in attempts)}")
    gpu = "none (dry run: simulated GPU, CPU tensors)" if args.dry_run else suite.gpu_name()
    md = render(args, attempts, gpu, verdict)
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps(
        {"dry_run": args.dry_run, "dry_cost_s": list(args.dry_cost_s) if args.dry_run else None, "gpu": gpu,
         "budget_s": budget, "met": bool(met), "verdict": verdict,
         "attempts": [{"name": a["name"], "target": a["target"], "time_limit_s": a["time_limit_s"],
                       "optimize": {k: v for k, v in a["run"].items() if k != "seen"}, **a["summary"]}
                      for a in attempts]}, indent=1, default=str))
    print(md)
    print(f"[command_mode] {verdict}", flush=True)
    ok = all(a["summary"]["rows"] and (a["run"]["rc"] == 0 or str(a["run"]["rc"]).startswith("stopped after"))
             for a in attempts)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
