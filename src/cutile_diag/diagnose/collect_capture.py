"""Evidence from a capture folder: the TileIR facts plus what the compiler did with them.

Adds, per target arch: remarks (TMA selection and failures with reasons, tensor-core vs FMA
fallback), SASS instruction mix, resource usage, exact ptxas spills and advisories, threads
per CTA, cluster size, the PTX register budget; and, from the captured argument shapes, the
number of output tiles against the SM count (the grid of a one-tile-per-program kernel),
the waves and the idle tail.  Files that are missing or unreadable are named in
``not_checked``; a manifest of another schema version is read for what it still has.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from ..capture.manifest import CaptureFolder, TARGET_FILES, load_capture
from ..errors import CutileDiagError, UsageError
from ..ir_parsers.tileir_ops import STORES
from .collect_launch import collect_launch
from .evidence import Evidence, Site
from .residency import add_waves, ctas_per_sm, resident
from ..capture.cubin import ptx_directives
from ..capture.spec import ArraySpec, ScalarSpec, parse_spec
from ..ir_parsers.remarks import parse_remarks
from ..ir_parsers.resources import parse_elf_attributes, parse_ptxas_verbose, parse_resource_usage
from ..ir_parsers.sass import parse_sass
from ..ir_parsers.tileir import parse_tileir
from .collect_ir import collect_tileir

# arch -> device preset used when there is no GPU (the SM count and per-SM limits)
ARCH_PRESETS = {"sm_80": "a100", "sm_90": "h200", "sm_100": "b200"}
# preferred MMA tile ranges per arch: (min M/N, max M/N, allowed K)
_MMA_PREFS = {"sm_90": (64, 256, (32, 64)), "sm_100": (64, 512, (32, 64, 128)), "sm_80": (32, 128, (32, 64))}


def _remark_source(r, rname: str) -> tuple[str, str | None]:
    py = f"{Path(r.file).name}:{r.line}" if r.file else None
    return f"{rname}: {r.name}" + (f" @ {py}" if py else ""), py


def _remark_detail(r) -> str:
    parts = [r.message or ""]
    if r.instruction:
        parts.append(f"[{r.instruction}]")
    if r.shape:
        parts.append(f"shape {r.shape}")
    if r.reasons:
        parts.append("reason: " + "; ".join(r.reasons))
    if r.args:     # schedule remarks: II, NumOps, stages ... quoted as tileiras wrote them
        parts.append("(" + ", ".join(f"{k} {v}" for k, v in r.args.items()) + ")")
    return " ".join(p for p in parts if p)


def _dedupe(remarks):
    """tileiras writes each remark once per pass over the function: keep one of each."""
    seen, out = set(), []
    for r in remarks:
        key = (r.kind, r.name, r.file, r.line, r.column, r.instruction, tuple(r.shape or ()), tuple(r.reasons))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _pick(table: dict | None, symbol: str | None, function: str | None):
    if not table:
        return None
    if symbol and symbol in table:
        return table[symbol]
    if function:
        for k, v in table.items():
            if k.startswith(function + "_K"):
                return v
    return next(iter(table.values())) if len(table) == 1 else None


def _archs_on_disk(folder: CaptureFolder) -> list[str]:
    return sorted(d.name for d in folder.path.iterdir() if d.is_dir() and re.fullmatch(r"sm_\d+[a-z]?", d.name))


def collect_capture(folder: CaptureFolder | str | Path, ev: Evidence | None = None, *,
                    arch: str | None = None, entry: str | None = None) -> Evidence:
    """Add a capture folder's facts to ``ev`` (new when None): its TileIR, then the cubin side
    of ``arch`` (remarks, SASS, resources, ptxas) and the launch the manifest recorded."""
    if not isinstance(folder, CaptureFolder):
        folder = load_capture(folder)
    ev = ev if ev is not None else Evidence(kernel=folder.name)
    ev.context["capture"] = str(folder.path)
    ev.add("capture.schema_ok", folder.schema_ok, f"{folder.path.name}/manifest.json",
           str(folder.manifest.get("schema", "none")))
    for p in folder.problems:
        ev.notes.append(p)

    # --- the TileIR
    module = _parse_tileir(folder, ev)
    symbol = folder.symbol
    function = (folder.manifest.get("kernel") or {}).get("function")
    if module is not None:
        name = entry
        if name is None and symbol and len(module.entries) > 1:
            name = symbol
        try:
            collect_tileir(module, ev, entry=name)
        except UsageError:
            if entry is not None:
                raise        # the user named an entry that is not there: an error, as on a bare file
            ev.missing("TileIR structure", f"the manifest's symbol {symbol} is not an entry of the TileIR")
            module = None
        except CutileDiagError as e:
            ev.missing("TileIR structure", e.one_line())
            module = None
        else:
            if not module.has_locations:   # (a corrupt -g text was already named: missing() keeps the first)
                ev.missing("Python source lines of IR ops", "the capture has no kernel.loc.tileir",
                           "tileirdisasm -g output")
        symbol = symbol or ev.context.get("symbol")

    # --- which target
    archs = folder.targets or _archs_on_disk(folder)
    if arch is not None and arch not in archs:
        raise UsageError(f"{folder.path}: no target {arch}", hint="captured: " + (", ".join(archs) or "none"))
    arch = arch or ("sm_90" if "sm_90" in archs else (archs[0] if archs else None))
    if arch is None:
        for what in ("remarks (TMA selection, FMA fallback)", "register spills", "SASS instruction mix",
                     "threads per CTA / cluster"):
            ev.missing(what, "the capture has no compiled target", "capture with --arch sm_90")
        _grid_facts(folder, ev, module, None)
        collect_launch(folder, ev, None)
        return ev
    ev.add("capture.arch", arch, f"{folder.path.name}/{arch}", "targets: " + ", ".join(archs))
    ev.context["arch"] = arch
    ev.collected.append(f"capture: {folder.path.name} ({arch})")

    def read(role: str, check: str, parse):
        p = folder.path / arch / _role_file(role)
        if not p.is_file():
            ev.missing(check, f"{arch}/{p.name} is not in the capture")
            return None, p
        if _blank(p):
            # an empty file records nothing: zero remarks would read as "no TMA failure, no FMA fallback"
            ev.missing(check, f"{arch}/{p.name} is empty", "re-capture the kernel")
            return None, p
        try:
            return parse(p), p
        except CutileDiagError as e:
            ev.missing(check, f"{arch}/{p.name}: {e.one_line()}")
        except Exception as e:  # a corrupt file is reported, never a crash of the diagnosis
            ev.missing(check, f"{arch}/{p.name} cannot be read: {type(e).__name__}: {e}")
        return None, p


    rem, rpath = read("remarks", "remarks (TMA selection, FMA fallback)",
                      lambda p: parse_remarks(p.read_text(errors="replace"), path=str(p)))
    if rem is not None:
        _remark_facts(ev, _dedupe(rem), rpath, symbol, function)
    else:
        ev.add("remarks.available", False, f"{arch}/remarks.yaml",
               "empty" if rpath.is_file() and _blank(rpath) else "no remarks")

    res, rp = read("resources", "registers / shared memory", lambda p: parse_resource_usage(p.read_text(), path=str(p)))
    r = _pick(res, symbol, function)
    res_src = f"{arch}/resource-usage.txt"
    if r is not None:
        line = f"REG:{r.registers} STACK:{r.stack} SHARED:{r.shared} LOCAL:{r.local}"
        ev.add("cubin.registers", r.registers, res_src, line +
               (" (a ceiling on warp-specialised kernels, not a spill signal)" if r.registers >= 255 else ""))
        ev.add("cubin.stack", r.stack, res_src, line)
        ev.add("cubin.shared_bytes", r.shared, res_src, line)
        ev.add("cubin.local_bytes", r.local, res_src, line)
    elif res is not None:
        ev.missing("registers / shared memory", f"{res_src} has no entry for the kernel")

    px, _ = read("ptxas", "register spills", lambda p: parse_ptxas_verbose(p.read_text()))
    rep = _pick(px, symbol, function)
    px_src = f"{arch}/ptxas.txt"
    if rep is not None:
        spill_line = (f"{rep.stack_frame} bytes stack frame, {rep.spill_stores} bytes spill stores, "
                      f"{rep.spill_loads} bytes spill loads")
        ev.add("cubin.spill_bytes", rep.spill_bytes, px_src, spill_line,
               [Site(px_src, spill_line, file=str(folder.path / arch / "ptxas.txt"))])
        ev.add("cubin.spill_stores", rep.spill_stores, px_src, spill_line)
        ev.add("cubin.spill_loads", rep.spill_loads, px_src, spill_line)
        codes = [a["code"] for a in rep.advisories]
        ev.add("cubin.ptxas_advisories", codes, px_src,
               "; ".join(f"{a['code']}: {a['message']}" for a in rep.advisories) or "none")
        c7511 = [a for a in rep.advisories if a["code"] == "C7511"]
        ev.add("cubin.wgmma_serialized", bool(c7511), px_src, c7511[0]["message"] if c7511 else "")
    elif px is not None:
        ev.missing("register spills", f"{px_src} has no report for the kernel")

    attrs, _ = read("elf_info", "threads per CTA / cluster", lambda p: parse_elf_attributes(p.read_text()))
    at = _pick(attrs, symbol, function)
    el_src = f"{arch}/elf-info.txt"
    if at is not None:
        if at.threads:
            ev.add("cubin.threads_per_cta", at.threads, el_src, f"EIATTR_REQNTID {at.threads_per_cta}")
        ev.add("cubin.cluster_size", at.cluster_size, el_src,
               f"EIATTR_CTA_PER_CLUSTER {at.cluster_shape}" if at.cluster_shape else "no cluster attribute")
        ev.add("cubin.warp_specialised", at.reg_reconfig, el_src,
               "EIATTR_REG_RECONFIG (setmaxnreg)" if at.reg_reconfig else "no register reconfiguration")
    tgt = (folder.manifest.get("targets") or {}).get(arch) or {}
    directives = tgt.get("ptx_directives")
    if directives is None:
        ptx = folder.path / arch / "kernel.ptx"
        if ptx.exists():
            directives = ptx_directives(ptx.read_text(errors="replace"))
    try:   # values from a manifest of another writer may not be numbers
        if directives and "maxnreg" in directives:
            ev.add("cubin.maxnreg", int(directives["maxnreg"]), f"{arch}/kernel.ptx",
                   f".maxnreg {directives['maxnreg']}")
        if "cubin.threads_per_cta" not in ev and directives and directives.get("reqntid"):
            t = directives["reqntid"]
            n = math.prod(int(x) for x in t) if isinstance(t, list) else int(t)
            ev.add("cubin.threads_per_cta", n, f"{arch}/kernel.ptx", f".reqntid {t}")
    except (TypeError, ValueError):
        ev.notes.append(f"{arch}: PTX directives in the manifest are not numbers: ignored")

    if arch is not None and "cubin.threads_per_cta" in ev and "cubin.registers" in ev:
        per_sm, why = ctas_per_sm(ev, arch)       # the one estimate; the rest read the fact
        if per_sm is not None:
            ev.add("cubin.resident_ctas", per_sm, f"{arch}/resource-usage.txt + elf-info", why)

    sass, _ = read("sass", "SASS instruction mix", lambda p: parse_sass(p.read_text(errors="replace")))
    f = _pick(sass, symbol, function)
    if f is not None:
        _sass_facts(ev, f, arch, folder.path / arch / _role_file("sass"))
    elif sass is not None:
        ev.missing("SASS instruction mix", f"{arch}/kernel.sass has no function for the kernel")

    _grid_facts(folder, ev, module, arch)
    collect_launch(folder, ev, arch)
    return ev


def _blank(p: Path) -> bool:
    return p.stat().st_size <= 4096 and not p.read_bytes().strip()


def _parse_tileir(folder: CaptureFolder, ev: Evidence):
    """The -g text (source locations), else the plain text: a corrupt kernel.loc.tileir falls back to
    an intact kernel.tileir, and the diagnosis says so."""
    failed: list[str] = []
    for role in ("tileir_loc", "tileir"):
        p = folder.file(role)
        if p is None:
            continue
        try:
            module = parse_tileir(p.read_text(errors="replace"), path=str(p))
        except Exception as e:   # a corrupt file is reported, never a crash of the diagnosis
            failed.append(f"{p.name}: {e.one_line() if isinstance(e, CutileDiagError) else f'{type(e).__name__}: {e}'}")
            continue
        if failed:
            ev.notes.append(f"{failed[0]} — read {p.name} instead")
            ev.missing("Python source lines of IR ops", f"{failed[0]}", "re-capture the kernel")
        return module
    ev.missing("TileIR structure (hints, gathers, loops, mma dtypes)",
               "; ".join(failed) or f"{folder.path}: capture has no TileIR text", "re-capture the kernel")
    return None


def _role_file(role: str) -> str:
    return TARGET_FILES[role]


def _remark_facts(ev: Evidence, remarks, rpath: Path, symbol: str | None, function: str | None) -> None:
    rname = rpath.name
    mine = [r for r in remarks if not r.function or r.function in (symbol, function)
            or (function and str(r.function).startswith(function + "_K"))]
    ev.add("remarks.available", True, f"{rpath.parent.name}/{rname}", f"{len(mine)} distinct remarks")

    def sites(rs):
        out = []
        for r in rs:
            src, py = _remark_source(r, rname)
            out.append(Site(src, _remark_detail(r), file=str(rpath), python=py, op=r.name))
        return out

    def add(key, rs, what):
        s = sites(rs)
        src = s[0].source if s else f"{rpath.parent.name}/{rname}"
        ev.add(key, len(rs), src + (f" +{len(rs) - 1}" if len(rs) > 1 else ""),
               f"{len(rs)} {what}" if rs else f"no {what}", s)

    loads = [r for r in mine if r.name == "RemarkMemoryLoadInstructionSelected"]
    add("remarks.tma_loads", [r for r in loads if "TMA" in (r.instruction or "")], "loads lowered to TMA")
    add("remarks.ldgsts_loads", [r for r in loads if "Ldgsts" in (r.instruction or "")], "cp.async loads")
    add("remarks.global_loads", [r for r in loads if "TMA" not in (r.instruction or "")
                                 and "Ldgsts" not in (r.instruction or "")], "plain global loads")
    add("remarks.tma_stores", [r for r in mine if r.is_tma_store], "stores lowered to TMA")
    lf = [r for r in mine if r.name == "RemarkMemoryTmaLoadFailed"]
    sf = [r for r in mine if r.name == "RemarkMemoryTmaStoreFailed"]
    add("remarks.tma_load_failures", lf, "TMA load failures")
    add("remarks.tma_store_failures", sf, "TMA store failures")
    reasons = list(dict.fromkeys(x for r in lf + sf for x in r.reasons))
    ev.add("remarks.tma_failure_reasons", reasons, f"{rpath.parent.name}/{rname}",
           "; ".join(reasons) or "none", sites(lf + sf))
    add("remarks.fma_fallback", [r for r in mine if r.is_fma_fallback], "mma ops falling back to FMA")
    tc = [r for r in mine if r.is_tensor_core]
    add("remarks.tensor_core_mma", tc, "mma ops on tensor cores")
    ctas = [r.num_ctas for r in tc if r.num_ctas]
    if ctas:
        ev.add("remarks.mma_num_ctas", max(ctas), sites(tc)[0].source, f"NumCTAs {max(ctas)}")
    _schedule_remark_facts(ev, mine, sites, add, f"{rpath.parent.name}/{rname}")


def _schedule_remark_facts(ev: Evidence, mine, sites, add, where: str) -> None:
    """Remarks beyond TMA/MMA: TMA box shapes (tile size), hints tileiras ignored, loop
    pipelining and schedules (II, op counts), shared memory, spills — each fact quotes them."""
    boxed = [r for r in mine if r.shape and (r.is_tma_load or r.is_tma_store)]
    if boxed:
        ev.add("remarks.tma_boxes", [list(r.shape) for r in boxed], sites(boxed)[0].source,
               "TMA boxes: " + ", ".join("x".join(map(str, r.shape)) for r in boxed), sites(boxed))
    add("remarks.hint_out_of_range", [r for r in mine if r.is_hint_out_of_range], "hints out of range (ignored)")
    add("remarks.register_spills", [r for r in mine if r.is_register_spill], "spill / local-memory remarks")
    piped = [r for r in mine if r.is_loop_pipelined]
    unpiped = [r for r in mine if r.is_loop_not_pipelined]
    sched = [r for r in mine if r.is_schedule]
    if not (piped or unpiped or sched or any(r.smem_bytes is not None for r in mine)):
        ev.missing("loop schedule (II, pipeline stages)", "this tileiras emits no schedule remarks",
                   "a newer tileiras prints II / NumOps with --remarks=all")
        return
    add("remarks.pipelined_loops", piped, "software-pipelined loops")
    add("remarks.unpipelined_loops", unpiped, "loops not pipelined / unroll disabled")
    stages = [r.pipeline_stages for r in piped if r.pipeline_stages]
    if stages:
        r = min((r for r in piped if r.pipeline_stages), key=lambda r: r.pipeline_stages)
        ev.add("remarks.pipeline_stages", min(stages), sites([r])[0].source, r.message or f"{min(stages)} stages",
               sites([r]))
    if sched:
        worst = max(sched, key=lambda r: r.initiation_interval)
        s = sites([worst])
        ev.add("remarks.max_initiation_interval", worst.initiation_interval, s[0].source,
               f"II {worst.initiation_interval}" + (f", {worst.num_ops} ops" if worst.num_ops else ""), s)
        if worst.num_ops is not None:
            ev.add("remarks.loop_ops", worst.num_ops, s[0].source, f"NumOps of the loop with II {worst.initiation_interval}", s)
    smem = [r for r in mine if r.smem_bytes is not None]
    if smem:
        ev.add("remarks.smem_bytes", max(r.smem_bytes for r in smem), sites(smem)[0].source,
               smem[0].message or "", sites(smem))


def _sass_facts(ev: Evidence, f, arch: str, path: Path) -> None:
    src = str(path)
    top = ", ".join(f"{n} {op}" for op, n in f.opcodes.most_common(6))

    def add(key, value, detail):
        ev.add(key, int(value), f"sass: {value} {detail}" if value else "sass", detail if value else f"no {detail}",
               [Site(f"sass: {value} {detail}", f"{f.instructions} instructions; top: {top}", file=src)])
    add("sass.instructions", f.instructions, "instructions")
    add("sass.ffma", f.opcodes.get("FFMA", 0), "FFMA")
    fp = f.classes.get("fp32", 0) + f.classes.get("ffma", 0)
    fp_detail = ", ".join(f"{f.opcodes[o]} {o}" for o in ("FADD", "FMUL", "FFMA") if f.opcodes.get(o))
    add("sass.fp32_ops", fp, f"FP32 ops ({fp_detail})" if fp_detail else "FP32 ops")
    tcd = ", ".join(f"{n} {k}" for k, n in f.mma_forms.most_common(3)) or "tensor-core MMA"
    add("sass.tensor_core", f.classes.get("tensor_core", 0), tcd)
    add("sass.tma_ops", f.classes.get("tma", 0), "TMA instructions")
    add("sass.global_loads", f.classes.get("global_load", 0), "global loads")
    add("sass.global_stores", f.classes.get("global_store", 0), "global stores")
    nl = sum(n for w, n in f.global_load_widths.items() if w < 128)
    ns = sum(n for w, n in f.global_store_widths.items() if w < 128)
    add("sass.narrow_global_loads", nl, "LDG narrower than 128 bit")
    add("sass.narrow_global_stores", ns, "STG narrower than 128 bit")
    add("sass.local_ops", f.classes.get("local", 0), "LDL/STL")
    add("sass.mufu_ex2", f.mufu.get("EX2", 0), "MUFU.EX2")
    add("sass.mufu_rcp", f.mufu.get("RCP", 0), "MUFU.RCP")


def _param_of_args(spec: dict, entry) -> dict[str, tuple[str, str, int]]:
    """TileIR arg name -> (param, role, dim) using the flattening rule (array: base, shapes, strides)."""
    out: dict[str, tuple[str, str, int]] = {}
    names = [a.name for a in entry.args]
    i = 0
    for pname, text in spec.items():
        try:
            s = parse_spec(text, where=pname)
        except CutileDiagError:
            return {}
        if isinstance(s, ArraySpec):
            if i >= len(names):
                return {}
            out[names[i]] = (pname, "base", -1)
            for d in range(s.ndim):
                if i + 1 + d < len(names):
                    out[names[i + 1 + d]] = (pname, "shape", d)
            i += 1 + 2 * s.ndim
        elif isinstance(s, ScalarSpec):
            i += 1
    return out if i == len(names) else {}


def _base_arg(module_entry, name: str) -> str | None:
    """Follow assume/reshape/broadcast/make_*_view/offset back to the pointer argument."""
    defs = {}
    for op in module_entry.walk():
        for r in op.results:
            defs[r] = op
    args = {a.name for a in module_entry.args}
    seen = set()
    while name not in args:
        if name in seen:
            return None
        seen.add(name)
        op = defs.get(name)
        if op is None or not op.operands:
            return None
        if op.name not in ("assume", "reshape", "broadcast", "make_tensor_view", "make_partition_view",
                           "offset", "make_gather_scatter_view", "make_strided_view"):
            return None
        name = op.operands[0]
    return name


def _grid_facts(folder: CaptureFolder, ev: Evidence, module, arch: str | None) -> None:
    """Output tiles from the captured shapes, SM count from the arch preset, waves and tail."""
    if arch is not None:
        name = ARCH_PRESETS.get(arch) or ARCH_PRESETS.get(re.sub(r"[a-z]$", "", arch))
        if name:
            try:
                from ..roofline.device import preset
                dev = preset(name)
                ev.add("device.sm_count", int(dev.sm_count.value), f"device preset {name} (no GPU)",
                       f"{dev.name}: {dev.sm_count.value} SMs — assumed for {arch}")
                ev.add("device.name", dev.name, f"device preset {name} (no GPU)", f"assumed for {arch}")
            except Exception as e:   # the device model is someone else's module: degrade, don't fail
                ev.missing("grid size vs SMs", f"no device preset for {arch}: {e}")
        else:
            ev.missing("grid size vs SMs", f"no device preset for {arch}", "diagnose on a GPU")
        warn = _tile_warnings(ev, arch)
        ev.add("static.tile_arch_warnings", warn, f"knob catalog limits for {arch}", "; ".join(warn) or "none")
    spec = (folder.manifest.get("signature") or {}).get("spec") or {}
    if module is None or not spec:
        ev.missing("grid size vs SMs", "no argument shapes in the capture manifest" if module is not None
                   else "no TileIR")
        return
    entry = module.entries[0]
    sym = ev.context.get("symbol")
    for e in module.entries:
        if e.symbol == sym:
            entry = e
    pmap = _param_of_args(spec, entry)
    if not pmap:
        ev.missing("grid size vs SMs", "cannot map the TileIR arguments to the captured parameters")
        return
    best = None
    for op in entry.walk():
        if op.name not in STORES or not op.operands:
            continue
        if op.name == "store_view_tko":
            view = op.operands[1] if len(op.operands) > 1 else None
            vt = op.operand_types[1] if len(op.operand_types) > 1 else None
            tile = vt.tile_shape if vt is not None else None
        else:
            view = op.operands[0]
            t = op.operand_types[0] if op.operand_types else None
            tile = t.shape if t is not None else None
        base = _base_arg(entry, view) if view else None
        if not base or base not in pmap or not tile:
            continue
        pname = pmap[base][0]
        s = parse_spec(spec[pname], where=pname)
        if not isinstance(s, ArraySpec) or not s.concrete:
            ev.missing("grid size vs SMs", f"the shape of {pname} is symbolic ({spec[pname]})")
            return
        shape = s.shape[-len(tile):] if len(tile) <= len(s.shape) else s.shape
        lead = math.prod(s.shape[:-len(tile)]) if len(tile) < len(s.shape) else 1
        tiles = lead * math.prod(math.ceil(d / t) for d, t in zip(shape, tile) if t)
        if best is None or tiles > best[0]:
            best = (tiles, op, pname, s, tile)
    if best is None:
        ev.missing("grid size vs SMs", "no store whose array shape is known")
        return
    tiles, op, pname, s, tile = best
    ir_name = Path(module.path).name if module.path else "kernel.tileir"
    py = op.source.short if op.source else None
    ev.add("static.output_tiles", int(tiles), f"manifest spec {pname}={s.text()} / tile {tile}",
           f"{tiles} tiles of {'x'.join(map(str, tile))} over {pname} {list(s.shape)}",
           [Site(f"{ir_name}:{op.line}", op.text, file=module.path, line=op.line, python=py, op=op.name)])
    add_waves(ev, "static", int(tiles), "tiles", arch)


def resident_ctas(folder: CaptureFolder | str | Path, arch: str = "sm_90") -> tuple[int | None, str]:
    """Resident CTAs per SM of a captured kernel (its cubin's threads, registers and shared memory
    against the arch's per-SM limits), and what limits them."""
    return resident(collect_capture(folder, arch=arch), arch)


def _tile_warnings(ev: Evidence, arch: str) -> list[str]:
    out = []
    prefs = _MMA_PREFS.get(re.sub(r"[a-z]$", "", arch))
    for m, n, k in ev.value("ir.mma_shapes") or []:
        if prefs is None or None in (m, n, k):
            continue
        lo, hi, ks = prefs
        if min(m, n) < lo:
            out.append(f"mma {m}x{n}x{k}: M/N below {lo} on {arch}")
        if max(m, n) > hi:
            out.append(f"mma {m}x{n}x{k}: M/N above {hi} on {arch}")
        if k not in ks:
            out.append(f"mma {m}x{n}x{k}: K not in {list(ks)} on {arch}")
    return out
