"""Build a measurement backend from command-line flags (and describe it for the ledger)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from .backends import Backend, SimSpec, backend_from_json
from .errors import LoopError


def parse_kv(items: Sequence[str], flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for it in items or []:
        if "=" not in it:
            raise LoopError(f"{flag} '{it}' must look like KEY=VALUE")
        k, v = (x.strip() for x in it.split("=", 1))
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


def backend_spec(*, workload: str | None, workload_args: Sequence[str] = (), test_cmd: str | None = None,
                 bench_cmd: str | None = None, simulate: str | None = None, configs: Sequence[str] | None = None,
                 kernel_file: Path | None = None, framework: str = "cutile", direction: str = "forward",
                 bench_options: dict | None = None, device: int | None = None) -> dict:
    """The backend description the setup record keeps (and ``backend_from_json`` rebuilds)."""
    chosen = [n for n, v in (("--workload", workload), ("--test-cmd/--bench-cmd", test_cmd or bench_cmd),
                             ("--simulate", simulate)) if v]
    if not chosen:
        raise LoopError("no way to verify and measure the kernel",
                        hint="give --workload REF (examples:<kernel>, tilegym:<op>, file.py::Workload), "
                             "or --test-cmd and --bench-cmd (TileGym pytest selections)")
    if len(chosen) > 1:
        raise LoopError(f"choose one way to measure: {' or '.join(chosen)}")
    if simulate:
        spec = SimSpec.load(simulate)
        if configs:
            spec.configs = {c: t for c, t in spec.configs.items() if c in set(configs)}
        return {"backend": "simulated", "spec": spec.to_json()}
    if workload:
        kwargs = parse_kv(workload_args, "--workload-arg")
        # a shipped example's workload runs the file being optimised, not the shipped copy
        if workload.startswith("examples:") and "source" not in kwargs and kernel_file is not None:
            kwargs["source"] = str(kernel_file)
        if configs:
            # a wrong configuration name is a usage error now, not a failed baseline later
            from ..workload import load_workload
            load_workload(workload, **kwargs).select(list(configs))
        return {"backend": "workload", "workload": workload, "kwargs": kwargs,
                "configs": list(configs) if configs else None, "bench_options": dict(bench_options or {}),
                "device": device}
    if not (test_cmd and bench_cmd):
        raise LoopError("--test-cmd and --bench-cmd go together",
                        hint="e.g. --test-cmd \"pytest tests/ops/test_softmax.py -k 'test_ and cutile and not "
                             "test_perf'\" --bench-cmd \"pytest tests/ops/test_softmax.py -k 'test_perf and "
                             "cutile' --print-record -s\"")
    return {"backend": "command", "test_cmd": test_cmd, "bench_cmd": bench_cmd, "framework": framework,
            "direction": direction, "env": {}}


def make_backend(spec: dict, *, log_dir: Path | None = None) -> Backend:
    return backend_from_json(spec, log_dir=log_dir)
