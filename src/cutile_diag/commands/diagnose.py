"""``cutile-diag diagnose KERNEL`` — the bottleneck and the next optimisations, with evidence.

KERNEL is any of:

* a capture folder (or a folder of captures)  -> static evidence: TileIR + cubin side
* a bare TileIR file                          -> static evidence from the IR only (says what is missing)
* ``file.py::kernel`` or an example name      -> captured ahead of time first, then as a capture folder
* a workload: ``examples:<kernel>``, ``tilegym:<op>``, ``file.py::Workload`` (or an example name
  with ``--gpu``) -> captured, then measured on the GPU: roofline class, % of roof, host time,
  configurations; offline with ``--device PRESET --latency-ms X``.

``--ncu`` (after KERNEL) profiles a workload's diagnosed configuration with Nsight Compute and
puts its rule findings beside the entries they support; ``--ncu FILE`` reads a saved report.
Past loop steps (``--calibrate``, ``--ledger``, or ``./cutile-diag-out/optimize``) calibrate
the expected gains and are listed as predicted vs measured.
"""
from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path

from ..errors import CutileDiagError, NoGPUError, UsageError
from ..output import console, err_console, print_json, prog, progress


NCU_COLLECT = "collect"


def register(sub) -> None:
    p = sub.add_parser(
        "diagnose", help="classify the bottleneck and rank the next optimisations, with evidence",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("kernel", help="capture folder, TileIR file, FILE.py::KERNEL, example name or workload")
    p.add_argument("--arch", default=None, help="target arch for captures (default sm_90, or the GPU's)")
    p.add_argument("--entry", help="TileIR entry to analyse when a file holds several (name or symbol)")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=SPEC",
                   help="argument spec for FILE.py::KERNEL without CAPTURE_SPECS (repeatable)")
    p.add_argument("--out", help="keep the capture made for a kernel ref / workload in this folder")
    p.add_argument("--tried", default="", help="playbook ids already tried for this kernel, e.g. B,E (demoted)")
    p.add_argument("--ledger", help="the optimisation loop's ledger.jsonl (or its state folder): the entries it "
                                    "demotes count as tried")
    p.add_argument("--gpu", action="store_true", help="treat an example name as its workload (measure it)")
    p.add_argument("--static", action="store_true", help="never measure, even for a workload")
    p.add_argument("--config", action="append", default=None, help="workload configuration(s) to measure")
    p.add_argument("--device", help="offline: device preset (a100, h100, h200, b200) for --latency-ms")
    p.add_argument("--latency-ms", type=float,
                   help="offline: a recorded latency (ms) of the configuration diagnosed: the costliest of the "
                        "selected ones (pick it with --config)")
    p.add_argument("--roofline", help=f"add GPU evidence from a saved roofline JSON ({prog()} roofline --json)")
    p.add_argument("--ncu", nargs="?", const=NCU_COLLECT, metavar="FILE",
                   help="Nsight Compute evidence: alone, profile the workload's diagnosed configuration with the "
                        "rule-carrying sections (ncu --set full) and read its guided analysis; with FILE, read a "
                        ".ncu-rep, an export JSON (cutile-diag's ncu-export.json) or a {metric: value} JSON")
    p.add_argument("--calibrate", action="append", default=[], metavar="LEDGER",
                   help="the loop's ledgers (files, state folders, or folders searched for ledger.jsonl) whose "
                        "measured steps calibrate the predicted gains (repeatable; --ledger counts too; default: "
                        "./cutile-diag-out/optimize when the loop ran here)")
    p.add_argument("--timeout", type=float, default=300.0, help="per-measurement timeout in seconds")
    p.add_argument("--all", action="store_true", help="show every evidence line")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


# --- inputs ------------------------------------------------------------------------------------

def _tried(args) -> Counter:
    """--tried ids (any case; an unknown id is an error) plus what a --ledger demotes."""
    from ..diagnose.playbook import default_playbook
    ids = default_playbook().ids
    out: Counter = Counter()
    for t in filter(None, (x.strip().upper() for x in args.tried.split(","))):
        if t not in ids:
            raise UsageError(f"--tried: '{t}' is not a playbook id", hint="valid ids: " + ",".join(ids))
        out[t] += 1
    if args.ledger:
        out += tried_from_ledger(args.ledger)
    return out


def tried_from_ledger(path: str) -> Counter:
    """The entries the loop itself demotes (``Ledger.tried``: tried and not a clear win), read from
    a ledger file or a loop state folder holding ``ledger.jsonl``."""
    from ..ledger import LEDGER_FILE, LEDGER_GZ, Ledger

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


def _classify_target(args) -> tuple[str, object]:
    """('capture'|'captures'|'tileir'|'kernel'|'workload', payload)."""
    text = args.kernel.strip()
    if not text:
        raise UsageError("no kernel given")
    from ..source.ref import split_ref
    from ..examples import EXAMPLE_KERNELS, EXAMPLES_DIR
    p = Path(text)
    if p.exists() and "::" not in text:
        if p.is_dir():
            from ..capture.manifest import MANIFEST
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
            return _py_target(p, None, args)
        return "tileir", p
    if "::" in text:
        path, name = split_ref(text)
        return _py_target(path, name, args)
    if text.startswith(("examples:", "tilegym:")):
        return "workload", text
    kernels = {k: f for f, ks in EXAMPLE_KERNELS.items() for k in ks}
    if text in kernels:
        if args.gpu:
            return "workload", f"examples:{text}"
        return "kernel", f"{EXAMPLES_DIR / kernels[text]}::{text}"
    from ..workloads import builtin_names
    if any(n.split(":", 1)[1] == text for n in builtin_names()):
        return "workload", text
    raise UsageError(f"'{text}' is not a file, a FILE.py::NAME reference, an example or a workload",
                     hint="examples: " + ", ".join(sorted(kernels)))


def _py_target(path: Path, name: str | None, args):
    from ..capture.loader import import_file, is_kernel, kernels_in
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


# --- running ---------------------------------------------------------------------------------------

def run(args) -> int:
    from ..diagnose.calibrate import Calibration
    from ..diagnose.engine import diagnose_tileir
    from ..ledger import find_ledgers
    tried = _tried(args)
    paths = [*args.calibrate, *([args.ledger] if args.ledger else [])]
    auto = Path.cwd() / "cutile-diag-out" / "optimize"     # the loop's default state root here
    if not paths and auto.is_dir() and find_ledgers(auto):
        paths = [auto]
    args.calibration = Calibration.from_paths(paths) if paths else None
    kind, payload = _classify_target(args)
    if (args.latency_ms is not None or args.device) and kind != "workload":
        # a recorded latency needs the workload's FLOP/byte counts: never drop it silently
        raise UsageError("--latency-ms / --device need a workload (examples:<kernel>, tilegym:<op>, FILE.py::Workload)",
                         hint=f"for a capture folder pass --roofline FILE from `{prog()} roofline WORKLOAD --json`")
    show = not args.json
    diagnoses = []
    if kind == "captures":
        with progress(len(payload), "diagnosing captures", enabled=show) as bar:
            for folder in payload:
                diagnoses.append(_with_extra(args, folder, tried))
                bar.advance()
    elif kind == "capture":
        diagnoses.append(_with_extra(args, payload, tried))
    elif kind == "tileir":
        if args.roofline:
            raise UsageError("--roofline needs a capture folder or a workload, not a bare TileIR file")
        if args.ncu:
            raise UsageError("--ncu needs a capture folder or a workload, not a bare TileIR file")
        diagnoses.append(diagnose_tileir(Path(payload), entry=args.entry, tried=tried, calibration=args.calibration))
    elif kind == "kernel":
        diagnoses.append(_diagnose_kernel_ref(args, payload, tried))
    else:
        diagnoses.append(_diagnose_workload(args, payload, tried))

    if args.calibration:
        for d in diagnoses:
            d.notes.append(f"predictions calibrated by {len(args.calibration.steps)} measured step(s) from "
                           f"{len(args.calibration.sources)} ledger(s): " + ", ".join(args.calibration.sources[:3])
                           + (" …" if len(args.calibration.sources) > 3 else ""))
    if args.json:
        if len(diagnoses) == 1:
            print_json(diagnoses[0].to_json())
        else:
            print_json({"diagnoses": [d.to_json() for d in diagnoses]})
        return 0
    from ..diagnose.render import render_diagnosis
    for i, d in enumerate(diagnoses):
        if i:
            console.rule()
        render_diagnosis(d, console, all_evidence=args.all)
    return 0


def _with_extra(args, folder, tried):
    """A capture folder, plus GPU evidence from --roofline / --ncu files when given."""
    from ..diagnose.collect_capture import collect_capture
    from ..diagnose.collect_gpu import collect_gpu
    from ..diagnose.engine import _static_only, diagnose
    if args.ncu == NCU_COLLECT:
        raise UsageError("--ncu without a FILE profiles a workload; a capture folder needs --ncu FILE",
                         hint="diagnose the workload (examples:<kernel>, tilegym:<op>) or pass a .ncu-rep / export")
    ncu = _load_ncu(args.ncu) if args.ncu else None     # bad files fail before any work
    points, device, host_ms = _load_roofline(args.roofline) if args.roofline else ([], None, None)
    ev = collect_capture(folder, arch=args.arch, entry=args.entry)
    _static_only(ev)
    if points:
        primary = _costliest_point(points)
        if len(points) > 1:
            ev.notes.append(f"GPU facts describe configuration {primary} (the costliest of {len(points)} in "
                            f"{args.roofline}); the others feed the cross-configuration facts")
        collect_gpu(ev, points=points, primary=primary, device=device, host_ms=host_ms,
                    ncu=None if _is_export(ncu) else ncu)
    _add_ncu(ev, ncu, args.ncu)
    return diagnose(ev, tried=tried, calibration=args.calibration)


def _is_export(doc) -> bool:
    """An ncu export (kernels with rule results), as opposed to a {metric: value} dict."""
    from ..roofline.ncu import EXPORT_SCHEMA
    return isinstance(doc, dict) and (doc.get("schema") == EXPORT_SCHEMA or any(
        isinstance(k, dict) and "rules" in k for k in doc.get("kernels") or []))


def _add_ncu(ev, ncu, origin: str | None, kernel_name: str | None = None) -> None:
    from ..diagnose.collect_gpu import collect_ncu
    from ..diagnose.ncu_rules import collect_ncu_rules
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
        from ..roofline.ncu import export_report, ncu_report_module
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


def _capture_dir(args):
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        return None, Path(args.out)
    tmp = tempfile.TemporaryDirectory(prefix="cutile-diag-diagnose-")
    return tmp, Path(tmp.name)


def _diagnose_kernel_ref(args, ref: str, tried):
    from ..capture.aot import capture_aot
    from ..capture.spec import parse_assignments
    from ..diagnose.engine import diagnose_capture
    specs = parse_assignments(args.arg) if args.arg else None
    arch = args.arch or "sm_90"
    tmp, out = _capture_dir(args)
    try:
        if not args.json:
            err_console.print(f"[dim]capturing {ref} for {arch} …[/]")
        folder = capture_aot(ref, specs, archs=[arch], out_dir=out)
        if args.roofline or args.ncu:
            d = _with_extra(args, folder.path, tried)
        else:
            d = diagnose_capture(folder, arch=arch, entry=args.entry, tried=tried, calibration=args.calibration)
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


def _diagnose_workload(args, ref: str, tried):
    """Capture the workload's kernel for its costliest configuration, then measure every configuration."""
    from ..capture.aot import capture_aot
    from ..diagnose.collect_capture import collect_capture
    from ..diagnose.collect_gpu import collect_gpu, variant_groups
    from ..diagnose.engine import _static_only, diagnose
    from ..workloads import load_workload
    wl = load_workload(ref)
    cfgs = wl.select(args.config)
    # single-valued facts describe the costliest configuration: a tiny one is launch-bound
    # whatever the kernel does, so diagnosing it would send the loop after host overhead
    primary = _costliest(wl, cfgs)
    device, why_static = None, None
    from ..roofline.device import live_device, preset
    if args.device:
        device = preset(args.device)
        if args.latency_ms is None and not args.static:
            raise UsageError("--device needs --latency-ms (a recorded latency of the diagnosed configuration)")
    elif args.latency_ms is not None:
        raise UsageError("--latency-ms needs --device PRESET (which GPU the latency was recorded on)")
    elif not args.static:
        try:
            device = live_device()
        except NoGPUError as e:
            why_static = e.one_line()
    if args.ncu == NCU_COLLECT and (device is None or device.kind != "live"):
        raise UsageError("--ncu without a FILE profiles the workload on this machine's GPU"
                         + (f" ({why_static})" if why_static else ""),
                         hint="offline, pass --ncu FILE (a .ncu-rep or its export JSON)")
    sms = int(device.sm_count.value) if device is not None and device.sm_count.known else 132
    arch = args.arch or (device.arch if device is not None else "sm_90")
    spec = wl.capture(primary, sms)
    tmp, out = _capture_dir(args)
    try:
        from ..diagnose.evidence import Evidence
        ev = Evidence(kernel=wl.name)
        folder = None
        if spec is None and device is not None and device.kind == "live":
            folder = _capture_by_running(args, wl, primary, out)
        elif spec is None:
            folder = _capture_by_intercepting(args, wl, primary, arch, out)
        if folder is not None:
            ev = collect_capture(folder, arch=None if device is not None and device.kind == "live" else arch,
                                 entry=args.entry)
        elif spec is None:
            ev.missing("TileIR structure (hints, gathers, loops, mma dtypes)",
                       f"workload {wl.name} declares no capture spec and its launch could not be observed",
                       "implement Workload.capture(cfg, num_sms), or set kernel_name")
        else:
            if not args.json:
                err_console.print(f"[dim]capturing {spec.kernel} ({primary.name}) for {arch} …[/]")
            folder = capture_aot(spec.kernel, dict(spec.args), archs=[arch], out_dir=out,
                                 hints=dict(spec.hints) if spec.hints else None)
            ev = collect_capture(folder, arch=arch, entry=args.entry)
        ev.kernel = f"{wl.name} ({primary.name})"
        ev.context["workload"] = wl.ref or ref
        ev.context["configuration"] = primary.name
        points, host_ms = [], None
        if device is None:
            _static_only(ev)
            if why_static:
                ev.notes.append(f"static evidence only: {why_static}")
        elif args.latency_ms is not None:
            from ..roofline.model import analyze
            points.append(analyze(wl.ref or ref, primary.name, latency_ms=args.latency_ms,
                                  flops=wl.flops(primary), bytes=wl.bytes(primary), unit=wl.compute_unit(primary),
                                  device=device, latency_source="recorded", grid=spec.grid if spec else None))
            ev.missing("host / launch overhead", "offline: a recorded latency has no host time")
            ev.notes.append(f"--latency-ms {args.latency_ms:g} applied to configuration {primary.name}"
                            + (f", the costliest of the {len(cfgs)} selected (choose one with --config)"
                               if len(cfgs) > 1 else ""))
        else:
            points, host_ms = _measure(args, wl, cfgs, device, sms, ev, primary)
        ncu = None
        if args.ncu == NCU_COLLECT:
            ncu = _collect_ncu(args, wl, primary, out, ev)
        elif args.ncu:
            ncu = _load_ncu(args.ncu)
        if points:
            collect_gpu(ev, points=points, primary=primary.name, device=device, host_ms=host_ms,
                        ncu=None if _is_export(ncu) else ncu, variant_of=variant_groups(cfgs))
        elif device is not None and args.latency_ms is None:
            _static_only(ev)
        _add_ncu(ev, ncu, None if args.ncu == NCU_COLLECT else args.ncu, wl.kernel_name)
        d = diagnose(ev, tried=tried, calibration=args.calibration)
        if tmp is not None:
            d.context["capture"] = None
        return d
    finally:
        if tmp is not None:
            tmp.cleanup()


def _collect_ncu(args, wl, cfg, out: Path, ev):
    """Profile the diagnosed configuration with Nsight Compute's rule sections; the report and
    its export stay in the capture folder (--out) for later `diagnose --ncu FILE`."""
    from ..roofline.ncu import profile_report
    if not args.json:
        err_console.print(f"[dim]profiling {wl.name} ({cfg.name}) with Nsight Compute (--set full) …[/]")
    r = profile_report(wl.ref, cfg.name, out / "ncu", workload_kwargs=dict(wl.ref_kwargs or {}),
                       timeout_s=max(args.timeout, 600.0))
    ev.context["ncu_command"] = " ".join(r.command)
    if r.error:
        ev.missing("Nsight Compute rules", f"ncu failed: {r.error}")
        ev.notes.append(f"Nsight Compute: {r.error}")
        return None
    ev.context["ncu_report"] = r.report if args.out else None
    return r.export
def _capture_by_intercepting(args, wl, cfg, arch: str, out: Path):
    """No AOT spec and no GPU: build the inputs on the CPU, intercept the launch of the workload's
    ``kernel_name`` (else the one kernel the configuration launches) and export the kernel for
    that signature (capture.auto)."""
    from ..capture.auto import export_launch, launch_from_workload
    try:
        rec, cfg_name = launch_from_workload(wl, wl.kernel_name, config=cfg.name, main=True)
        return export_launch(rec, cfg_name, archs=[arch], out_dir=out)
    except CutileDiagError as e:
        if not args.json:
            err_console.print(f"[yellow]capture from intercepted launches failed: {e.one_line()}[/]")
        return None


def _capture_by_running(args, wl, cfg, out: Path):
    """No AOT spec (e.g. a TileGym op): run the workload once with the dump variables set and keep
    the capture of its main kernel (``kernel_name``, else the kernel compiled last); with a
    ``kernel_name``, its launches are observed too (launch facts in the manifest)."""
    import sys

    from ..capture.run_mode import capture_run
    if wl.kernel_name:
        from ..capture.auto import capture_workload_run
        try:
            return capture_workload_run(wl, wl.kernel_name, config=cfg.name, out_dir=out, name=None,
                                        timeout=args.timeout)[0]
        except CutileDiagError as e:     # e.g. kernel_name names no launched kernel: take the last one
            if not args.json:
                err_console.print(f"[dim]capture with launches failed ({e.one_line()}); capturing without[/]")
    code = ("from cutile_diag.workloads import load_workload as L; import torch; "
            f"w = L({wl.ref!r}, **{dict(wl.ref_kwargs or {})!r}); c = w.config({cfg.name!r}); "
            "w.run(w.make_inputs(c, 0)); torch.cuda.synchronize()")
    if not args.json:
        err_console.print(f"[dim]capturing {wl.name} ({cfg.name}) from a run …[/]")
    try:
        res = capture_run([sys.executable, "-c", code], out_dir=out, timeout=args.timeout)
    except CutileDiagError as e:
        if not args.json:
            err_console.print(f"[yellow]capture from a run failed: {e.one_line()}[/]")
        return None
    caps = res.captures
    if wl.kernel_name:
        named = [c for c in caps if (c.manifest.get("kernel") or {}).get("function") == wl.kernel_name]
        caps = named or caps
    return caps[-1] if caps else None


def _measure(args, wl, cfgs, device, sms, ev, primary=None):
    from ..bench import measure_isolated
    from ..roofline.model import analyze
    try:
        from ..roofline.peaks import load_cached
        ceilings = load_cached(device)
    except Exception:  # no cache yet: the datasheet roofs still apply
        ceilings = None
    if ceilings is None:
        ev.notes.append(f"no measured ceilings for this GPU (run `{prog()} peaks`): % of roof is against the datasheet roof")
    points, host_ms = [], None
    with progress(len(cfgs), "measuring", enabled=not args.json) as bar:
        for cfg in cfgs:
            bar.update(f"measuring {cfg.name}")
            r = measure_isolated(wl.ref, cfg.name, workload_kwargs=dict(wl.ref_kwargs or {}),
                                 timeout_s=args.timeout)
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
