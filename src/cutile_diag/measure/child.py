"""Subprocess entry point: ``python -m cutile_diag.measure.child REQUEST.json RESULT.json``.

Modes (``request["mode"]``):

* ``measure`` — ``measure.measure_version`` on one workload configuration;
* ``profile`` — for Nsight Compute: prime (compile, autotune), flush L2, then one run inside
  the NVTX range ``cutile_diag_profile`` so ``ncu --nvtx-include cutile_diag_profile/`` sees
  only that launch;
* ``call`` — ``target(**kwargs)`` for any ``pkg.mod:function`` / ``file.py::function``.

The result file is written atomically; errors the user can act on come back as
``{"status": "error", "error": "..."}``; anything else leaves a traceback on stderr for the
parent to quote.
"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from ..errors import CutileDiagError
from ..output import to_jsonable, write_atomic
from ..harness.timing import BenchOptions, default_flush_bytes


def _write(path: str, obj) -> None:
    write_atomic(Path(path), json.dumps(to_jsonable(obj)))


def _set_device(request: dict) -> str:
    dev = request.get("device")
    if dev is None:
        return "cuda"
    import torch
    if torch.cuda.is_available():
        torch.cuda.set_device(int(dev))
    return f"cuda:{int(dev)}"


def _measure(request: dict) -> dict:
    from .version import MeasureRequest, MeasureResult, measure_version
    from .isolated import load_for_request
    try:
        device = _set_device(request)
        wl, cfg = load_for_request(request)
        r = measure_version(wl, cfg, MeasureRequest(
            BenchOptions.from_json(request.get("options")), check=request.get("check", True),
            seed=int(request.get("seed", 0)), check_seed=request.get("check_seed"), device=device,
            post_check=request.get("post_check", True)))
        return r.to_json()
    except CutileDiagError as e:
        status = "no_gpu" if type(e).__name__ == "NoGPUError" else "error"
        return MeasureResult(request.get("workload", ""), request.get("config", ""), status, error=e.one_line()).to_json()


def _profile(request: dict) -> dict:
    import torch
    from .isolated import load_for_request
    try:
        device = _set_device(request)
        wl, cfg = load_for_request(request)
        why = wl.available()
        if why:
            return {"status": "unavailable", "error": why}
        with torch.no_grad():
            inputs = wl.make_inputs(cfg, int(request.get("seed", 0)), device)
            for _ in range(int(request.get("prime", 2))):
                wl.run(inputs)
            torch.cuda.synchronize()
            flush = torch.empty(default_flush_bytes() // 4, dtype=torch.int32, device=device)
            flush.zero_()
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("cutile_diag_profile")
            wl.run(inputs)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
        return {"status": "ok"}
    except CutileDiagError as e:
        return {"status": "error", "error": e.one_line()}


def _call(request: dict) -> dict:
    from .isolated import resolve_callable
    try:
        fn = resolve_callable(request["target"])
        return {"value": fn(**(request.get("kwargs") or {}))}
    except CutileDiagError as e:
        return {"error": e.one_line()}


def main(argv: list[str] | None = None) -> int:
    """Run the request in REQUEST.json in the mode it names and write RESULT.json; 2 on bad usage, 1 when the handler
    raised (traceback on stderr)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        print("usage: python -m cutile_diag.measure.child REQUEST.json RESULT.json", file=sys.stderr)
        return 2
    request = json.loads(Path(argv[0]).read_text())
    mode = request.get("mode", "measure")
    handler = {"measure": _measure, "profile": _profile, "call": _call}.get(mode)
    if handler is None:
        print(f"unknown worker mode {mode!r}", file=sys.stderr)
        return 2
    try:
        result = handler(request)
    except Exception:
        traceback.print_exc()
        return 1
    _write(argv[1], result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
