"""A long-lived measurement worker: ``python -m cutile_diag.loop.backends.worker``.

One worker holds one version of the kernel: it imports the workload (and through it the
kernel file) once, checks every configuration against the reference, keeps fresh inputs
and the expected outputs on the GPU, and then answers ``measure`` requests for as long as
the loop compares that version.  The loop runs two at a time — the last kept version and
the candidate — and alternates requests between them, so both are measured in the same
sitting, interleaved.

cuTile reads a kernel's source text when it first compiles it (``inspect.findsource``), so
the load step runs every configuration once: after it, the file on disk may change (the
next candidate) without affecting this worker.

Protocol: one JSON object per line on stdin; one JSON reply per line on the original
stdout (fd 1 is pointed at stderr at start-up, so prints from kernels or libraries never
corrupt the channel).  Requests::

    {"op": "load", "workload": REF, "kwargs": {...}, "configs": [..] | null, "seed": 0,
     "check_seed": null, "device": null,          # check_seed null: fresh inputs per check (seed recorded)
     "tuning": {NAME: {"pick", "space"}},         # optional: an earlier worker's autotune picks, held here
     "overrides": {PATH: TEXT}}                   # optional: the version's files, read instead of the disk
    {"op": "measure", "config": NAME, "options": {BenchOptions}, "post_check": true,
     "plan": {Plan} | null}                       # the comparison's sampling plan (harness.timing.Plan)
    {"op": "roofline", "latencies": {NAME: ms}}
    {"op": "quit"}

Replies carry ``"ok": true`` or ``"ok": false, "error": "..."``; the reply to ``load`` also
carries ``imports`` (``loop.imports.loaded_files``: modules loaded from the user's checkout
instead of the loop's worktree, and the kernel file's path).
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback


class _State:
    wl = None
    device = "cuda"
    cfgs: dict = {}
    prepared: dict = {}                 # per configuration: measure.Prepared (inputs, reference, timing set-up)
    overrides_read: set = set()         # files imported from the load request's overrides
    tuning = None                       # measure.tuning.TuningPins: this process's autotune searches
    roof = None                         # (device, ceilings) for the roofline requests


def _load(req: dict, st: _State) -> dict:
    import torch
    from ...measure.version import check, device_info, prepare
    from ...workloads import load_workload
    if req.get("overrides"):
        # this version's files at the worktree's paths, without writing them there: workers of a
        # sweep's points load concurrently (``WorkloadBackend.prepare``)
        from ...source import overrides
        st.overrides_read = overrides.install(req["overrides"])
    dev = req.get("device")
    if dev is not None and torch.cuda.is_available():
        torch.cuda.set_device(int(dev))
        st.device = f"cuda:{int(dev)}"
    # before the kernel's module is imported: a search it binds at import is then the held one
    from ...measure.tuning import TuningPins
    st.tuning = TuningPins(given=dict(req.get("tuning") or {}))
    st.tuning.install()
    from ...replay.store import ReplayError
    try:
        wl = load_workload(req["workload"], **(req.get("kwargs") or {}))
    except ReplayError as e:
        # the recordings, read before any version's code runs: every version would fail the same way
        return {"ok": False, "error": e.one_line(), "recordings": True}
    why = wl.available()
    if why:
        return {"ok": False, "error": f"workload {wl.name} cannot run here: {why}"}
    if not torch.cuda.is_available():
        # optimize and calibrate both take --simulate: the way to try them on a machine without one
        return {"ok": False, "error": "no CUDA GPU visible to torch in the measurement worker; without a GPU, "
                                      "--simulate SPEC.json runs against a simulated one (docs/simulate.md)"}
    st.wl = wl
    cfgs = wl.select(req.get("configs"))
    checks, info, passed = {}, {}, True
    with torch.no_grad():
        for cfg in cfgs:
            st.cfgs[cfg.name] = cfg
            seed = req.get("check_seed")
            chk = check(wl, cfg, seed=None if seed is None else int(seed), device=st.device)
            checks[cfg.name] = chk.to_json()
            try:
                info[cfg.name] = {"flops": float(wl.flops(cfg)), "bytes": float(wl.bytes(cfg)),
                                  "unit": list(wl.compute_unit(cfg))}
            except Exception as e:  # a workload without counts still measures
                info[cfg.name] = {"error": f"{type(e).__name__}: {e}"}
            if not chk.passed:
                passed = False
                continue
            # the timing set-up (estimate, batch graphs, flush buffer) is kept per configuration
            # between measure requests: the inputs stay
            p = st.prepared[cfg.name] = prepare(wl, cfg, seed=int(req.get("seed", 0)), device=st.device, keep=True)
            p.run()                                     # compiles now, while this version is on disk
        torch.cuda.synchronize()
    return {"ok": True, "passed": passed, "configs": [c.name for c in cfgs], "checks": checks, "info": info,
            "device": device_info(st.device), "pid": os.getpid(), "overrides_read": sorted(st.overrides_read),
            "tuning": st.tuning.report()}


def _measure(req: dict, st: _State) -> dict:
    from ...harness.observers import ClockObserver
    from ...harness.timing import BenchOptions, Plan
    from ...measure.version import time_prepared
    name = req["config"]
    if name not in st.prepared:
        return {"ok": False, "error": f"configuration {name} was not loaded (or failed its check)"}
    opts = BenchOptions.from_json(req.get("options"))
    # the SM clock and the clock-event reasons over the timed phase: the comparison drops runs under a
    # thermal slowdown and compares in cycles when a power cap moved the clock (loop.stats)
    observers = [ClockObserver(st.device)] if opts.sample_clocks else []
    t = time_prepared(st.prepared[name], opts, post_check=req.get("post_check", True), observers=observers,
                      plan=Plan.from_json(req.get("plan")))
    m = t.measurement
    return {"ok": True, "config": name, "stats": m.stats.record(), "samples_ms": m.samples_ms,
            "plan": m.observed.get("plan"),
            "first_call_s": m.first_call_s, "observed": m.observed,
            "post_check": t.post_check.to_json() if t.post_check else None}


def _roofline(req: dict, st: _State) -> dict:
    from ...measure.ceilings import device_ceilings
    from ...roofline.device import live_device
    from ...roofline.model import analyze
    want = bool(req.get("measure_ceilings", False))
    if st.roof is None or (want and st.roof[1] is None):     # the device and its ceilings, read once
        dev = live_device(torch_index(st.device))
        st.roof = (dev, device_ceilings(dev, measure=want))
    dev, ceil = st.roof
    out = {}
    for name, ms in (req.get("latencies") or {}).items():
        cfg = st.cfgs.get(name)
        if cfg is None or not ms:
            continue
        wl = st.wl
        p = analyze(wl.ref or wl.name, name, latency_ms=float(ms), flops=float(wl.flops(cfg)),
                    bytes=float(wl.bytes(cfg)), unit=tuple(wl.compute_unit(cfg)), device=dev, ceilings=ceil)
        out[name] = point_json(p)
    return {"ok": True, "points": out, "device": dev.name, "ceilings": ceil is not None}


def torch_index(device: str) -> int | None:
    """The index of a ``cuda:N`` device string; None for a bare ``cuda``."""
    return int(device.split(":")[1]) if ":" in device else None


def point_json(p) -> dict:
    """A roofline point as the ledger keeps it: the point's own fields (what the diagnosis
    collects) plus a few flat summaries."""
    from ...output import to_jsonable
    d = to_jsonable(p)
    pct = p.pct_measured if p.pct_measured is not None else p.pct_datasheet
    d.update({"achieved_tbps": p.achieved_bw / 1e12, "achieved_tflops": p.achieved_flops / 1e12,
              "pct_of_roof": pct})
    return d


def _preload() -> None:
    """A spare (``--spare``, ``loop.spares``) does its imports and creates its CUDA context on its
    device before the first request, while the loop is busy elsewhere."""
    try:
        import torch
        from ... import measure  # noqa: F401
        from ... import workloads  # noqa: F401
        import cuda.tile  # noqa: F401
        if torch.cuda.is_available():
            dev = os.environ.get("CUTILE_DIAG_WORKER_DEVICE")
            if dev:
                torch.cuda.set_device(int(dev))
            torch.zeros(1, device="cuda")
    except Exception:                  # the load request reports what is missing
        traceback.print_exc()


def main() -> int:
    """Answer JSON requests (load, measure, roofline, quit) on stdin, one reply a line on the real stdout; stray
    prints go to stderr."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                      # stray prints go to stderr, never into the protocol
    sys.stdout = sys.stderr
    if "--spare" in sys.argv[1:]:
        _preload()
    st = _State()
    handlers = {"load": _load, "measure": _measure, "roofline": _roofline}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except json.JSONDecodeError as e:
            proto.write(json.dumps({"ok": False, "error": f"bad request: {e}"}) + "\n")
            continue
        op = req.get("op")
        if op == "quit":
            proto.write(json.dumps({"ok": True}) + "\n")
            break
        fn = handlers.get(op)
        if fn is None:
            reply = {"ok": False, "error": f"unknown op {op!r}"}
        else:
            t0 = time.perf_counter()
            try:
                reply = fn(req, st)
                reply["op_s"] = round(time.perf_counter() - t0, 4)     # the step's cost split (loop.costs)
            except Exception as e:
                from ...errors import CutileDiagError
                traceback.print_exc()
                msg = e.one_line() if isinstance(e, CutileDiagError) else f"{type(e).__name__}: {' '.join(str(e).split())[:400]}"
                reply = {"ok": False, "error": msg}
        if op == "load":
            # which files this worker runs: the loop refuses code imported from the user's checkout
            from ..imports import loaded_files
            reply["imports"] = loaded_files()
        from ...output import to_jsonable
        proto.write(json.dumps(to_jsonable(reply)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
