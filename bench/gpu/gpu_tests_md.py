"""The log of ``bench/gpu/gpu_tests.sh`` (``pytest -m gpu``) as a short record: gpu_tests.md (a table:
date, GPU, driver, versions, the exact command, pass/fail counts, the failed tests) and gpu_tests.json.

    python bench/gpu/gpu_tests_md.py LOG --rc N --wall-s S --cap-s S --command CMD --out DIR [--dry-run]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path

PROGRESS = re.compile(r"^[.FEsxX]+\s*(\[\s*\d+%\])?\s*$")
COUNT = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed|warnings?)")


def summary(log: str) -> dict:
    """pytest's counts (its last summary line), the failed/errored test ids and that line."""
    lines = [ln for ln in log.splitlines() if ln.strip()]
    last = next((ln for ln in reversed(lines) if COUNT.search(ln) and (" in " in ln or ln.startswith("="))), "")
    counts = {k.rstrip("s") if k.startswith(("error", "warning")) else k: int(n) for n, k in COUNT.findall(last)}
    failed = [ln.split(" ", 1)[1].split(" - ")[0] for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    if not last:        # cut by the wall cap: pytest's progress characters so far
        marks = "".join(ln.split("[")[0].strip() for ln in lines if PROGRESS.match(ln))
        counts = {k: marks.count(ch) for k, ch in (("passed", "."), ("failed", "F"), ("error", "E"), ("skipped", "s"))}
        last = f"cut short: {len(marks)} test(s) run ({', '.join(f'{n} {k}' for k, n in counts.items())})"
    return {"counts": counts, "failed": failed, "summary_line": last.strip("= ")}


def environment() -> dict:
    def out(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ""
    smi = out(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]).splitlines()
    gpu, _, driver = (smi[0] if smi else "no GPU (dry run)").partition(", ")
    vers = out([sys.executable, "-c", "import json, sys, importlib.metadata as md\nv = {'python': sys.version.split()[0]}\n"
                "for p in ('torch', 'cuda-tile', 'pytest'):\n    try: v[p] = md.version(p)\n"
                "    except Exception: v[p] = None\nprint(json.dumps(v))"])
    return {"gpu": gpu, "driver": driver or None, "versions": json.loads(vers) if vers else {}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--rc", type=int, required=True)
    ap.add_argument("--wall-s", type=float, required=True)
    ap.add_argument("--cap-s", type=float, required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args()
    s = summary(Path(a.log).read_text(errors="replace"))
    env = environment()
    res = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "dry_run": a.dry_run, **env,
           "command": a.command, "cwd": "the repository root, after `source .device/setup.sh`", "rc": a.rc,
           "timed_out": a.rc in (124, 137), "wall_s": a.wall_s, "cap_s": a.cap_s, **s}
    out = Path(a.out)
    (out / "gpu_tests.json").write_text(json.dumps(res, indent=1) + "\n")
    c = s["counts"]
    md = ["# GPU-marked tests (`pytest -m gpu`)" + (" — DRY RUN (no GPU: every test skips)" if a.dry_run else ""), "",
          "| | |", "|---|---|",
          f"| date | {res['date']} |", f"| GPU | {env['gpu']} |", f"| driver | {env['driver'] or '-'} |",
          "| versions | " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()) + " |",
          f"| command | `{a.command}` (repository root, after `source .device/setup.sh`) |",
          f"| exit code | {a.rc}" + (" (timed out: the cap)" if res["timed_out"] else "") + f", {a.wall_s:.0f} s of {a.cap_s:.0f} s |",
          "| passed / failed / errors / skipped | " + " / ".join(str(c.get(k, 0)) for k in ("passed", "failed", "error", "skipped"))
          + " |", f"| pytest | {s['summary_line'] or '(no summary line: see gpu_tests.txt)'} |", ""]
    if s["failed"]:
        md += ["Failed:", ""] + [f"- `{t}`" for t in s["failed"]] + [""]
    (out / "gpu_tests.md").write_text("\n".join(md))
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
