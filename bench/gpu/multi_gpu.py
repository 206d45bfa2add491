#!/usr/bin/env python
"""What the GPU count buys a campaign (issue 34), on one host with >= 2 GPUs (kind nvidia-h200-x2 or
larger), the local executor with one worker process per GPU (``campaign --gpus N|all``).

    source .device/setup.sh
    python bench/gpu/multi_gpu.py --out $W/multi_gpu --tilegym /tmp/TileGym --budget-s 530 --time-limit 120
    python bench/gpu/multi_gpu.py --out /tmp/mg-dry --dry-run        # CPU: --simulate, 2 fake GPUs

Steps (each a ``cutile-diag`` command with its exit code and seconds in results.md):
0. ``campaign --plan --json --max-tests 2 -- pytest <three op test files> -k ...``: the survey and
   ranked plan, once; every campaign below gets a copy of it (``--out`` of its own, the plan reused).
1. The same campaign twice, side by side: one kernel per op, ``--baselines-first --time-limit T``
   (the same T), the loop options of campaign_suite (``--no-capture --rounds 2 --max-sweep 1``),
   first on one GPU (``--gpus 1``, in-process, pinned to the host's second GPU), then on every GPU
   (``--gpus all``): wall time, kernels with a baseline, kernels finished, steps run, speedups.
   The loops' branches are deleted between campaigns (the same kernels get the same branch names).
2. A/A noise: ``calibrate examples:softmax`` (20 decisions x 3 rounds, ``--no-save``) on GPU 0
   alone, then on GPU 0 again while run 1's campaign measures on GPU 1; per window the SM clock,
   power and utilisation of both GPUs (NVML, sampled every 0.5 s by this script): does a neighbour
   move the CI half-width, the latency or the false keeps?
3. Kill a worker mid-step: ``campaign --gpus all --max-iterations 2`` on two kernels; once a loop
   has handed over the ``begin`` of a step, its worker process is killed (SIGKILL, pid from the
   driver's workers.json); the driver records it as crashed and retries it on another GPU from its
   ledger. Checked: the victim's ledger at the kill is the start of its final ledger, its retry ran
   on another GPU, no worker process is left.
``--dry-run``: the demo repository (three example kernels, CPU tests), ``--dry-run`` survey,
``--simulate`` loops (whose baselines sleep 3 s "measuring" a ceiling, so side by side shows),
``--gpus 2`` fake GPUs, ``calibrate --simulate``; the same steps, the same checks.
Output under --out: results.json, results.md, clocks.json, suite.log, c1/ cN/ kill/ (each campaign's
campaign.json, workers.json, campaign.md and loops' ledgers and tables), calibrate-*.json.
Expected wall on an H200 x2 (T = 120 s): ~50 s survey, ~30 s calibration alone, 2 x ~(T + 20 s) campaigns (the
second calibration runs inside the first), ~130 s kill: ~500 s; ``bench/gpu/acceptance.sh s8m`` (~9 min).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))
import campaign_suite as cs  # noqa: E402  (OPS, the loop options, one kernel per op)
import optimize_suite as suite  # noqa: E402  (the throw-away TileGym repository, gpu_name)
from harness import LOG, child_env, elapsed, log, parse_suite_args  # noqa: E402
from loop_capture import versions  # noqa: E402
from cutile_diag.procs import kill_group  # noqa: E402

OPS = ("layer_norm_legacy", "rms_norm", "geglu")
WORK = Path("/tmp/multi-gpu")
CALIBRATE = ["examples:softmax", "--configs", "32768x1024-f16", "--rep-ms", "40", "--warmup-ms", "20", "-n", "20",
             "--rounds", "3", "--budget-s", "30", "--json", "--no-save"]
STOP_S = 20.0            # a campaign's --time-limit ends this long before its process is stopped
STEPS: list[dict] = []
OUT_DIR: list[Path] = []       # --out, once parsed


# --- GPU clocks (NVML), sampled by this script for the whole run ---------------------------------

class Clocks:
    """SM clock, power, temperature and utilisation of every GPU every 0.5 s: [t, gpu, MHz, W, C, %]."""

    def __init__(self, n: int):
        self.samples: list[list] = []
        self.stop = threading.Event()
        try:
            import pynvml
            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        except Exception as e:
            self.handles, self.why = [], f"{type(e).__name__}: {e}"
        self.thread = threading.Thread(target=self._run, daemon=True)
        if self.handles:
            self.thread.start()

    def _run(self) -> None:
        import pynvml
        while not self.stop.is_set():
            for i, h in enumerate(self.handles):
                row = [round(elapsed(), 2), i]
                for f in (lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                          lambda: round(pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0, 1),
                          lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                          lambda: pynvml.nvmlDeviceGetUtilizationRates(h).gpu):
                    try:
                        row.append(f())
                    except Exception:
                        row.append(None)
                self.samples.append(row)
            self.stop.wait(0.5)

    def window(self, t0: float, t1: float) -> dict:
        """Per GPU over [t0, t1]: median/min SM clock, median power, max temperature, median utilisation."""
        out = {}
        for g in range(len(self.handles)):
            rows = [r for r in self.samples if r[1] == g and t0 <= r[0] <= t1]
            col = lambda k: [r[k] for r in rows if r[k] is not None]   # noqa: E731
            out[f"gpu{g}"] = {"n": len(rows), "sm_mhz_median": _med(col(2)), "sm_mhz_min": min(col(2), default=None),
                              "power_w_median": _med(col(3)), "temp_c_max": max(col(4), default=None),
                              "util_pct_median": _med(col(5))}
        return out


def _med(xs: list) -> float | None:
    return statistics.median(xs) if xs else None


# --- the commands ----------------------------------------------------------------------------------

def start(argv: list[str], cwd: Path, env: dict, name: str, out: Path) -> dict:
    """``cutile-diag ARGV`` in the background (its own session), stdout to ``out/name.json``."""
    stdout = open(out / f"{name}.json", "w")
    stderr = open(out / f"{name}.log", "w")
    p = subprocess.Popen([sys.executable, "-m", "cutile_diag", *argv], cwd=cwd, env=env, stdout=stdout,
                         stderr=stderr, text=True, start_new_session=True)
    log(f"start {name}: cutile-diag {' '.join(argv)[:200]}")
    return {"p": p, "argv": argv, "name": name, "t0": elapsed(), "files": (stdout, stderr), "out": out,
            "env": {k: env[k] for k in ("CUDA_VISIBLE_DEVICES",) if k in env}}


def finish(h: dict, timeout: float) -> tuple[int, str]:
    """Wait for a started command; SIGTERM past ``timeout`` (a campaign stays resumable), SIGKILL 30 s later."""
    p, why = h["p"], None
    try:
        p.wait(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        why = "budget"
        kill_group(p, grace_s=30)
    for f in h["files"]:
        f.close()
    secs = round(elapsed() - h["t0"], 1)
    STEPS.append({"name": h["name"], "argv": ["cutile-diag", *h["argv"]], "env": h["env"], "rc": p.returncode,
                  "seconds": secs, "started_s": round(h["t0"], 1), **({"killed": why} if why else {})})
    log(f"{h['name']}: rc={p.returncode} in {secs} s{f' ({why})' if why else ''}")
    return p.returncode, (h["out"] / f"{h['name']}.json").read_text()


def run(argv, cwd, env, name, out, timeout) -> tuple[int, str]:
    return finish(start(argv, cwd, env, name, out), timeout)


def json_of(text: str) -> dict | None:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True).stdout.strip()


def drop_loops(repo: Path) -> None:
    """The loops' worktrees and branches of a finished campaign (the next one makes them again)."""
    for line in git(repo, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree ") and "cutile-diag" in line:
            git(repo, "worktree", "remove", "--force", line.split(" ", 1)[1])
    git(repo, "worktree", "prune")
    for b in git(repo, "branch", "--list", "cutile-perf-*", "--format=%(refname:short)").splitlines():
        git(repo, "branch", "-D", b)


def copy_plan(src: Path, dest: Path) -> None:
    """The survey and plan of step 0 into a new campaign folder (the campaign reuses them)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / "survey", dest / "survey", dirs_exist_ok=True)
    shutil.copy(src / "plan.json", dest / "plan.json")


# --- what each campaign gave -------------------------------------------------------------------

def led_records(path: Path) -> list[dict]:
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    except (OSError, json.JSONDecodeError):
        return []


def summarise(out: Path, text: str, wall: float) -> dict:
    """Wall time, kernels with a baseline / finished, steps run, speedups, per worker what it ran."""
    d = json_of(text) or {}
    rows = (d.get("report") or {}).get("kernels")
    if rows is None and (out / "campaign.json").is_file():           # stopped before its report
        from cutile_diag.campaign.report import kernel_rows
        from cutile_diag.campaign.run import Campaign
        rows = kernel_rows(Campaign.load(out))
    rows = rows or []
    steps = 0
    for r in rows:
        recs = led_records(out / "loops" / r["kernel"] / "ledger.jsonl")
        r["steps"] = sum(1 for x in recs if x.get("type") == "iteration" and x.get("iteration"))
        steps += r["steps"]
    workers = json.loads((out / "workers.json").read_text()) if (out / "workers.json").is_file() else {}
    return {"wall_s": round(wall, 1), "kernels": len(rows),
            "with_baseline": sum(1 for r in rows if r.get("start_ms")),
            "finished": sum(1 for r in rows if r["status"] == "done"), "steps": steps,
            "kept": sum(r.get("kept_steps") or 0 for r in rows),
            "rows": [{k: r.get(k) for k in ("kernel", "status", "start_ms", "final_ms", "speedup", "simulated_speedup",
                                            "kept_steps", "steps", "stop_rule", "crashes")} for r in rows],
            "workers": {n: {"gpu": w.get("gpu"), "pid": w.get("pid"), "model": w.get("model"),
                            "kernels": [{k: x.get(k) for k in ("kernel", "attempt", "status", "wall_s", "clocks")}
                                        for x in w["kernels"]],
                            "busy_s": round(sum(x.get("wall_s") or 0 for x in w["kernels"]), 1)}
                        for n, w in workers.items()}}


def calib(text: str) -> dict:
    """A calibration's answer: CI half-width, spread, false keeps/reverts, floor, median latency."""
    d = json_of(text)
    if not d:
        return {"error": text[-300:]}
    out = {k: d.get(k) for k in ("half_width_pct", "spread_pct", "false_keeps", "false_reverts", "noise_floor", "n",
                                 "rounds", "gpu_s")}
    out["median_ms"] = {c: v.get("median_ms") for c, v in (d.get("per_config") or {}).items()}
    return out


# --- the steps ---------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", help="a TileGym checkout (never modified)")
    ap.add_argument("--budget-s", type=float, default=530.0, help="wall budget of the whole run")
    ap.add_argument("--time-limit", type=float, help="each campaign's --time-limit (default 120; dry run 40)")
    ap.add_argument("--ops", default=",".join(OPS), help="three (or more) ops of campaign_suite.OPS")
    ap.add_argument("--dry-run", action="store_true", help="CPU: demo repository, --simulate, 2 fake GPUs")
    args, out = parse_suite_args(ap)
    OUT_DIR.append(out)
    limit = args.time_limit or (40.0 if args.dry_run else 120.0)
    left = lambda: args.budget_s - elapsed()   # noqa: E731
    from cutile_diag.campaign.executors.local import visible_gpus
    gpus = ["0", "1"] if args.dry_run else visible_gpus()
    if len(gpus) < 2:
        print(f"multi_gpu: needs >= 2 GPUs, this host has {len(gpus)} (kind nvidia-h200-x2 or larger)", flush=True)
        return 2
    clocks = Clocks(0 if args.dry_run else len(gpus))
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    if args.dry_run:
        from cutile_diag.campaign.demo import SPECS, make_repo, survey_command
        repo = make_repo(WORK)
        cmd = survey_command()
        specs = {k: {**v, "ceiling": {"dram_tbps": 4.24, "cached": False, "measure_s": 3.0}} for k, v in SPECS.items()}
        (WORK / "specs.json").write_text(json.dumps(specs))
        (WORK / "calib.json").write_text(json.dumps(SPECS["softmax"]))
        sim, plan_flags, all_gpus = ["--simulate", str(WORK / "specs.json")], ["--dry-run"], "2"
        calibrate = ["--simulate", str(WORK / "calib.json"), "-n", "20", "--rounds", "3", "--json", "--no-save"]
        loop = ["--no-capture", "--rounds", "2"]       # as campaign_suite.LOOP on the GPU
    else:
        repo = suite.tilegym_repo(WORK, Path(args.tilegym).resolve())
        ops = [o for o in args.ops.split(",") if o]
        k = " or ".join(f"({cs.OPS[o][1]})" for o in ops)
        cmd = [*cs.PYTEST, *[cs.OPS[o][0] for o in ops], "-k", f"test_perf and cutile and not cutile_rs and ({k})"]
        sim, plan_flags, all_gpus, calibrate, loop = [], [], "all", CALIBRATE, cs.LOOP
    env = child_env(None if args.dry_run else repo)     # TileGym's src (the throw-away repository's) first
    # TileGym: the first config instead of an autotune per version; shorter timing per perf test
    env.update({"TILEGYM_DISABLE_AUTOTUNE": "1", "WARMUP": "20", "REP": "30"})
    env.pop("CUDA_VISIBLE_DEVICES", None)              # the all-GPU campaign sees every GPU; the others are pinned
    res: dict = {"gpus": gpus, "gpu": "simulated (dry run)" if args.dry_run else suite.gpu_name(),
                 "time_limit_s": limit, "command": cmd, "dry_run": args.dry_run}

    # 0. survey + plan, once
    base = repo / "cutile-diag-out" / "plan"
    rc, text = run(["campaign", "--plan", "--json", *plan_flags, *cs.DERIVED, "--out", str(base), "--", *cmd],
                   repo, env, "plan", out, left() * 0.3)
    if rc != 0:
        log(f"the survey failed (rc {rc}): see {out / 'plan.log'}")
        return finish_report(out, res, clocks, problems=["the survey failed"])
    selected = cs.one_per_op(json.loads(text)["plan"])
    res["selected"] = selected
    log(f"one kernel per op: {', '.join(selected)}")
    camp = ["campaign", "--select", ",".join(selected), "--baselines-first", "--time-limit", f"{limit:.0f}", *sim,
            *loop, *cs.DERIVED, "--json"]
    pin = lambda g: {**env, "CUDA_VISIBLE_DEVICES": gpus[g]}   # noqa: E731

    # 2a. A/A on GPU 0 alone
    t0 = elapsed()
    rc, text = run(["calibrate", *calibrate], repo, pin(0), "calibrate-alone", out, 90)
    res["calibrate_alone"] = {**calib(text), "rc": rc, "window": clocks.window(t0, elapsed())}

    # 1a. one GPU (the second), with 2b. A/A on GPU 0 while its loops measure
    c1 = repo / "cutile-diag-out" / "c1"
    copy_plan(base, c1)
    h = start([*camp, "--gpus", "1", "--out", str(c1), "--", *cmd], repo, pin(1), "campaign-1gpu", out)
    end = time.monotonic() + 90
    while time.monotonic() < end and h["p"].poll() is None and not list((c1 / "loops").glob("*/ledger.jsonl")):
        time.sleep(0.5)
    t0 = elapsed()
    rc, text = run(["calibrate", *calibrate], repo, pin(0), "calibrate-neighbour", out, 90)
    res["calibrate_neighbour"] = {**calib(text), "rc": rc, "window": clocks.window(t0, elapsed()),
                                  "neighbour_running": h["p"].poll() is None}
    rc, text = finish(h, limit + STOP_S + 60 - (elapsed() - h["t0"]))
    res["one_gpu"] = {"rc": rc, **summarise(c1, text, STEPS[-1]["seconds"])}
    drop_loops(repo)

    # 1b. every GPU
    cn = repo / "cutile-diag-out" / "cN"
    copy_plan(base, cn)
    rc, text = run([*camp, "--gpus", all_gpus, "--out", str(cn), "--", *cmd], repo, env, "campaign-all", out,
                   min(limit + STOP_S + 60, left() - 60))
    res["all_gpus"] = {"rc": rc, **summarise(cn, text, STEPS[-1]["seconds"])}
    drop_loops(repo)
    a, b = res["one_gpu"], res["all_gpus"]
    res["side_by_side"] = {"wall_ratio": round(a["wall_s"] / b["wall_s"], 3) if b["wall_s"] else None,
                           "steps": [a["steps"], b["steps"]], "finished": [a["finished"], b["finished"]],
                           "with_baseline": [a["with_baseline"], b["with_baseline"]]}

    # 3. a worker killed mid-step
    res["kill"] = kill_step(repo, base, env, out, selected[:2], sim, loop, cmd, all_gpus, left)
    problems = check(res)
    return finish_report(out, res, clocks, problems)


def kill_step(repo, base, env, out, kernels, sim, loop, cmd, all_gpus, left) -> dict:
    """``campaign --gpus all --max-iterations 2`` on two kernels; SIGKILL the worker of the first loop
    whose driver ledger has a step begun and not finished."""
    ck = repo / "cutile-diag-out" / "kill"
    copy_plan(base, ck)
    h = start(["campaign", "--select", ",".join(kernels), "--baselines-first", "--max-iterations", "2", *sim, *loop,
               *cs.DERIVED, "--gpus", all_gpus, "--out", str(ck), "--json", "--", *cmd], repo, env, "campaign-kill", out)
    killed = None
    end = time.monotonic() + max(30.0, left() - 40)
    while h["p"].poll() is None and time.monotonic() < end and killed is None:
        try:
            st = json.loads((ck / "campaign.json").read_text())
            workers = json.loads((ck / "workers.json").read_text())
        except (OSError, json.JSONDecodeError):
            time.sleep(0.2)
            continue
        for name, k in st["kernels"].items():
            recs = led_records(ck / "loops" / name / "ledger.jsonl")
            begun = [r["iteration"] for r in recs if r.get("type") == "begin" and r["iteration"] >= 1]
            done = {r["iteration"] for r in recs if r.get("type") == "iteration"}
            if k["status"] == "running" and k.get("worker") in workers and begun:
                pid = workers[k["worker"]]["pid"]
                os.kill(pid, signal.SIGKILL)
                killed = {"kernel": name, "worker": k["worker"], "gpu": workers[k["worker"]]["gpu"], "pid": pid,
                          "mid_step": begun[-1] not in done, "at_s": round(elapsed(), 1), "held": recs}
                log(f"killed {k['worker']} (pid {pid}, GPU {killed['gpu']}) in {name}'s step {begun[-1]}")
                break
        time.sleep(0.2)
    rc, text = finish(h, max(30.0, left() - 20))
    if killed is None:
        return {"rc": rc, "error": "no loop began a step before the campaign ended"}
    held = killed.pop("held")
    final = led_records(ck / "loops" / killed["kernel"] / "ledger.jsonl")
    st = json.loads((ck / "campaign.json").read_text())["kernels"][killed["kernel"]]
    workers = json.loads((ck / "workers.json").read_text())
    err = (out / "campaign-kill.log").read_text()
    alive = []
    for w in workers.values():
        try:
            os.kill(w["pid"], 0)
            alive.append(w["pid"])
        except ProcessLookupError:
            pass
    return {"rc": rc, **killed, "crashes": st.get("crashes"), "retry_worker": st.get("worker"),
            "retry_gpu": st.get("gpu"), "final_status": st["status"], "held_records": len(held),
            "final_records": len(final), "ledger_kept": final[:len(held)] == held,
            "died_line": next((ln.strip() for ln in err.splitlines() if "died mid-loop" in ln), None),
            "retry_line": next((ln.strip() for ln in err.splitlines() if "retried once" in ln), None),
            "workers_left_running": alive, **summarise(ck, text, STEPS[-1]["seconds"])}


def check(res: dict) -> list[str]:
    """What must hold for the answers to stand (the dry run fails on any)."""
    p = []
    a, b, k = res["one_gpu"], res["all_gpus"], res["kill"]
    for name in ("campaign-1gpu", "campaign-all", "campaign-kill"):
        log_ = OUT_DIR[0] / f"{name}.log"
        if log_.is_file() and "Traceback (most recent call last)" in log_.read_text(errors="replace"):
            p.append(f"{name} ended in a traceback (see {name}.log)")
    if not (a["with_baseline"] and b["with_baseline"]):
        p.append("a campaign measured no baseline")
    if len({w["gpu"] for w in b["workers"].values()}) < 2:
        p.append("the all-GPU campaign did not run on two GPUs")
    for name in ("calibrate_alone", "calibrate_neighbour"):
        if res[name].get("rc") != 0:
            p.append(f"{name} failed")
    if "error" in k:
        p.append(f"kill: {k['error']}")
    else:
        if not (k["crashes"] == 1 and k["retry_gpu"] != k["gpu"] and k["final_status"] in ("done", "paused")):
            p.append(f"kill: the victim was not retried on another GPU ({k['crashes']}, {k['retry_gpu']}, "
                     f"{k['final_status']})")
        if not (k["ledger_kept"] and k["final_records"] > k["held_records"]):
            p.append("kill: the victim's ledger was not kept")
        if k["workers_left_running"]:
            p.append(f"kill: worker(s) left running: {k['workers_left_running']}")
    return p


def finish_report(out: Path, res: dict, clocks: Clocks, problems: list[str]) -> int:
    clocks.stop.set()
    res.update(problems=problems, steps=STEPS, seconds=round(elapsed(), 1),
               date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), python=platform.python_version(),
               versions=versions(), argv=sys.argv)
    (out / "clocks.json").write_text(json.dumps({"columns": ["t_s", "gpu", "sm_mhz", "power_w", "temp_c", "util_pct"],
                                                 "samples": clocks.samples}))
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    (out / "results.md").write_text(markdown(res))
    (out / "suite.log").write_text("\n".join(LOG) + "\n")
    for d in ("c1", "cN", "kill"):                    # each campaign's state, report and ledgers (no worktrees)
        src = WORK / ("kernels" if res["dry_run"] else "TileGym") / "cutile-diag-out" / d
        if src.is_dir():
            shutil.copytree(src, out / d, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("records", "iterations", "logs", "captures", "*.tmp"))
    print((out / "results.md").read_text(), flush=True)
    if problems:
        print(f"[multi_gpu] FAILED: {'; '.join(problems)}", flush=True)
        return 1
    print(f"[multi_gpu] done in {elapsed():.0f} s", flush=True)
    return 0


def markdown(res: dict) -> str:
    f = lambda v, s=".3f": "-" if v is None else format(v, s)   # noqa: E731
    md = ["# Multi-GPU campaign (issue 34)", "",
          f"- date: {res['date']}; GPU(s): {res['gpu']} x {len(res['gpus'])}; python {res['python']}; "
          f"versions: {res['versions']}",
          f"- command: `python {' '.join(shlex.quote(a) for a in res['argv'])}` ({res['seconds']} s)",
          f"- survey: `{' '.join(res['command'])[:300]}`; each campaign's --time-limit {res['time_limit_s']:.0f} s", ""]
    if "one_gpu" in res and "all_gpus" in res:
        md += ["## 1. The same campaign on one GPU and on every GPU", "",
               "| run | wall s | kernels | with baseline | finished | steps | kept | worker GPUs (busy s) |",
               "|---|---|---|---|---|---|---|---|"]
        for label, r in (("1 GPU", res["one_gpu"]), (f"{len(res['gpus'])} GPUs", res["all_gpus"])):
            ws = ", ".join(f"{w['gpu']}: {w['busy_s']}" for w in r["workers"].values()) or "in-process"
            md.append(f"| {label} | {r['wall_s']} | {r['kernels']} | {r['with_baseline']} | {r['finished']} "
                      f"| {r['steps']} | {r['kept']} | {ws} |")
        md += ["", "| kernel | 1 GPU: status, start ms, final ms, ratio | all GPUs: status, start ms, final ms, ratio |",
               "|---|---|---|"]
        other = {r["kernel"]: r for r in res["all_gpus"]["rows"]}
        for r in res["one_gpu"]["rows"]:
            o = other.get(r["kernel"], {})
            cell = lambda x: (f"{x.get('status')}, {f(x.get('start_ms'), '.6f')}, {f(x.get('final_ms'), '.6f')}, "  # noqa: E731
                              f"{f(x.get('speedup') or x.get('simulated_speedup'))}"
                              f"{' (simulated)' if x.get('simulated_speedup') and not x.get('speedup') else ''}")
            md.append(f"| {r['kernel']} | {cell(r)} | {cell(o)} |")
        md += ["", f"wall ratio (1 GPU / all): {res['side_by_side']['wall_ratio']}; with the same --time-limit every "
               "GPU spends it (a kernel's share is of the GPU time still free: every worker's time left), so the gain "
               "shows as steps and kernels finished as much as in wall time.", ""]
    if "calibrate_alone" in res:
        md += ["## 2. A/A noise on GPU 0, alone and with a loop on GPU 1", "",
               "| run | CI half-width % | spread % | false keeps | false reverts | noise floor | median ms "
               "| GPU0 SM MHz med/min | GPU0 W | GPU1 util % |", "|---|---|---|---|---|---|---|---|---|---|"]
        for label, key in (("alone", "calibrate_alone"), ("neighbour loop on GPU 1", "calibrate_neighbour")):
            c = res[key]
            w = c.get("window", {})
            g0, g1 = w.get("gpu0", {}), w.get("gpu1", {})
            md.append(f"| {label} | {f(c.get('half_width_pct'))} | {f(c.get('spread_pct'))} | "
                      f"{c.get('false_keeps', '-')} of {c.get('n', '-')} | {c.get('false_reverts', '-')} "
                      f"| {f(c.get('noise_floor'), '.5f')} | {c.get('median_ms')} "
                      f"| {g0.get('sm_mhz_median', '-')}/{g0.get('sm_mhz_min', '-')} | {g0.get('power_w_median', '-')} "
                      f"| {g1.get('util_pct_median', '-')} |")
        md.append("")
    k = res.get("kill")
    if k:
        md += ["## 3. A worker killed mid-step", ""]
        if "error" in k:
            md.append(f"not shown: {k['error']}")
        else:
            md += [f"- killed {k['worker']} (pid {k['pid']}, GPU {k['gpu']}) at {k['at_s']} s in {k['kernel']}'s loop "
                   f"({'mid-step: its begin written, its iteration not' if k['mid_step'] else 'between steps'})",
                   f"- driver: `{k['died_line']}`", f"- driver: `{k['retry_line']}`",
                   f"- retried on {k['retry_worker']} (GPU {k['retry_gpu']}), crashes {k['crashes']}, final status "
                   f"{k['final_status']}; the ledger at the kill ({k['held_records']} records) is the start of the final "
                   f"one ({k['final_records']}): {k['ledger_kept']}; workers left running: {k['workers_left_running'] or 'none'}",
                   ""]
    md += ["## Commands", "", "| step | command | env | rc | started s | s |", "|---|---|---|---|---|---|"]
    md += [f"| {s['name']} | `{' '.join(s['argv'])[:220]}` | {s['env'] or ''} | {s['rc']}"
           f"{' (' + s['killed'] + ')' if s.get('killed') else ''} | {s['started_s']} | {s['seconds']} |"
           for s in res["steps"]]
    if res.get("problems"):
        md += ["", "Problems: " + "; ".join(res["problems"])]
    return "\n".join(md) + "\n"


if __name__ == "__main__":
    sys.exit(main())
