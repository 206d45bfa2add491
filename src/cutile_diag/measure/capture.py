"""Capture a kernel without hand-written specs: from the launches of the code that runs it.

Sources, in order (the first that works wins; each failure is one line in ``tried``):

1. ``specs`` — ``--arg`` / the module's ``CAPTURE_SPECS`` (overrides; AOT);
2. ``workload-run`` — on a GPU: the workload's own run in run mode (dump variables, isolated
   cache), ``ct.launch`` observed in the child, the launched kernel matched by name;
3. ``workload-cpu`` — no GPU: the workload's inputs built on the CPU, its ``run`` called with
   ``ct.launch`` intercepted (nothing reaches a driver), the launch of the kernel turned into
   the ``KernelSignature`` for an AOT export;
4. ``command-run`` — on a GPU: run mode around the user's command (``--test-cmd``), keeping
   only the kernel under optimisation.

The launch (grid, argument shapes, SM count) goes into the manifest under ``launch`` so the
diagnosis judges the grid on facts.  When every source fails, the error lists the kernel's
real parameters with their real kinds.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..errors import CutileDiagError
from ..capture import spec as spec_mod
from ..capture.launches import LaunchArgumentsError, LaunchRecord, cpu_cuda, intercept_launches
from ..capture.manifest import MANIFEST, CaptureFolder, load_capture
from ..capture import run_mode
from ..capture.aot import capture_aot
from ..capture.loader import load_kernel
from ..workloads import load_workload

DEFAULT_SMS = 132            # the H200 the CPU stand-in pretends to be (the loop's reference GPU)


class LaunchNotSeen(CutileDiagError):
    """The workload did not launch the kernel on CPU inputs (one line says which way)."""


@dataclass
class AutoCapture:
    """A capture made without specs: its folder, the source that gave it, the launch it came from, and why earlier
    sources were passed over."""
    folder: CaptureFolder
    source: str                                    # specs | workload-run | workload-cpu | command-run
    launch: LaunchRecord | None = None
    tried: list[str] = field(default_factory=list)  # why earlier sources were not used


def launch_json(rec: LaunchRecord, *, sm_count: int | None, sm_source: str, source: str) -> dict:
    """The manifest's ``launch`` block (what collect_capture turns into launch.* facts)."""
    return {"kernel": rec.kernel, "grid": list(rec.grid), "grid_blocks": rec.grid_blocks,
            "sm_count": sm_count, "sm_source": sm_source, "source": source,
            "args": [{k: v for k, v in (("name", a.name), ("kind", a.kind), ("dtype", a.dtype),
                                        ("shape", list(a.shape) if a.shape else None),
                                        ("strides", list(a.strides) if a.strides else None),
                                        ("value", a.value if a.kind == "constant" else None),
                                        ("spec", a.text())) if v is not None} for a in rec.args]}


def attach_launch(folder: CaptureFolder | Path, launch: dict) -> CaptureFolder:
    """Add the launch block to an existing capture's manifest (run-mode captures)."""
    path = Path(getattr(folder, "path", folder))
    m = json.loads((path / MANIFEST).read_text())
    m["launch"] = launch
    tmp = path / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(m, indent=2, default=str))
    os.replace(tmp, path / MANIFEST)
    return load_capture(path)


def _cost(wl, c) -> float:
    try:
        return float(wl.bytes(c)) + float(wl.flops(c))
    except Exception:
        return 0.0


def _costliest(wl):
    return max(wl.configs, key=lambda c: _cost(wl, c))


def config_order(wl, config: str | None) -> list:
    """The configurations to take a launch from: the one asked for (else the costliest), then the
    others, costliest first — a workload's configurations may launch different kernels of one op."""
    first = wl.config(config) if config else _costliest(wl)
    return [first, *sorted((c for c in wl.configs if c.name != first.name), key=lambda c: _cost(wl, c),
                           reverse=True)]


def launch_from_workload(wl, kernel: str | None, *, config: str | None = None, seed: int = 0,
                         sm_count: int = DEFAULT_SMS, main: bool = False) -> tuple[LaunchRecord, str]:
    """Run ``wl`` on CPU inputs with ``ct.launch`` intercepted; (the launch of ``kernel``, config).
    When the configuration launches other kernels, the workload's other configurations are tried.
    ``main``: the configuration's own main kernel is wanted (a workload diagnosis): ``kernel``
    when it is launched, else the one kernel the configuration launches (one op's
    configurations select different kernels), and no other configuration is tried."""
    first_err: LaunchNotSeen | None = None
    for cfg in (config_order(wl, config)[:1] if main else config_order(wl, config)):
        try:
            return _launch_from_config(wl, kernel, cfg, seed, sm_count, main)
        except LaunchNotSeen as e:
            first_err = first_err or e
    assert first_err is not None
    more = f" (nor in its {len(wl.configs) - 1} other configuration(s))" if len(wl.configs) > 1 else ""
    raise LaunchNotSeen(first_err.one_line() + more)


def _launch_from_config(wl, kernel: str | None, cfg, seed: int, sm_count: int,
                        main: bool = False) -> tuple[LaunchRecord, str]:
    name = getattr(wl, "ref", None) or wl.name
    try:
        inputs = wl.make_inputs(cfg, seed, device="cpu")
    except Exception as e:
        raise LaunchNotSeen(f"workload {name} cannot build CPU inputs ({type(e).__name__}: "
                            f"{' '.join(str(e).split())[:160]})") from None
    with cpu_cuda(sm_count), intercept_launches(execute=False) as recs:
        try:
            wl.run(inputs)
        except LaunchArgumentsError:
            raise                          # the launch itself is wrong: no other source can make it right
        except Exception as e:
            if not any(r.kernel == kernel for r in recs):
                raise LaunchNotSeen(f"workload {name} raises on CPU inputs ({type(e).__name__}: "
                                    f"{' '.join(str(e).split())[:160]})") from None
            # it raised after the launch (e.g. reading the never-written output): the launch stands
    mine = [r for r in recs if r.kernel == kernel]
    if not mine and main and len({r.kernel for r in recs}) == 1:
        mine = list(recs)                  # the configuration's only kernel is its main one
    if not mine:
        if not recs:
            raise LaunchNotSeen(f"workload {name} launches nothing on CPU inputs (configuration {cfg.name})")
        others = ", ".join(dict.fromkeys(r.kernel for r in recs))
        raise LaunchNotSeen(f"workload {name} launches {others}, not {kernel} (configuration {cfg.name})")
    return max(mine, key=lambda r: r.grid_blocks), cfg.name


def _gpu_available() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _move_into(folder: CaptureFolder, out_dir: Path, name: str | None) -> CaptureFolder:
    dst = Path(out_dir) / (name or folder.path.name)
    if dst.exists():
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(folder.path), str(dst))
    return load_capture(dst)


def _pick(caps: Sequence[CaptureFolder], function: str) -> CaptureFolder | None:
    named = [c for c in caps if (c.manifest.get("kernel") or {}).get("function") == function]
    return named[-1] if named else None


_OBSERVE = r"""
import json, sys
from cutile_diag.capture.launches import intercept_launches
from cutile_diag.workloads import load_workload
import torch
wl = load_workload({ref!r}, **{kwargs!r})
cfg = wl.config({config!r})
inputs = wl.make_inputs(cfg, 0)
with intercept_launches(execute=True) as recs:
    wl.run(inputs)
torch.cuda.synchronize()
sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
with open({path!r}, "w") as f:
    json.dump({{"sm_count": sms, "launches": [r.to_json() for r in recs]}}, f)
"""


def capture_workload_run(wl, kernel: str, *, config: str, out_dir: Path, name: str | None,
                         timeout: float | None = None) -> tuple[CaptureFolder, LaunchRecord | None]:
    """GPU: run the workload once in run mode, observe its launches, keep ``kernel``'s capture."""
    with tempfile.TemporaryDirectory(prefix="cutile-diag-auto-") as tmp:
        obs = Path(tmp) / "launches.json"
        code = _OBSERVE.format(ref=wl.ref, kwargs=dict(getattr(wl, "ref_kwargs", None) or {}), config=config,
                               path=str(obs))
        res = run_mode.capture_run([sys.executable, "-c", code], out_dir=Path(tmp) / "caps", timeout=timeout)
        cap = _pick(res.captures, kernel)
        if cap is None:
            seen = ", ".join(sorted({(c.manifest.get("kernel") or {}).get("function") or "?" for c in res.captures}))
            raise LaunchNotSeen(f"the run of workload {wl.ref} compiled {seen or 'no kernel'}, not {kernel}")
        rec, sms = None, None
        if obs.exists():
            doc = json.loads(obs.read_text())
            sms = doc.get("sm_count")
            recs = [LaunchRecord.from_json(r) for r in doc.get("launches") or []]
            mine = [r for r in recs if r.kernel == kernel]
            rec = max(mine, key=lambda r: r.grid_blocks) if mine else None
        cap = _move_into(cap, out_dir, name)
        if rec is not None:
            cap = attach_launch(cap, launch_json(rec, sm_count=sms, sm_source="the GPU of the run",
                                                 source="workload-run"))
        return cap, rec


def capture_command_run(command: str, kernel: str, *, out_dir: Path, name: str | None, cwd: Path | None = None,
                        timeout: float | None = None) -> CaptureFolder:
    """GPU: run mode around the user's command, keeping only ``kernel``'s capture."""
    with tempfile.TemporaryDirectory(prefix="cutile-diag-auto-") as tmp:
        argv = ["sh", "-c", command if cwd is None else f"cd {_shq(str(cwd))} && {command}"]
        res = run_mode.capture_run(argv, out_dir=Path(tmp) / "caps", timeout=timeout)
        cap = _pick(res.captures, kernel)
        if cap is None:
            seen = ", ".join(sorted({(c.manifest.get("kernel") or {}).get("function") or "?" for c in res.captures}))
            raise LaunchNotSeen(f"the command compiled {seen or 'no kernel'}, not {kernel}")
        return _move_into(cap, out_dir, name)


def export_launch(rec: LaunchRecord, config: str, *, ref: str | None = None, archs: Sequence[str] = ("sm_90",),
                  out_dir: Path, name: str | None = None,
                  on_step: Callable[[str], None] | None = None) -> CaptureFolder:
    """AOT capture for the signature of an intercepted launch, the launch in its manifest
    (``ref`` defaults to the launched kernel's own file)."""
    try:
        derived = rec.specs()
    except ValueError as e:
        raise LaunchNotSeen(str(e)) from None
    if ref is None:
        if not rec.file:
            raise LaunchNotSeen(f"the launch of {rec.kernel} names no source file")
        ref = f"{rec.file}::{rec.kernel}"
    cap = capture_aot(ref, derived, archs=archs, out_dir=out_dir, name=name, on_step=on_step)
    return attach_launch(cap, {**launch_json(rec, sm_count=DEFAULT_SMS, sm_source=(
        f"CPU stand-in ({DEFAULT_SMS} SMs, H200): no GPU here"), source="workload-cpu"), "configuration": config})


def _shq(s: str) -> str:
    import shlex
    return shlex.quote(s)


def capture_auto(ref: str, specs: dict | None = None, *, workload: str | None = None,
                 workload_kwargs: dict | None = None, config: str | None = None, command: str | None = None,
                 command_cwd: Path | None = None, archs: Sequence[str] = ("sm_90",), out_dir: str | Path,
                 name: str | None = None, gpu: bool | None = None, timeout: float | None = None,
                 on_step: Callable[[str], None] | None = None) -> AutoCapture:
    """Capture ``ref`` from the first source that works (see the module docstring)."""
    out_dir = Path(out_dir)
    loaded = load_kernel(ref)
    kernel = loaded.function_name
    tried: list[str] = []
    table = getattr(loaded.module, "CAPTURE_SPECS", None) or {}
    if specs or table.get(loaded.attr):
        return AutoCapture(capture_aot(ref, specs, archs=archs, out_dir=out_dir, name=name, on_step=on_step),
                           "specs")
    tried.append(f"no CAPTURE_SPECS for {loaded.attr} and no --arg")
    gpu = _gpu_available() if gpu is None else gpu
    seen: LaunchRecord | None = None
    wl = None
    if workload:
        try:
            wl = load_workload(workload, **dict(workload_kwargs or {}))
        except CutileDiagError as e:
            tried.append(f"workload {workload}: {e.one_line()}")
    if wl is not None and gpu:
        try:
            cfg = wl.config(config) if config else _costliest(wl)
            if on_step:
                on_step(f"run {wl.ref} ({cfg.name}) in run mode")
            cap, rec = capture_workload_run(wl, kernel, config=cfg.name, out_dir=out_dir, name=name,
                                            timeout=timeout)
            return AutoCapture(cap, "workload-run", rec, tried)
        except CutileDiagError as e:
            tried.append(f"run of workload {wl.ref}: {e.one_line()}")
    if wl is not None:
        try:
            if on_step:
                on_step(f"intercept the launches of {wl.ref} on CPU inputs")
            seen, cfg_name = launch_from_workload(wl, kernel, config=config)
            cap = export_launch(seen, cfg_name, ref=ref, archs=archs, out_dir=out_dir, name=name, on_step=on_step)
            return AutoCapture(cap, "workload-cpu", seen, tried)
        except LaunchNotSeen as e:
            tried.append(e.one_line())
    if command:
        if gpu:
            try:
                if on_step:
                    on_step("run the test command in run mode")
                cap = capture_command_run(command, kernel, out_dir=out_dir, name=name, cwd=command_cwd,
                                          timeout=timeout)
                return AutoCapture(cap, "command-run", None, tried)
            except CutileDiagError as e:
                tried.append(f"run of the test command: {e.one_line()}")
        else:
            tried.append("the test command needs a GPU to run")
    if not workload and not command:
        tried.append("no workload or test command to take the arguments from")
    known = None
    if seen is not None:
        known = {a.name: a.spec() for a in seen.args if a.spec() is not None}
    raise spec_mod.MissingSpecsError(f"cannot capture {loaded.attr}: " + "; ".join(tried),
                     hint=spec_mod.spec_hint(loaded, known=known))
