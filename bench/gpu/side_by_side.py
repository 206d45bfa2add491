#!/usr/bin/env python
"""Versions of one TileGym op file (and torch), timed side by side in one process, interleaved.

    python bench/gpu/side_by_side.py JOB.json OUT.json

JOB (written by frontier_suite.py)::

    {"workload": "tilegym:layer_norm_legacy", "config": "16384x4096-bf16",
     "module": "tilegym.ops.cutile.layer_norm_legacy", "function": "layer_norm_legacy",
     "versions": [{"name": "original", "file": "/tmp/.../layer_norm_legacy.py", "applied": []}, ...],
     "torch": false, "budget_s": 30, "max_rounds": 15, "rep_ms": 30, "warmup_ms": 20, "simulate": null}

Each version's file is imported as its own module inside TileGym's package (its relative imports
resolve; the dispatcher's registry is put back after each import, so nothing global changes) and
the workload's op call goes to that module's ``function``; ``"torch": true`` adds torch.matmul
(cuBLAS) on the same inputs.  Every version is checked against the workload's reference on the
same seed, then timed with the project's harness (``measure.version.prepare`` /
``time_prepared``: cold L2, batched short kernels, outputs re-checked) in rounds, the order
reversed every other round, until ``max_rounds`` or ``budget_s``.  OUT.json is rewritten after
every round, so a killed run leaves what it measured.

``"simulate": SPEC.json`` (the suite's --dry-run): the files are still imported (on the CPU), the
rounds come from the simulated GPU of ``optimize --simulate`` (``SimulatedBackend``: latencies from
each version's transform set), and OUT.json says ``"simulated": true``.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))


def import_version(module: str, tag: str, path: str):
    """``path`` as module ``<package of module>._sbs_<tag>``; TileGym's dispatcher registry as before."""
    pkg = module.rsplit(".", 1)[0]
    importlib.import_module(pkg)
    from tilegym.backend import dispatcher
    saved = {op: dict(impls) for op, impls in getattr(dispatcher, "_REGISTRY", {}).items()}
    spec = importlib.util.spec_from_file_location(f"{pkg}._sbs_{tag}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        if hasattr(dispatcher, "_REGISTRY"):
            dispatcher._REGISTRY.clear()
            dispatcher._REGISTRY.update(saved)
    return mod


def workload_calling(ref: str, fn):
    """The workload ``ref`` whose op call goes to ``fn`` instead of TileGym's dispatcher."""
    from cutile_diag.workloads import load_workload
    wl = load_workload(ref)
    wl._fn = lambda: fn
    return wl


def torch_matmul(a, b, **_kw):
    import torch
    return torch.matmul(a, b)


def write(out: Path, doc: dict) -> None:
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(out)


def simulated_rounds(job: dict, versions: list[dict]) -> dict[str, list[dict]]:
    """Rounds from the simulated GPU: a version's latency from its transform set; torch is a
    version whose text is ``torch.matmul`` (a spec's ``marker:torch.matmul`` effect)."""
    from cutile_diag.loop.backends import SimulatedBackend, Version
    from cutile_diag.loop.proc import Deadline
    sim = SimulatedBackend(json.loads(Path(job["simulate"]).read_text()))
    vs = [Version(v["name"], {"kernel.py": Path(v["file"]).read_text()}, None, tuple(v.get("applied") or ()))
          for v in versions]
    if job.get("torch"):
        vs.append(Version("torch", {"kernel.py": "torch.matmul"}))
    runs = sim.measure(vs, None, Deadline(job["budget_s"]), int(job["max_rounds"]))
    return {v.label: [r.to_json() for r in runs[v.label][job["config"]]] for v in vs}


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    t0 = time.monotonic()
    doc: dict = {"workload": job["workload"], "config": job["config"], "simulated": bool(job.get("simulate")),
                 "rounds": 0, "versions": []}
    rows = doc["versions"]
    fns = {}
    for i, v in enumerate(job["versions"]):
        row = {"name": v["name"], "applied": v.get("applied") or [], "status": "loaded", "runs": []}
        rows.append(row)
        try:
            fns[v["name"]] = getattr(import_version(job["module"], f"v{i}", v["file"]), job["function"])
        except Exception as e:
            row.update(status="error", error=f"import: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
    if job.get("torch"):
        rows.append({"name": "torch", "applied": [], "status": "loaded", "runs": []})
        fns["torch"] = torch_matmul
    write(out, doc)
    if job.get("simulate"):
        live = {r["name"] for r in rows if r["status"] == "loaded"}
        for name, runs in simulated_rounds(job, [v for v in job["versions"] if v["name"] in live]).items():
            next(r for r in rows if r["name"] == name).update(status="simulated", runs=runs)
        doc["rounds"] = int(job["max_rounds"])
        write(out, doc)
        return 0

    import torch
    from cutile_diag.harness.correctness import check_workload
    from cutile_diag.harness.timing import BenchOptions
    from cutile_diag.loop.backends.base import round_order
    from cutile_diag.measure.version import prepare, time_prepared
    doc["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    opts = BenchOptions(warmup_ms=float(job.get("warmup_ms", 20)), rep_ms=float(job.get("rep_ms", 30)))
    live = []
    for row in rows:
        if row["status"] != "loaded":
            continue
        wl = workload_calling(job["workload"], fns[row["name"]])
        cfg = wl.config(job["config"])
        t = time.monotonic()
        try:
            chk = check_workload(wl, cfg, seed=1234)        # the same inputs for every version
            row["check"] = chk.to_json()
            if not chk.passed:
                row.update(status="mismatch", error=chk.summary[:300])
                continue
            p = prepare(wl, cfg, seed=0, keep=True)
            p.run()                                          # compile (and TileGym's autotune) outside the rounds
            torch.cuda.synchronize()
        except Exception as e:
            row.update(status="error", error=f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
            continue
        row.update(status="ok", setup_s=round(time.monotonic() - t, 1))
        live.append((row, p))
        write(out, doc)
    budget, last = float(job["budget_s"]), 0.0
    for r in range(int(job["max_rounds"])):
        # a round starts only when one more of the last one's length still fits the budget
        if not live or (r and time.monotonic() - t0 + last > budget):
            break
        t = time.monotonic()
        for row, p in round_order(live, r):
            try:
                timed = time_prepared(p, opts)
            except Exception as e:
                row.update(status="error", error=f"round {r}: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
                continue
            if timed.post_check is not None and not timed.post_check.passed:
                row.update(status="mismatch", error=f"round {r}: outputs of the timed runs: {timed.post_check.summary}")
                continue
            m = timed.measurement
            s = m.stats.record()
            row["runs"].append({"median": s["median"], "rel_std": s.get("rel_std"), "nrep": s.get("nrep"),
                                "samples": [round(x, 6) for x in m.samples_ms]})
        live = [(row, p) for row, p in live if row["status"] == "ok"]
        last = time.monotonic() - t
        doc["rounds"] = r + 1
        write(out, doc)
    doc["wall_s"] = round(time.monotonic() - t0, 1)
    write(out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
