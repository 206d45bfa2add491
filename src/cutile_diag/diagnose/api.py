"""``diagnose``'s one entry point: what to diagnose in, the diagnoses out.

    diagnose(DiagnoseRequest(kernel=..., ...), echo=...) -> DiagnoseResult

KERNEL is a capture folder (or a folder of captures), a bare TileIR file, ``FILE.py::KERNEL``
or an example name (captured ahead of time first), or a workload (``examples:<kernel>``,
``tilegym:<op>``, ``FILE.py::Workload``: captured, then measured on the GPU, or offline with a
recorded latency).  This module resolves the target, captures, measures, profiles with Nsight
Compute and calibrates; ``commands/diagnose.py`` only turns flags into the request and renders.
"""
from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..measure.ceilings import device_ceilings
from ..measure.isolated import measure_isolated
from ..capture.aot import capture_aot
from ..measure.capture import capture_workload_run, export_launch, launch_from_workload
from ..capture.loader import import_file, is_kernel, kernels_in
from ..capture.manifest import MANIFEST
from ..capture.run_mode import capture_run
from ..capture.spec import parse_assignments
from ..errors import CutileDiagError, NoGPUError, UsageError
from ..examples import EXAMPLE_KERNELS, EXAMPLES_DIR
from ..ledger import LEDGER_FILE, LEDGER_GZ, Ledger, find_ledgers
from ..output import prog, progress
from ..roofline.device import live_device, preset
from ..roofline.model import analyze
from ..roofline.ncu import EXPORT_SCHEMA, export_report, ncu_report_module, profile_report
from ..source.ref import split_ref
from ..workloads import builtin_names, load_workload
from .calibrate import Calibration
from .collect_capture import collect_capture
from .collect_gpu import collect_gpu, collect_ncu, variant_groups
from .engine import Diagnosis, _static_only, diagnose_capture, diagnose_tileir
from .engine import diagnose as diagnose_evidence
from .evidence import Evidence
from .ncu_rules import collect_ncu_rules
from .playbook import default_playbook

NCU_COLLECT = "collect"          # --ncu without a FILE: profile the workload here

Echo = Callable[[str], None] | None


@dataclass
class DiagnoseRequest:
    """The ``diagnose`` command's flags, by the same names."""
    kernel: str                                  # capture folder, TileIR file, FILE.py::KERNEL, example, workload
    arch: str | None = None                      # default sm_90, or the GPU's
    entry: str | None = None                     # TileIR entry when a file holds several
    arg: list[str] = field(default_factory=list)         # NAME=SPEC for FILE.py::KERNEL without CAPTURE_SPECS
    out: str | None = None                       # keep the capture made here
    tried: str = ""                              # playbook ids already tried, e.g. "B,E"
    ledger: str | None = None                    # the loop's ledger: what it demotes counts as tried
    gpu: bool = False                            # an example name is its workload
    static: bool = False                         # never measure
    config: list[str] | None = None              # workload configurations to measure
    device: str | None = None                    # offline: a device preset, with latency_ms
    latency_ms: float | None = None              # offline: a recorded latency of the diagnosed configuration
    roofline: str | None = None                  # a saved `roofline --json`
    ncu: str | None = None                       # NCU_COLLECT, or a .ncu-rep / export / metric JSON
    calibrate: list[str] = field(default_factory=list)   # ledgers calibrating the predicted gains
    timeout: float = 300.0                       # per measurement, seconds


@dataclass
class DiagnoseResult:
    """The diagnoses of one ``diagnose`` call, one per kernel."""
    diagnoses: list[Diagnosis]

    def to_json(self) -> dict:
        """One diagnosis as its own object; several under ``diagnoses``."""
        if len(self.diagnoses) == 1:
            return self.diagnoses[0].to_json()
        return {"diagnoses": [d.to_json() for d in self.diagnoses]}


def diagnose(req: DiagnoseRequest, *, echo: Echo = None) -> DiagnoseResult:
    """Resolve ``req.kernel``, capture / measure / profile as it needs, diagnose.  ``echo``:
    progress lines (rich markup) and progress bars; None: silent (``--json``)."""
    say = echo or (lambda _s: None)
    show = echo is not None
    tried = _tried(req)
    paths = [*req.calibrate, *([req.ledger] if req.ledger else [])]
    auto = Path.cwd() / "cutile-diag-out" / "optimize"     # the loop's default state root here
    if not paths and auto.is_dir() and find_ledgers(auto):
        paths = [auto]
    cal = Calibration.from_paths(paths) if paths else None
    kind, payload = _classify_target(req)
    if (req.latency_ms is not None or req.device) and kind != "workload":
        # a recorded latency needs the workload's FLOP/byte counts: never drop it silently
        raise UsageError("--latency-ms / --device need a workload (examples:<kernel>, tilegym:<op>, FILE.py::Workload)",
                         hint=f"for a capture folder pass --roofline FILE from `{prog()} roofline WORKLOAD --json`")
    diagnoses = []
    if kind == "captures":
        with progress(len(payload), "diagnosing captures", enabled=show) as bar:
            for folder in payload:
                diagnoses.append(_with_extra(req, folder, tried, cal))
                bar.advance()
    elif kind == "capture":
        diagnoses.append(_with_extra(req, payload, tried, cal))
    elif kind == "tileir":
        if req.roofline:
            raise UsageError("--roofline needs a capture folder or a workload, not a bare TileIR file")
        if req.ncu:
            raise UsageError("--ncu needs a capture folder or a workload, not a bare TileIR file")
        diagnoses.append(diagnose_tileir(Path(payload), entry=req.entry, tried=tried, calibration=cal))
    elif kind == "kernel":
        diagnoses.append(_diagnose_kernel_ref(req, payload, tried, cal, say))
    else:
        diagnoses.append(_diagnose_workload(req, payload, tried, cal, say, show))
    if cal:
        for d in diagnoses:
            d.notes.append(f"predictions calibrated by {len(cal.steps)} measured step(s) from "
                           f"{len(cal.sources)} ledger(s): " + ", ".join(cal.sources[:3])
                           + (" …" if len(cal.sources) > 3 else ""))
    return DiagnoseResult(diagnoses)


# --- inputs -------------------------------------------------------------------------------------

def _tried(req) -> Counter:
    """--tried ids (any case; an unknown id is an error) plus what a --ledger demotes."""
    ids = default_playbook().ids
    out: Counter = Counter()
    for t in filter(None, (x.strip().upper() for x in req.tried.split(","))):
        if t not in ids:
            raise UsageError(f"--tried: '{t}' is not a playbook id", hint="valid ids: " + ",".join(ids))
        out[t] += 1
    if req.ledger:
        out += tried_from_ledger(req.ledger)
    return out


def tried_from_ledger(path: str) -> Counter:
    """The entries the loop itself demotes (``Ledger.tried``: tried and not a clear win), read from
    a ledger file or a loop state folder holding ``ledger.jsonl``."""

    p = Path(path)
    if p.is_dir():
        if not any((p / f).is_file() for f in (LEDGER_FILE, LEDGER_GZ)):
            raise UsageError(f"{p}: a folder without {LEDGER_FILE} (not a loop state folder)")
        led = Ledger.load(p)        # ledger.jsonl, or the gzipped copy committed results keep
    elif not p.is_file():
        raise UsageError(f"{p}: no such ledger")
    else:       # any file name: a copied ledger reads like <state>/ledger.jsonl
        led = Ledger.load(p.parent, file=p)
    try:
        return led.tried()
    except (KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"{p}: an iteration record is malformed ({type(e).__name__}: {e}); "
                         f"expected the loop's {LEDGER_FILE}") from None


def _classify_target(req) -> tuple[str, object]:
    """('capture'|'captures'|'tileir'|'kernel'|'workload', payload)."""
    text = req.kernel.strip()
    if not text:
        raise UsageError("no kernel given")
    p = Path(text)
    if p.exists() and "::" not in text:
        if p.is_dir():
            if (p / MANIFEST).exists():
                return "capture", p
            subs = sorted(d for d in p.iterdir() if (d / MANIFEST).exists())
            if subs:
                return "captures", subs
            raise UsageError(f"{p}: not a capture folder (no manifest.json) and holds none",
                             hint=f"capture it first: {prog()} capture FILE.py::KERNEL --out DIR")
        if p.name == "manifest.json":
            return "capture", p.parent
        if p.suffix == ".py":
            return _py_target(p, None, req)
        return "tileir", p
    if "::" in text:
        path, name = split_ref(text)
        return _py_target(path, name, req)
    if text.startswith(("examples:", "tilegym:")):
        return "workload", text
    kernels = {k: f for f, ks in EXAMPLE_KERNELS.items() for k in ks}
    if text in kernels:
        if req.gpu:
            return "workload", f"examples:{text}"
        return "kernel", f"{EXAMPLES_DIR / kernels[text]}::{text}"
    if any(n.split(":", 1)[1] == text for n in builtin_names()):
        return "workload", text
    raise UsageError(f"'{text}' is not a file, a FILE.py::NAME reference, an example or a workload",
                     hint="examples: " + ", ".join(sorted(kernels)))


def _py_target(path: Path, name: str | None, req):
    module = import_file(path)
    if name is not None:
        if not hasattr(module, name):
            raise UsageError(f"{path}: no kernel or workload named '{name}'")
        obj = getattr(module, name)
        if is_kernel(obj):
            return "kernel", f"{path}::{name}"
        return "workload", f"{path}::{name}"
    if kernels_in(module):
        return "kernel", str(path)
    return "workload", str(path)


def _with_extra(req, folder, tried, cal):
    """A capture folder, plus GPU evidence from --roofline / --ncu files when given."""
    if req.ncu == NCU_COLLECT:
        raise UsageError("--ncu without a FILE profiles a workload; a capture folder needs --ncu FILE",
                         hint="diagnose the workload (examples:<kernel>, tilegym:<op>) or pass a .ncu-rep / export")
    ncu = _load_ncu(req.ncu) if req.ncu else None     # bad files fail before any work
    points, device, host_ms = _load_roofline(req.roofline) if req.roofline else ([], None, None)
    ev = collect_capture(folder, arch=req.arch, entry=req.entry)
    _static_only(ev)
    if points:
        primary = _costliest_point(points)
        if len(points) > 1:
            ev.notes.append(f"GPU facts describe configuration {primary} (the costliest of {len(points)} in "
                            f"{req.roofline}); the others feed the cross-configuration facts")
        collect_gpu(ev, points=points, primary=primary, device=device, host_ms=host_ms,
                    ncu=None if _is_export(ncu) else ncu)
    _add_ncu(ev, ncu, req.ncu)
    return diagnose_evidence(ev, tried=tried, calibration=cal)


def _is_export(doc) -> bool:
    """An ncu export (kernels with rule results), as opposed to a {metric: value} dict."""
    return isinstance(doc, dict) and (doc.get("schema") == EXPORT_SCHEMA or any(
        isinstance(k, dict) and "rules" in k for k in doc.get("kernels") or []))


def _add_ncu(ev, ncu, origin: str | None, kernel_name: str | None = None) -> None:
    if ncu is None:
        return
    if _is_export(ncu):
        ev.resolve("Nsight Compute")
        collect_ncu_rules(ev, ncu, kernel_name=kernel_name, origin=origin or "")
    elif not any(k.startswith("ncu.") for k in ev.values()):
        collect_ncu(ev, ncu, origin=origin or "")


def _load_json(path: str, what: str):
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{p}: " + (f"a folder, not a {what} JSON file" if p.is_dir() else f"no such {what} file"))
    try:
        return json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{p}: not UTF-8 text (byte {e.start}); expected a {what} JSON file") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"{p}:{e.lineno}: not JSON ({e.msg})") from None


def _load_roofline(path: str):
    """(points, device, host ms of the costliest point) from `cutile-diag roofline --json`
    ({device, results: [{config, status, point, measure, ncu}]}) or a list / {points: [...]} of points."""
    doc = _load_json(path, "roofline")
    device, items = None, doc
    if isinstance(doc, dict):
        device = doc.get("device") if isinstance(doc.get("device"), dict) else None
        items = next((doc[k] for k in ("results", "points", "configs", "roofline") if isinstance(doc.get(k), list)),
                     [doc])
    points, hosts = [], {}
    for x in items if isinstance(items, list) else []:
        if isinstance(x, dict) and "point" in x:     # a roofline result: the point, its measurement, its ncu
            if not isinstance(x["point"], dict):
                continue                             # a configuration that failed to measure
            m = x.get("measure") if isinstance(x.get("measure"), dict) else {}
            pt = dict(x["point"])
            if not pt.get("stats") and m.get("stats"):
                pt["stats"] = m["stats"]
            if not pt.get("ncu") and isinstance(x.get("ncu"), dict):
                pt["ncu"] = x["ncu"]
            hosts[pt.get("config")] = (m.get("measurement") or {}).get("host_enqueue_ms")
            x = pt
        if isinstance(x, dict) and "latency_ms" in x:
            points.append(x)
    if not points:
        raise UsageError(f"{path}: no roofline points (objects with latency_ms, bound, pct_datasheet ...)",
                         hint=f"write it with: {prog()} roofline WORKLOAD --json > FILE")
    return points, device, hosts.get(_costliest_point(points))


def _costliest_point(points: list[dict]) -> str | None:
    """The configuration the single-valued facts describe: the most bytes, then FLOPs (as for workloads)."""
    def cost(p):
        return tuple(float(p.get(k) or 0.0) if isinstance(p.get(k), (int, float)) else 0.0
                     for k in ("bytes", "flops"))
    return max(points, key=cost).get("config")


def _load_ncu(path: str) -> dict:
    """A .ncu-rep (exported through ncu_report), an export JSON, or a {metric: value} JSON."""
    if path.endswith(".ncu-rep"):
        if not Path(path).is_file():
            raise UsageError(f"{path}: no such Nsight Compute report")
        if ncu_report_module() is None:
            raise UsageError(f"{path}: reading a .ncu-rep needs Nsight Compute's ncu_report module",
                             hint="put ncu on PATH (its extras/python is found from there) or pip install ncu-report")
        try:
            return export_report(path)
        except Exception as e:   # a report from another version, a truncated file
            raise UsageError(f"{path}: ncu_report cannot read it: {e}") from None
    doc = _load_json(path, "ncu")
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: expected a JSON object (an ncu export or metric -> value)")
    return doc


def _capture_dir(req):
    if req.out:
        Path(req.out).mkdir(parents=True, exist_ok=True)
        return None, Path(req.out)
    tmp = tempfile.TemporaryDirectory(prefix="cutile-diag-diagnose-")
    return tmp, Path(tmp.name)


def _diagnose_kernel_ref(req, ref: str, tried, cal, say):
    specs = parse_assignments(req.arg) if req.arg else None
    arch = req.arch or "sm_90"
    tmp, out = _capture_dir(req)
    try:
        say(f"[dim]capturing {ref} for {arch} …[/]")
        folder = capture_aot(ref, specs, archs=[arch], out_dir=out)
        if req.roofline or req.ncu:
            d = _with_extra(req, folder.path, tried, cal)
        else:
            d = diagnose_capture(folder, arch=arch, entry=req.entry, tried=tried, calibration=cal)
        if tmp is not None:       # the folder is deleted below: point at nothing
            d.context["capture"] = None
            d.notes.append("the capture was temporary; keep it with --out DIR")
        return d
    finally:
        if tmp is not None:
            tmp.cleanup()


def _costliest(wl, cfgs):
    def cost(c):
        try:
            return (float(wl.bytes(c) or 0.0), float(wl.flops(c) or 0.0))
        except Exception:   # a workload whose counts need a GPU-only import
            return (0.0, 0.0)
    if len(cfgs) == 1:
        return cfgs[0]
    return max(cfgs, key=cost)


def _diagnose_workload(req, ref: str, tried, cal, say, show):
    """Capture the workload's kernel for its costliest configuration, then measure every configuration."""
    wl = load_workload(ref)
    cfgs = wl.select(req.config)
    # single-valued facts describe the costliest configuration: a tiny one is launch-bound
    # whatever the kernel does, so diagnosing it would send the loop after host overhead
    primary = _costliest(wl, cfgs)
    device, why_static = None, None
    if req.device:
        device = preset(req.device)
        if req.latency_ms is None and not req.static:
            raise UsageError("--device needs --latency-ms (a recorded latency of the diagnosed configuration)")
    elif req.latency_ms is not None:
        raise UsageError("--latency-ms needs --device PRESET (which GPU the latency was recorded on)")
    elif not req.static:
        try:
            device = live_device()
        except NoGPUError as e:
            why_static = e.one_line()
    if req.ncu == NCU_COLLECT and (device is None or device.kind != "live"):
        raise UsageError("--ncu without a FILE profiles the workload on this machine's GPU"
                         + (f" ({why_static})" if why_static else ""),
                         hint="offline, pass --ncu FILE (a .ncu-rep or its export JSON)")
    sms = int(device.sm_count.value) if device is not None and device.sm_count.known else 132
    arch = req.arch or (device.arch if device is not None else "sm_90")
    spec = wl.capture(primary, sms)
    tmp, out = _capture_dir(req)
    try:
        ev = Evidence(kernel=wl.name)
        folder = None
        if spec is None and device is not None and device.kind == "live":
            folder = _capture_by_running(req, wl, primary, out, say)
        elif spec is None:
            folder = _capture_by_intercepting(req, wl, primary, arch, out, say)
        if folder is not None:
            ev = collect_capture(folder, arch=None if device is not None and device.kind == "live" else arch,
                                 entry=req.entry)
        elif spec is None:
            ev.missing("TileIR structure (hints, gathers, loops, mma dtypes)",
                       f"workload {wl.name} declares no capture spec and its launch could not be observed",
                       "implement Workload.capture(cfg, num_sms), or set kernel_name")
        else:
            say(f"[dim]capturing {spec.kernel} ({primary.name}) for {arch} …[/]")
            folder = capture_aot(spec.kernel, dict(spec.args), archs=[arch], out_dir=out,
                                 hints=dict(spec.hints) if spec.hints else None)
            ev = collect_capture(folder, arch=arch, entry=req.entry)
        ev.kernel = f"{wl.name} ({primary.name})"
        ev.context["workload"] = wl.ref or ref
        ev.context["configuration"] = primary.name
        points, host_ms = [], None
        if device is None:
            _static_only(ev)
            if why_static:
                ev.notes.append(f"static evidence only: {why_static}")
        elif req.latency_ms is not None:
            points.append(analyze(wl.ref or ref, primary.name, latency_ms=req.latency_ms,
                                  flops=wl.flops(primary), bytes=wl.bytes(primary), unit=wl.compute_unit(primary),
                                  device=device, latency_source="recorded", grid=spec.grid if spec else None))
            ev.missing("host / launch overhead", "offline: a recorded latency has no host time")
            ev.notes.append(f"--latency-ms {req.latency_ms:g} applied to configuration {primary.name}"
                            + (f", the costliest of the {len(cfgs)} selected (choose one with --config)"
                               if len(cfgs) > 1 else ""))
        else:
            points, host_ms = _measure(req, wl, cfgs, device, sms, ev, primary, show)
        ncu = None
        if req.ncu == NCU_COLLECT:
            ncu = _collect_ncu(req, wl, primary, out, ev, say)
        elif req.ncu:
            ncu = _load_ncu(req.ncu)
        if points:
            collect_gpu(ev, points=points, primary=primary.name, device=device, host_ms=host_ms,
                        ncu=None if _is_export(ncu) else ncu, variant_of=variant_groups(cfgs))
        elif device is not None and req.latency_ms is None:
            _static_only(ev)
        _add_ncu(ev, ncu, None if req.ncu == NCU_COLLECT else req.ncu, wl.kernel_name)
        d = diagnose_evidence(ev, tried=tried, calibration=cal)
        if tmp is not None:
            d.context["capture"] = None
        return d
    finally:
        if tmp is not None:
            tmp.cleanup()


def _collect_ncu(req, wl, cfg, out: Path, ev, say):
    """Profile the diagnosed configuration with Nsight Compute's rule sections; the report and
    its export stay in the capture folder (--out) for later `diagnose --ncu FILE`."""
    say(f"[dim]profiling {wl.name} ({cfg.name}) with Nsight Compute (--set full) …[/]")
    r = profile_report(wl.ref, cfg.name, out / "ncu", workload_kwargs=dict(wl.ref_kwargs or {}),
                       timeout_s=max(req.timeout, 600.0))
    ev.context["ncu_command"] = " ".join(r.command)
    if r.error:
        ev.missing("Nsight Compute rules", f"ncu failed: {r.error}")
        ev.notes.append(f"Nsight Compute: {r.error}")
        return None
    ev.context["ncu_report"] = r.report if req.out else None
    return r.export
def _capture_by_intercepting(req, wl, cfg, arch: str, out: Path, say):
    """No AOT spec and no GPU: build the inputs on the CPU, intercept the launch of the workload's
    ``kernel_name`` (else the one kernel the configuration launches) and export the kernel for
    that signature (measure.capture)."""
    try:
        rec, cfg_name = launch_from_workload(wl, wl.kernel_name, config=cfg.name, main=True)
        return export_launch(rec, cfg_name, archs=[arch], out_dir=out)
    except CutileDiagError as e:
        say(f"[yellow]capture from intercepted launches failed: {e.one_line()}[/]")
        return None


def _capture_by_running(req, wl, cfg, out: Path, say):
    """No AOT spec (e.g. a TileGym op): run the workload once with the dump variables set and keep
    the capture of its main kernel (``kernel_name``, else the kernel compiled last); with a
    ``kernel_name``, its launches are observed too (launch facts in the manifest)."""
    if wl.kernel_name:
        try:
            return capture_workload_run(wl, wl.kernel_name, config=cfg.name, out_dir=out, name=None,
                                        timeout=req.timeout)[0]
        except CutileDiagError as e:     # e.g. kernel_name names no launched kernel: take the last one
            say(f"[dim]capture with launches failed ({e.one_line()}); capturing without[/]")
    code = ("from cutile_diag.workloads import load_workload as L; import torch; "
            f"w = L({wl.ref!r}, **{dict(wl.ref_kwargs or {})!r}); c = w.config({cfg.name!r}); "
            "w.run(w.make_inputs(c, 0)); torch.cuda.synchronize()")
    say(f"[dim]capturing {wl.name} ({cfg.name}) from a run …[/]")
    try:
        res = capture_run([sys.executable, "-c", code], out_dir=out, timeout=req.timeout)
    except CutileDiagError as e:
        say(f"[yellow]capture from a run failed: {e.one_line()}[/]")
        return None
    caps = res.captures
    if wl.kernel_name:
        named = [c for c in caps if (c.manifest.get("kernel") or {}).get("function") == wl.kernel_name]
        caps = named or caps
    return caps[-1] if caps else None


def _measure(req, wl, cfgs, device, sms, ev, primary=None, show=False):
    try:
        ceilings = device_ceilings(device)
    except Exception:  # no cache yet: the datasheet roofs still apply
        ceilings = None
    if ceilings is None:
        ev.notes.append(f"no measured ceilings for this GPU (run `{prog()} peaks`): % of roof is against the datasheet roof")
    points, host_ms = [], None
    with progress(len(cfgs), "measuring", enabled=show) as bar:
        for cfg in cfgs:
            bar.update(f"measuring {cfg.name}")
            r = measure_isolated(wl.ref, cfg.name, workload_kwargs=dict(wl.ref_kwargs or {}),
                                 timeout_s=req.timeout)
            bar.advance()
            if not r.ok or r.median_ms is None:
                ev.notes.append(f"configuration {cfg.name}: {r.status}: {r.error or 'no timing'}")
                continue
            spec = wl.capture(cfg, sms)
            p = analyze(wl.ref, cfg.name, latency_ms=r.median_ms, flops=wl.flops(cfg), bytes=wl.bytes(cfg),
                        unit=wl.compute_unit(cfg), device=device, ceilings=ceilings,
                        grid=spec.grid if spec else None)
            p.stats = r.stats.record() if r.stats else None
            points.append(p)
            if host_ms is None and cfg is (primary or cfgs[0]):
                host_ms = (r.measurement or {}).get("host_enqueue_ms")
    if not points:
        raise CutileDiagError(f"no configuration of {wl.name} could be measured",
                              hint="; ".join(ev.notes[-3:]))
    return points, host_ms
