"""Build a measurement backend from command-line flags (and describe it for the ledger)."""
from __future__ import annotations

import itertools
import json
import math
import re
import shlex
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

from .backends import Backend, SimSpec, backend_from_json
from .errors import LoopError
from ..workloads import check_ref, load_workload


def parse_kv(items: Sequence[str], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` flags as a dict, each value parsed as JSON when it is JSON, else kept as text."""
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


def parse_counts(items: Sequence[str], flag: str) -> dict[str, float]:
    """``CONFIG=N`` pairs (CONFIG: a bench test id, or a part of one) -> {CONFIG: N}."""
    out: dict[str, float] = {}
    for it in items or []:
        key, eq, val = it.rpartition("=")        # test ids may hold '=', the number never does
        try:
            n = float(val)
        except ValueError:
            n = None
        if not eq or not key.strip() or n is None or not (math.isfinite(n) and n > 0):
            raise LoopError(f"{flag} '{it}' must look like CONFIG=N with N > 0",
                            hint="CONFIG is a benchmark test id or a part of one, e.g. 16M=201326592")
        out[key.strip()] = n
    return out


def counts_spec(flops: Sequence[str] = (), bytes_: Sequence[str] = (), unit: str | None = None,
                roof_device: str | None = None) -> dict:
    """FLOP/byte counts for the command backend's configurations (the roofline guard's input)."""
    out: dict[str, Any] = {"flops": parse_counts(flops, "--flops"), "bytes": parse_counts(bytes_, "--bytes")}
    if out["flops"] and not unit:
        raise LoopError("--flops needs --unit DTYPE:UNIT (e.g. f16:tensor or f32:cuda): it picks the compute roof")
    if unit:
        dt, _, u = unit.partition(":")
        if not dt or u not in ("tensor", "cuda"):
            raise LoopError(f"--unit '{unit}' must look like DTYPE:tensor or DTYPE:cuda (e.g. f16:tensor)")
        out["unit"] = [dt, u]
    if roof_device:
        from ..roofline.device import preset
        preset(roof_device)                       # an unknown preset is a usage error now
        out["device"] = roof_device
    return out if (out["flops"] or out["bytes"]) else {}


_SHELL_WORDS = {"cd", "true", "false", "exit", "export", "source", ".", "env", "exec", "set", "test", "[",
                "time", "command", "eval", "unset", "ulimit", "nice", "timeout"}


def check_commands(spec: Mapping[str, Any], root: Path) -> None:
    """Refuse a --test-cmd/--bench-cmd whose program does not exist, before a branch or a ledger
    is created for it (a loop that cannot measure its baseline leaves nothing behind)."""
    if spec.get("backend") not in ("command", "replay"):
        return
    for flag, cmd in (("--test-cmd", spec.get("test_cmd")), ("--bench-cmd", spec.get("bench_cmd"))):
        try:
            words = shlex.split(cmd or "")
        except ValueError as e:
            raise LoopError(f"{flag} cannot be parsed by the shell: {e}: {cmd}") from None
        words = list(itertools.dropwhile(lambda w: re.match(r"[A-Za-z_][A-Za-z0-9_]*=", w), words))
        if not words:
            raise LoopError(f"{flag} is empty")
        prog = words[0]
        if prog in _SHELL_WORDS or prog[0] in "({!$`":
            continue
        found = (Path(root) / Path(prog).expanduser()).exists() if "/" in prog else shutil.which(prog) is not None
        if not found:
            raise LoopError(f"{flag}: '{prog}' is not a command here ({'no such file' if '/' in prog else 'not on PATH'})",
                            hint=f"the command runs in {root} with this environment: {cmd}")


def resumed_backend(old: Mapping[str, Any], *, workload: str | None = None, simulate: str | None = None,
                    test_cmd: str | None = None, bench_cmd: str | None = None, counts: Mapping | None = None
                    ) -> dict | None:
    """The backend with the commands (and counts) given again on --resume; None when nothing changed.
    The kind of backend cannot change mid-loop: every decision compares versions measured alike."""
    if workload or simulate:
        raise LoopError("--resume keeps the loop's way of measuring; --workload/--simulate cannot change it",
                        hint="start another loop with --branch NAME for a different measurement")
    if not (test_cmd or bench_cmd or counts):
        return None
    if old.get("backend") not in ("command", "replay"):
        raise LoopError(f"--test-cmd/--bench-cmd/--flops/--bytes on --resume need a loop measured by commands; "
                        f"this one uses the {old.get('backend')} backend")
    new = dict(old)
    new.update({k: v for k, v in (("test_cmd", test_cmd), ("bench_cmd", bench_cmd)) if v})
    if counts:
        new["counts"] = dict(counts)
    return new if new != dict(old) else None


def backend_spec(*, workload: str | None, workload_args: Sequence[str] = (), test_cmd: str | None = None,
                 bench_cmd: str | None = None, simulate: str | None = None, configs: Sequence[str] | None = None,
                 kernel_file: Path | None = None, framework: str = "cutile", direction: str = "forward",
                 bench_options: dict | None = None, device: int | None = None, counts: Mapping | None = None,
                 replay: bool = True, kernel: str | None = None, replay_dir: str | None = None) -> dict:
    """The backend description the setup record keeps (and ``backend_from_json`` rebuilds)."""
    chosen = [n for n, v in (("--workload", workload), ("--test-cmd/--bench-cmd", test_cmd or bench_cmd),
                             ("--simulate", simulate)) if v]
    if counts and not (test_cmd or bench_cmd):
        raise LoopError("--flops/--bytes/--unit/--roof-device go with --test-cmd/--bench-cmd",
                        hint="a workload (and a simulation spec) has its own FLOP/byte counts")
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
            load_workload(workload, **kwargs).select(list(configs))
        else:
            check_ref(workload)     # an unknown name or a missing file: one line now, not a failed check later
        return {"backend": "workload", "workload": workload, "kwargs": kwargs,
                "configs": list(configs) if configs else None, "bench_options": dict(bench_options or {}),
                "device": device}
    if not (test_cmd and bench_cmd):
        raise LoopError("--test-cmd and --bench-cmd go together",
                        hint="e.g. --test-cmd \"pytest tests/ops/test_softmax.py -k 'test_ and cutile and not "
                             "test_perf'\" --bench-cmd \"pytest tests/ops/test_softmax.py -k 'test_perf and "
                             "cutile' --print-record -s\"")
    spec = {"backend": "command", "test_cmd": test_cmd, "bench_cmd": bench_cmd, "framework": framework,
            "direction": direction, "env": {}, "counts": dict(counts or {})}
    if replay:
        # checked and timed on the launches the baseline's check records (--no-replay: the commands every time)
        spec.update({"backend": "replay", "kernel": kernel, "replay_dir": replay_dir,
                     "bench_options": dict(bench_options or {}), "device": device})
    return spec


def make_backend(spec: dict, *, log_dir: Path | None = None) -> Backend:
    """The backend a ledger's backend spec describes."""
    return backend_from_json(spec, log_dir=log_dir)
