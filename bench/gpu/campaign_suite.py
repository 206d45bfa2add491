#!/usr/bin/env python
"""A campaign on the GPU (issue 22): ``cutile-diag campaign`` (local executor) over TileGym's perf
tests of five ops, one kernel per op, every kernel's baseline first, then steps best expected gain
first, within one device call's wall budget — resumable across calls (the state comes back as a
small tarball: the campaign's folder and the loops' git refs; the throw-away TileGym repository is
made again, commit for commit, from the TileGym checkout).

    source .device/setup.sh
    python bench/gpu/campaign_suite.py --out $W/campaign_suite --tilegym /tmp/TileGym --budget-s 540 \\
        --state-in .gpu/campaign_state_s6c.tgz --state-out $OUT/campaign_state_s6c.tgz
    python bench/gpu/campaign_suite.py --out /tmp/cs-dry --dry-run       # CPU: two calls, the second resumed

Steps of a call (each a ``cutile-diag`` command, listed in report.md with exit code and seconds):
1. ``campaign --plan --json --max-tests 2 -- pytest <five test files> -k "test_perf and cutile and not
   cutile_rs and (<one clause per op>)"``: the survey (bounded: 2-4 perf tests per op; it continues a
   survey an earlier call left unfinished), the ranked kernels with their derived commands; killed
   at half of what is left (what it saw is kept: the next call continues it).  The clauses also pick
   each file's correctness tests: the derived check is the same -k with ``not test_perf``.
2. One kernel per op (the one its perf tests launch most), then
   ``campaign --select <them> --baselines-first --time-limit <left - 30 s> --no-capture --rounds 2
   --max-sweep 1 --max-tests 2 -- <same command>`` (survey and plan reused): every baseline, then
   steps; or ``campaign --resume --time-limit <left - 30 s>`` when an earlier call started it.
   SIGTERM past the budget (the campaign stays resumable; its report is written on the way out).
3. report.md / summary.json: per kernel its op, start and final % of the measured ceiling (the
   report's, also when the budget stopped the campaign), and the state tarball for the next call.
``--dry-run``: the demo repository of ``campaign.demo`` (three example kernels, one per op file,
CPU perf tests), the survey with --dry-run and the loops with --simulate; call 1 is stopped once
every baseline is in and a step has begun, call 2 restores the tarball into a fresh folder and
resumes: every step of a GPU call and of the one after it.
Output under --out: report.md, summary.json, plan.json, campaign/{campaign.md,campaign.html,
campaign-ceiling.svg,campaign.json,diffs/,loops/<kernel>/{perf_results.md,ledger.jsonl}}, logs.
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
import tempfile
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))
import optimize_suite as suite  # noqa: E402  (the throw-away TileGym repository, gpu_name)
from harness import child_env, parse_suite_args  # noqa: E402

SUITE = "campaign_suite/s6c"
# op -> (its perf test file at TileGym 75a1430, the -k clause of its perf tests and correctness tests).
# Each launches one cuTile kernel family (tests/ops/test_<op>.py calls tilegym.ops.<op> under
# tilegym.set_backend("cutile")); softmax has no test_perf at 75a1430 and rope needs transformers.
OPS = {
    # Test_PersistentLayerNorm::test_perf[cutile-n=30000-n={256,1024,10000}-...]; check: its test_op 30000x1024
    "layer_norm_legacy": ("tests/ops/test_layer_norm_legacy.py", "Test_PersistentLayerNorm and 30000"),
    # test_perf[cutile-static_persistent-262144-{1024,2048,4096}-...]; check: test_op static_persistent
    "rms_norm": ("tests/ops/test_rms_norm.py", "test_rms_norm and static_persistent and not 65536"),
    # test_perf[cutile-64-1024-{512,1024,4096,8192}-torch.float16]; check: its float16 test_op
    "silu_and_mul": ("tests/ops/test_silu_and_mul.py", "test_silu_and_mul and float16"),
    # test_perf[cutile-{2^20..2^26}-0.5-False-torch.float16] (not in place); check: float16 test_op
    "dropout": ("tests/ops/test_dropout.py", "test_dropout and float16 and False"),
    # the same file's non-persistent three-pass gather norm, Test_LayerNorm::test_perf[cutile-n=4096-n={2048,8192}-
    # torch.float16] (every id holds n=4096, its m); check: Test_LayerNorm's test_op (session 9: +14 % on an H200
    # from occupancy=4 and approximate division)
    "layer_norm": ("tests/ops/test_layer_norm_legacy.py", "Test_LayerNorm and (test_op or 2048 or 8192)"),
    # test_perf[cutile-(256, 64, 16, 128)-3-torch.float16-{none,tanh}]; check: test_op (256, 64, 16, 4)-3-f16
    "geglu": ("tests/ops/activation/test_geglu.py", "test_geglu and 3-torch.float16"),
}
# fixed: the loops' ledgers and worktrees record absolute paths; a later call restores the folder here
WORK = Path("/tmp/campaign-s6c")
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
# the plan's options: step 1 and step 2 pass the same, so step 2 reuses step 1's plan
DERIVED = ["--max-tests", "2"]
# every loop: no AOT capture (28-30 s a version on TileGym), 2 interleaved rounds, one setting per sweep step
LOOP = ["--no-capture", "--rounds", "2", "--max-sweep", "1", "--budget", "240"]
STOP_S = 30.0           # the campaign's --time-limit ends this long before the call's budget
# the throw-away repository's commit is the same in every call (the loops' branches grow from it)
GIT_DATES = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000"}
STATE_LIMIT = 3_000_000   # bytes: the tarball travels back to the device in .gpu (the carry leaves ~6 MB beside .device)
FILE_LIMIT = 2_000_000    # bytes: a file of the campaign's folder past this stays out of the state
T0 = time.monotonic()


def run(argv: list[str], cwd: Path, env: dict, timeout: float, log: Path, steps: list,
        stop_when: Callable[[], bool] | None = None) -> tuple[int, str]:
    """One cutile-diag command; SIGTERM at the timeout or once ``stop_when()`` (the campaign records
    a resumable state and writes its report on the way out)."""
    t0 = time.monotonic()
    with open(log, "a") as err, tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen([sys.executable, "-m", "cutile_diag", *argv], cwd=cwd, env=env, text=True,
                             stdout=out, stderr=err, start_new_session=True)
        why = None
        while p.poll() is None:
            if time.monotonic() - t0 > max(5.0, timeout):
                why = "budget"
            elif stop_when is not None and stop_when():
                why = "stopped (dry run: the end of a call)"
            if why:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
                break
            time.sleep(0.5)
        out.seek(0)
        text = out.read()
    steps.append({"argv": ["cutile-diag", *argv], "rc": p.returncode, "seconds": round(time.monotonic() - t0, 1),
                  "started_s": round(t0 - T0, 1), **({"killed": why} if why else {})})
    print(f"[campaign_suite] rc={p.returncode} in {time.monotonic() - t0:.0f} s{f' ({why})' if why else ''}: "
          f"cutile-diag {' '.join(argv)[:160]}", flush=True)
    return p.returncode, text


def git(repo: Path, *args: str, check: bool = True) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=check, capture_output=True, text=True).stdout.strip()


def make_repo(args) -> tuple[Path, list[str], list[str]]:
    """(repository, survey command, campaign flags): the throw-away repository, the same commit in
    every call (fixed dates and identity, the same files)."""
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    saved = {k: os.environ.get(k) for k in GIT_DATES}
    os.environ.update(GIT_DATES)                   # for this commit only (the loops' commits keep their dates)
    try:
        if args.dry_run:
            from cutile_diag.campaign.demo import SPECS, make_repo as demo_repo, survey_command
            repo = demo_repo(WORK)
            spec = WORK / "specs.json"
            spec.write_text(json.dumps(SPECS))
            return repo, survey_command(), ["--simulate", str(spec)]
        repo = suite.tilegym_repo(WORK, Path(args.tilegym).resolve())
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    ops = [o for o in args.ops.split(",") if o]
    missing = [OPS[o][0] for o in ops if not (repo / OPS[o][0]).is_file()]
    if missing:
        raise SystemExit(f"not in {repo}: {', '.join(missing)}")
    k = " or ".join(f"({OPS[o][1]})" for o in ops)
    return repo, [*PYTEST, *[OPS[o][0] for o in ops], "-k", f"test_perf and cutile and not cutile_rs and ({k})"], []


def out_dir(repo: Path) -> Path:
    return repo / "cutile-diag-out" / "campaign"


def _keeper(started: bool, dropped: list[str]) -> Callable[[tarfile.TarInfo], tarfile.TarInfo | None]:
    """The campaign's folder without what the next call makes again: the report (rewritten by every
    run), the loops' logs, captures and candidates, and once the campaign has started (its
    campaign.json holds the plan) the survey's launch records. A file past FILE_LIMIT is left out and
    named in ``dropped``: in session 12 a replay's cached answer on regenerated inputs (the whole output
    of a 1 GB launch, ``expected-regenerated*.pt``) made the tarball 1.75 GB and no result came back."""
    again = {"campaign.html", "campaign-ceiling.svg", "campaign.md", "diffs"} | ({"records"} if started else set())

    def keep(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(ti.name).parts
        if again & set(parts) or "__pycache__" in parts or ti.name.endswith(".tmp"):
            return None
        if ti.isfile() and ti.size > FILE_LIMIT:
            dropped.append(f"{ti.name} ({ti.size / 1e6:.1f} MB)")
            return None
        if "loops" in parts and len(parts) > parts.index("loops") + 2:
            if ti.isdir() or parts[parts.index("loops") + 2] not in ("ledger.jsonl", "perf_results.md"):
                return None
        return ti
    return keep


def save_state(repo: Path, meta: dict, dest: Path, dropped: list[str]) -> int:
    """The tarball of this call's state: meta.json, the campaign's folder, a git bundle of every ref
    beyond the base commit (the loops' branches and kept refs), the measured ceilings."""
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        refs = {}
        for line in git(repo, "for-each-ref", "--format=%(objectname) %(refname)").splitlines():
            sha, name = line.split(" ", 1)
            if name != f"refs/heads/{meta['branch']}":
                refs[name] = sha
        beyond = [n for n, sha in refs.items() if subprocess.run(
            ["git", "merge-base", "--is-ancestor", sha, meta["base"]], cwd=repo).returncode != 0]
        if beyond:
            git(repo, "bundle", "create", str(t / "refs.bundle"), *beyond, "^" + meta["base"])
        (t / "meta.json").write_text(json.dumps({**meta, "refs": refs}, indent=1))
        from cutile_diag.roofline.peaks import cache_path
        if cache_path().is_file():
            shutil.copy(cache_path(), t / "peaks.json")
        with tarfile.open(dest, "w:gz") as tar:
            for p in sorted(t.iterdir()):
                tar.add(p, arcname=p.name)
            if out_dir(repo).is_dir():
                tar.add(out_dir(repo), arcname="campaign", filter=_keeper(state(repo) is not None, dropped))
    if dropped:
        print(f"[campaign_suite] left out of the state (over {FILE_LIMIT / 1e6:.0f} MB; a resumed loop cannot check "
              f"against them): {', '.join(dropped)}", flush=True)
    return dest.stat().st_size


def largest(folder: Path, n: int = 12) -> list[dict]:
    """The ``n`` largest files under ``folder`` (what a state or a results folder would carry)."""
    files = [(p.stat().st_size, p) for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
    return [{"path": str(p.relative_to(folder)), "bytes": b} for b, p in sorted(files, reverse=True)[:n]]


def restore_state(args, src: Path) -> tuple[Path, dict] | None:
    """The repository made again and the earlier call's state put back; None when ``src`` holds no
    state of this suite (a first call)."""
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        with tarfile.open(src) as tar:
            tar.extractall(t, filter="data")
        meta = json.loads((t / "meta.json").read_text()) if (t / "meta.json").is_file() else {}
        if meta.get("suite") != SUITE or meta.get("dry_run") != args.dry_run:
            print(f"[campaign_suite] {src} holds no state of {SUITE} ({'dry run' if args.dry_run else 'GPU'}): "
                  "a new campaign", flush=True)
            return None
        repo, _cmd, _flags = make_repo(args)
        base = git(repo, "rev-parse", "HEAD")
        if base != meta["base"]:
            raise SystemExit(f"the repository was made again at {base[:12]}, not at {meta['base'][:12]} "
                             "(another TileGym checkout?): the state cannot be resumed")
        if (t / "refs.bundle").is_file():
            git(repo, "bundle", "unbundle", str(t / "refs.bundle"))
        for name, sha in meta["refs"].items():
            git(repo, "update-ref", name, sha)
        if (t / "campaign").is_dir():
            shutil.copytree(t / "campaign", out_dir(repo))
        from cutile_diag.roofline.peaks import cache_path
        if (t / "peaks.json").is_file() and not cache_path().is_file():
            cache_path().parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(t / "peaks.json", cache_path())
    print(f"[campaign_suite] restored {repo} at {meta['base'][:12]} with {len(meta['refs'])} ref(s) and the "
          f"campaign's folder from {src} (call {meta['calls'] + 1})", flush=True)
    return repo, meta


def one_per_op(plan: dict, per_file: int = 1) -> list[str]:
    """Per op (a kernel source file) the ``per_file`` kernels with the most to gain (the plan's expected gain: its
    share of the suite's GPU time times its headroom to the attainable time), then the ones launched most, as
    FILE.py::KERNEL (two: layer_norm_legacy.py's persistent and three-pass kernels, launched by different tests)."""
    by_file: dict[str, list[tuple]] = {}
    for k in plan["kernels"]:
        if k["ok"]:
            key = (k["expected_gain"], sum(c["calls"] for c in k["configs"]), k.get("gpu_ms") or 0.0)
            by_file.setdefault(k["file"], []).append((key, f"{k['file']}::{k['ref'].rsplit('::', 1)[1]}"))
    return [ref for got in by_file.values() for _key, ref in sorted(got, reverse=True)[:per_file]]


def state(repo: Path) -> dict | None:
    try:
        return json.loads((out_dir(repo) / "campaign.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def baselines_in_and_a_step_begun(repo: Path) -> bool:
    """Dry run, call 1: stop once every selected kernel has its baseline and a step has begun."""
    st = state(repo)
    if not st:
        return False
    ks = st["kernels"].values()
    started = [k for k in ks if k.get("attempts", 0) >= 2]
    return bool(started) and all(k.get("result") or k["status"] == "crashed" for k in ks)


def collect(repo: Path, out: Path) -> list[dict]:
    """The report, the state and every loop's table and ledger (no worktrees) under --out."""
    src = out_dir(repo)
    dest = out / "campaign"
    if dest.exists():
        shutil.rmtree(dest)
    if not src.is_dir():
        return []
    # the recordings stay behind (the state carries what a next call needs): a replay folder's cached answer can be
    # as large as the launch's outputs
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("records", "replay", "iterations", "logs", "captures",
                                                             "*.tmp"))
    rows = []
    if (src / "campaign.json").is_file():
        from cutile_diag.campaign.report import kernel_rows
        from cutile_diag.campaign.run import Campaign
        for r in kernel_rows(Campaign.load(src)):
            rows.append({k: r[k] for k in ("kernel", "ref", "status", "configs", "start_ms", "final_ms", "start_pct",
                                           "final_pct", "pct_of", "speedup", "simulated_speedup", "kept_steps",
                                           "stop_rule", "stopped", "branch", "attempts")})
            rows[-1].update(suite_numbers(src / "loops" / r["kernel"] / "ledger.jsonl"))
    return rows


def suite_numbers(ledger: Path) -> dict:
    """A loop's start and final in the suite's own bench numbers (replay: ledger ``suite`` records) and
    whether every kept step passed the suite's test command before it was kept."""
    if not ledger.is_file():
        return {}
    recs = [json.loads(ln) for ln in ledger.read_text().splitlines() if ln.strip()]
    suite = {r["when"]: r for r in recs if r.get("type") == "suite" and r.get("median_ms")}
    steps = [r for r in recs if r.get("type") == "iteration" and r.get("iteration", 0) > 0]
    kept = [r for r in steps if r.get("status") == "keep"]
    start, end = suite.get("start"), suite.get("end")
    return {"steps": len(steps), "suite_start_ms": start and start["median_ms"], "suite_final_ms": end and end["median_ms"],
            "suite_speedup": start["median_ms"] / end["median_ms"] if start and end else None,
            "suite_disagrees": end and end.get("disagrees"),
            "kept_tested": all((r.get("test_cmd") or {}).get("passed") for r in kept) if kept else None}


def call(args, out: Path, state_in: Path | None, state_out: Path | None, budget_s: float, earlier: list[dict],
         gpu: str, stop_when: Callable[[Path], bool] | None = None) -> dict:
    """One device call: restore or start, survey + plan, the campaign (or its resumption), report."""
    started = time.monotonic()
    restored = restore_state(args, state_in) if state_in and state_in.is_file() else None
    if restored:
        repo, meta = restored
    else:
        repo, cmd, flags = make_repo(args)
        meta = {"suite": SUITE, "dry_run": args.dry_run, "base": git(repo, "rev-parse", "HEAD"),
                "branch": git(repo, "branch", "--show-current"), "command": cmd, "flags": flags, "calls": 0}
    meta["calls"] += 1
    cmd, flags = meta["command"], meta["flags"]
    env = child_env(None if args.dry_run else repo)
    # TileGym: the first config instead of an autotune per version; shorter timing per perf test
    env.update({"TILEGYM_DISABLE_AUTOTUNE": "1", "WARMUP": "20", "REP": "30"})
    # no small replay cap for the state's sake (session 12 set 1 MB): every float input was then regenerated, each
    # worker computed or loaded the recorded version's whole answer (1 GB for rms_norm), and in session 13 a
    # resumed loop's baseline worker did not finish loading within its share; the state leaves files past
    # FILE_LIMIT out instead
    log = out / "campaign.log"
    steps: list[dict] = []
    left = lambda: budget_s - args.grace_s - (time.monotonic() - started)   # noqa: E731
    dry = ["--dry-run"] if args.dry_run else []
    stop = (lambda: stop_when(repo)) if stop_when else None
    if state(repo) is not None:
        run(["campaign", "--resume", "--time-limit", f"{max(1.0, left() - STOP_S):.0f}", "--json"],
            repo, env, left(), log, steps, stop)
    else:
        # the survey may take much of a first call: it is kept when killed, and the next call continues it
        rc, text = run(["campaign", "--plan", "--json", *dry, *DERIVED, "--", *cmd], repo, env, left() * 0.5, log,
                       steps)
        if rc == 0:
            (out / "plan.json").write_text(text)
            meta["selected"] = one_per_op(json.loads(text)["plan"], args.per_file)
            print(f"[campaign_suite] one kernel per op: {', '.join(meta['selected'])}", flush=True)
            # the loops get what is left, less the time a killed step takes to stop
            run(["campaign", "--select", ",".join(meta["selected"]), "--baselines-first",
                 "--time-limit", f"{max(1.0, left() - STOP_S):.0f}", *flags, *LOOP, *DERIVED, "--json", "--", *cmd],
                repo, env, left(), log, steps, stop)
    rows = collect(repo, out)
    res = {"call": meta["calls"], "command": cmd, "selected": meta.get("selected"), "steps": steps, "kernels": rows,
           "seconds": round(time.monotonic() - started, 1), "largest": largest(out_dir(repo))}
    print("[campaign_suite] largest files of the campaign's folder: "
          + ", ".join(f"{f['path']} {f['bytes'] / 1e6:.1f} MB" for f in res["largest"][:6]), flush=True)
    # the results first: packing the state must never keep them from coming back
    report(out, [*earlier, res], gpu, cmd)
    if state_out:
        dropped: list[str] = []
        size = save_state(repo, meta, state_out, dropped)
        res["state"] = {"path": str(state_out), "bytes": size, "dropped": dropped}
        print(f"[campaign_suite] state: {state_out} ({size / 1e3:.0f} KB"
              + (f", over the {STATE_LIMIT / 1e3:.0f} KB it may take" if size > STATE_LIMIT else "") + ")", flush=True)
    return res


def _suite_cell(r: dict) -> str:
    if not r.get("suite_start_ms"):
        return "-"
    text = f"{r['suite_start_ms']:.6f}"
    if r.get("suite_final_ms"):
        text += f" -> {r['suite_final_ms']:.6f} ({r['suite_speedup']:.3f}x; {'yes' if r['kept_tested'] else 'no'})"
    return text + (f" — disagrees: {r['suite_disagrees']}" if r.get("suite_disagrees") else "")


def report(out: Path, calls: list[dict], gpu: str, command: list[str]) -> None:
    rows = calls[-1]["kernels"]
    summary = {"gpu": gpu, "command": command, "calls": calls, "kernels": rows}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    f = lambda v, s: "-" if v is None else format(v, s)   # noqa: E731
    md = [f"# campaign_suite ({gpu})", "", f"survey command: `{' '.join(command)}`", ""]
    state = out / "campaign" / "campaign.json"
    if state.is_file():        # the time the loops spent against the limit (a campaign that stops early leaves some)
        d = json.loads(state.read_text())
        if d.get("time_limit_s"):
            md += [f"campaign time: {d['spent_s']:.0f} s spent of --time-limit {d['time_limit_s']:.0f} s "
                   "(the state's, over every call)", ""]
    md += [
          "| kernel | status | configs | start ms | final ms | start % | final % | of | speedup | kept / steps | suite start -> "
          "final ms (speedup; kept steps tested) | stopped |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sp = f(r["speedup"], ".3f") if r["speedup"] else (f"{r['simulated_speedup']:.3f} (simulated)"
                                                          if r["simulated_speedup"] else "-")
        md.append(f"| `{r['ref']}` | {r['status']} | {r['configs']} | {f(r['start_ms'], '.6f')} "
                  f"| {f(r['final_ms'], '.6f')} | {f(r['start_pct'], '.1f')} | {f(r['final_pct'], '.1f')} "
                  f"| {r['pct_of'] or '-'} | {sp} | {f(r['kept_steps'], 'd')} / {f(r.get('steps'), 'd')} | {_suite_cell(r)} "
                  f"| {(r['stopped'] or '-')[:90]} |")
    md += ["", "| call | step | rc | started s | s |", "|---|---|---|---|---|"]
    for c in calls:
        md += [f"| {c['call']} | `{' '.join(s['argv'])[:200]}` | {s['rc']}{' (' + s['killed'] + ')' if s.get('killed') else ''} "
               f"| {s['started_s']} | {s['seconds']} |" for s in c["steps"]]
        if c.get("state"):
            md.append(f"| {c['call']} | state tarball | - | - | {c['state']['bytes'] / 1e3:.0f} KB |")
    md += ["", "Largest files of the campaign's folder at the end of the last call: "
           + (", ".join(f"`{f['path']}` {f['bytes'] / 1e6:.1f} MB" for f in calls[-1].get("largest", [])[:6]) or "-")]
    (out / "report.md").write_text("\n".join(md) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tilegym", help="a TileGym checkout (never modified)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="wall budget of this call")
    ap.add_argument("--grace-s", type=float, default=30.0, help="kept back for the report and the tarball")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--per-file", type=int, choices=range(1, 9), metavar="1..8", default=1,
                    help="kernels per kernel source file (2: both of layer_norm_legacy.py's, each with its tests)")
    ap.add_argument("--state-in", help="a tarball of an earlier call's state: continue it")
    ap.add_argument("--state-out", help="write this call's state here (for the next call)")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU: fixture repository, --dry-run survey, --simulate; two calls, the second resumed")
    args, out = parse_suite_args(ap)
    calls: list[dict] = []
    gpu = "simulated (dry run)" if args.dry_run else suite.gpu_name()
    if args.dry_run:
        # call 1 stops once every baseline is in and a step has begun (a GPU call's budget ending
        # there); call 2 restores its tarball into a fresh folder and resumes to the end
        first = Path(args.state_out or out / "state-call1.tgz")
        calls.append(call(args, out, Path(args.state_in) if args.state_in else None, first, args.budget_s, calls, gpu,
                          stop_when=baselines_in_and_a_step_begun))
        calls.append(call(args, out, first, out / "state-call2.tgz", args.budget_s, calls, gpu))
    else:
        calls.append(call(args, out, Path(args.state_in) if args.state_in else None,
                          Path(args.state_out) if args.state_out else None, args.budget_s, calls, gpu))
    report(out, calls, gpu, calls[-1]["command"])
    rows = calls[-1]["kernels"]
    print(f"[campaign_suite] {len(rows)} kernel(s): {sum(1 for r in rows if r['start_pct'] is not None)} with a start %, "
          f"{sum(1 for r in rows if r['status'] == 'done')} done, in {time.monotonic() - T0:.0f} s", flush=True)
    if args.dry_run:
        problems = []
        if not (calls[0]["steps"] and calls[0]["steps"][-1].get("killed")):
            problems.append("call 1 was not stopped mid-campaign")
        if not (calls[1]["call"] == 2 and any("--resume" in s["argv"] for s in calls[1]["steps"])):
            problems.append("call 2 did not resume call 1's campaign")
        if not rows or not all(r["status"] == "done" and r["start_pct"] is not None and r["final_pct"] is not None
                               for r in rows):
            problems.append("not every kernel done with its start and final %")
        problems += [f"state of call {c['call']}: {c['state']['bytes']} bytes" for c in calls
                     if c["state"]["bytes"] > STATE_LIMIT]
        if problems:
            print(f"[campaign_suite] dry run FAILED: {'; '.join(problems)}", flush=True)
            return 1
        print("[campaign_suite] dry run: call 1 stopped after every baseline, call 2 resumed from its tarball in a "
              "fresh folder and finished every loop", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
