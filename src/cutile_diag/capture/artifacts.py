"""From bytecode (or a prebuilt cubin) to a complete capture folder.

Per kernel: TileIR text (plain and ``-g``) from the bytecode; per target arch: the cubin
(compiled with cuTile's own tileiras flags, or the JIT's / cache's cubin as found), remarks
YAML, SASS, resource usage, ELF attributes, the embedded PTX and a ``ptxas -v`` re-assembly
of it for exact spill bytes and performance advisories.  Everything is written into a
staging folder and renamed into place, so an interrupted capture never leaves a
half-written folder that looks complete.
"""
from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..errors import ToolFailedError, ToolNotFoundError
from ..output import dumps, write_atomic
from ..toolchain import run_tool, tool_versions
from . import cubin as cubin_mod
from .manifest import KERNEL_FILES, MANIFEST, SCHEMA, TARGET_FILES, CaptureFolder, load_capture, sha256_file

BYTECODE_MAGIC = b"\x7fTileIR\x00"


@dataclass
class KernelInfo:
    """What we know about the kernel behind a capture, whatever the capture mode."""
    name: str                               # folder name / display name
    function: str | None = None             # Python function name
    symbol: str | None = None               # mangled entry symbol
    mode: str = "aot"                       # aot | run | cache
    ref: str | None = None                  # file.py::name as given
    source_file: str | None = None
    source_line: int | None = None
    spec: dict[str, str] = field(default_factory=dict)            # param -> spec text
    requested_hints: dict[str, object] = field(default_factory=dict)
    opt_levels: dict[str, int] = field(default_factory=dict)       # arch -> -O level
    extra: dict[str, object] = field(default_factory=dict)


def bytecode_version(bc: bytes) -> str | None:
    if bc[:8] != BYTECODE_MAGIC or len(bc) < 10:
        return None
    return f"{bc[8]}.{bc[9]}"


def tileiras_flags(arch: str, opt_level: int, remarks_file: str | None) -> list[str]:
    """The flags cuTile's compile_cubin passes (non-debug build, disk cache on)."""
    flags = ["--gpu-name", arch, f"-O{opt_level}", "--lineinfo"]
    if remarks_file is not None:
        flags += ["--remark-format=yaml", "--remarks=all", f"--remarks-output-file={remarks_file}"]
    return flags


def decode_symbol(symbol: str | None) -> dict:
    """Constants and array constraints decoded from a mangled symbol (cuTile's own demangler)."""
    if not symbol:
        return {}
    try:
        from cuda.tile.compilation import ArrayConstraint, ConstantConstraint, demangle_kernel_name
        fn, sig = demangle_kernel_name(symbol)
    except Exception as e:  # foreign or future symbol spelling
        return {"error": f"cannot demangle: {e}"}
    params = []
    for p in sig.parameters:
        if isinstance(p, ConstantConstraint):
            params.append({"kind": "constant", "value": p.value})
        elif isinstance(p, ArrayConstraint):
            params.append({"kind": "array", "dtype": str(p.dtype).split("'")[1] if "'" in str(p.dtype) else str(p.dtype),
                           "ndim": p.ndim, "index_dtype": str(p.index_dtype).split("'")[1] if "'" in str(p.index_dtype) else str(p.index_dtype),
                           "shape_divisible_by": list(p.shape_divisible_by),
                           "stride_divisible_by": list(p.stride_divisible_by),
                           "stride_constant": list(p.stride_constant),
                           "base_addr_divisible_by": p.base_addr_divisible_by})
        else:
            params.append({"kind": type(p).__name__, "repr": repr(p)})
    return {"function": fn, "params": params,
            "constants": [p["value"] for p in params if p["kind"] == "constant"]}


def _entry_hints(tileir_text: str | None) -> dict:
    if not tileir_text:
        return {}
    from ..ir_parsers.tileir import parse_hints
    m = re.search(r"optimization_hints=(<.*?>)\s*\{\s*$", tileir_text, re.M)
    if not m:
        return {}
    try:
        return parse_hints(m.group(1))
    except Exception:
        return {}


def _first_symbol(tileir_text: str | None) -> str | None:
    m = re.search(r"^entry @(\S+?)\(", tileir_text or "", re.M)
    return m.group(1) if m else None


def _target_facts(folder: Path, arch: str, symbol: str | None) -> dict:
    from ..ir_parsers.remarks import parse_remarks, summarize
    from ..ir_parsers.resources import parse_elf_attributes, parse_ptxas_verbose, parse_resource_usage
    from ..ir_parsers.sass import parse_sass
    d = folder / arch
    facts: dict = {}

    def pick(table: dict):
        if not table:
            return None
        if symbol and symbol in table:
            return table[symbol]
        return next(iter(table.values()))

    p = d / TARGET_FILES["resources"]
    if p.exists():
        r = pick(parse_resource_usage(p.read_text()))
        if r:
            facts.update(registers=r.registers, stack=r.stack, shared=r.shared, local=r.local)
    p = d / TARGET_FILES["elf_info"]
    if p.exists():
        a = pick(parse_elf_attributes(p.read_text()))
        if a:
            facts.update(threads_per_cta=list(a.threads_per_cta) if a.threads_per_cta else None,
                         cluster_shape=list(a.cluster_shape) if a.cluster_shape else [1, 1, 1],
                         max_registers=a.max_registers, reg_reconfig=a.reg_reconfig,
                         language=a.language)
    p = d / TARGET_FILES["ptxas"]
    if p.exists():
        rep = pick(parse_ptxas_verbose(p.read_text()))
        if rep:
            facts.update(spill_stores=rep.spill_stores, spill_loads=rep.spill_loads,
                         stack_frame=rep.stack_frame, ptxas_registers=rep.registers,
                         ptxas_advisories=rep.advisories)
    p = d / TARGET_FILES["sass"]
    if p.exists():
        f = pick(parse_sass(p.read_text()))
        if f:
            facts["sass"] = {"instructions": f.instructions, "classes": dict(sorted(f.classes.items())),
                             "mma_forms": dict(f.mma_forms), "mufu": dict(f.mufu)}
    p = d / TARGET_FILES["remarks"]
    if p.exists():
        try:
            s = summarize(parse_remarks(p.read_text()))
            facts["remarks"] = {"tma_loads": s.tma_loads, "global_loads": s.global_loads,
                                "ldgsts_loads": s.ldgsts_loads, "tma_stores": s.tma_stores,
                                "tma_failures": s.tma_failures, "tensor_core_mma": s.tensor_core_mma,
                                "tensor_core_kinds": s.tensor_core_kinds, "mma_shapes": s.mma_shapes,
                                "fma_fallbacks": s.fma_fallbacks}
        except Exception as e:   # a remarks file we cannot read is reported, not fatal
            facts["remarks_error"] = str(e)
    return facts


def _compile_target(stage: Path, arch: str, opt_level: int | None, *, bytecode_file: Path | None,
                    cubin: bytes | None, remarks_text: str | None, timeout: float,
                    info_source: str = "given") -> dict:
    d = stage / arch
    d.mkdir(parents=True, exist_ok=True)
    entry: dict = {"opt_level": opt_level, "errors": []}
    cubin_path = d / TARGET_FILES["cubin"]
    remarks_path = d / TARGET_FILES["remarks"]
    if cubin is None:
        assert bytecode_file is not None
        flags = tileiras_flags(arch, opt_level, str(remarks_path))
        run_tool("tileiras", [str(bytecode_file), "-o", str(cubin_path), *flags], timeout=timeout)
        entry["tileiras_flags"] = [f if not f.startswith("--remarks-output-file=") else
                                   "--remarks-output-file=remarks.yaml" for f in flags]
        entry["cubin_source"] = "tileiras"
    else:
        cubin_path.write_bytes(cubin)
        if remarks_text:
            remarks_path.write_text(remarks_text)
        entry["tileiras_flags"] = tileiras_flags(arch, opt_level, "remarks.yaml") if opt_level is not None else None
        entry["cubin_source"] = info_source
    data = cubin_path.read_bytes()
    sections = cubin_mod.read_sections(data, path=str(cubin_path))
    for role, args in (("sass", ["-sass"]), ("resources", ["--dump-resource-usage"])):
        try:
            res = run_tool("cuobjdump", [*args, str(cubin_path)], timeout=timeout)
            (d / TARGET_FILES[role]).write_text(res.stdout)
        except (ToolFailedError, ToolNotFoundError) as e:
            entry["errors"].append(f"cuobjdump {args[0]}: {e.one_line()}")
    # decoded natively: an older cuobjdump can reject a newer cubin's -elf dump
    (d / TARGET_FILES["elf_info"]).write_text(cubin_mod.nv_info_text(sections))
    ptx = cubin_mod.embedded_ptx(sections)
    if ptx:
        ptx_path = d / TARGET_FILES["ptx"]
        ptx_path.write_text(ptx)
        target = cubin_mod.ptx_target(ptx) or arch
        entry["ptx_target"] = target
        entry["ptx_directives"] = cubin_mod.ptx_directives(ptx)
        with tempfile.TemporaryDirectory() as tmp:
            try:
                res = run_tool("ptxas", [f"-arch={target}", "-O3", "-v", str(ptx_path), "-o",
                                         str(Path(tmp) / "reassembled.cubin")], timeout=timeout, check=False)
                (d / TARGET_FILES["ptxas"]).write_text(res.stderr + res.stdout)
                if res.returncode != 0:
                    entry["errors"].append(f"ptxas exited {res.returncode}: "
                                           + (res.stderr.strip().splitlines() or ["?"])[-1])
            except (ToolFailedError, ToolNotFoundError) as e:
                entry["errors"].append(f"ptxas: {e.one_line()}")
    else:
        entry["errors"].append("cubin has no embedded PTX (.nv_debug_ptx_txt); spills unknown")
    if not remarks_path.exists():
        entry["errors"].append("no remarks for this target")
    if not entry["errors"]:
        del entry["errors"]
    return entry


def write_capture(out_root: Path, info: KernelInfo, *, archs: list[str],
                  bytecode: bytes | None = None, tileir_text: str | None = None,
                  cubins: dict[str, bytes] | None = None, remarks: dict[str, str] | None = None,
                  timeout: float = 600.0) -> CaptureFolder:
    """Write one kernel's capture folder ``out_root/info.name`` atomically."""
    from ..toolchain import find_tool
    # fail before writing anything when a tool is missing (the error names its pip package)
    for tool in (("tileirdisasm",) if bytecode is not None else ()) + (("tileiras",) if bytecode is not None else ()) \
            + ("cuobjdump", "ptxas"):
        find_tool(tool)
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    final = out_root / info.name
    stage = Path(tempfile.mkdtemp(prefix=f".{info.name}.", suffix=".partial", dir=out_root))
    stage.chmod(0o755)   # mkdtemp makes it private; a capture is an ordinary folder
    try:
        bc_file = None
        if bytecode is not None:
            bc_file = stage / KERNEL_FILES["bytecode"]
            bc_file.write_bytes(bytecode)
            plain = run_tool("tileirdisasm", [str(bc_file)], timeout=timeout).stdout
            withloc = run_tool("tileirdisasm", ["-g", str(bc_file)], timeout=timeout).stdout
            (stage / KERNEL_FILES["tileir"]).write_text(plain)
            (stage / KERNEL_FILES["tileir_loc"]).write_text(withloc)
            tileir_text = plain
        elif tileir_text is not None:
            (stage / KERNEL_FILES["tileir"]).write_text(tileir_text)
        symbol = info.symbol or _first_symbol(tileir_text)
        targets = {}
        for arch in archs:
            given = arch in (cubins or {})
            # opt level: known for AOT/run captures; a cache blob does not record it
            opt = info.opt_levels.get(arch, None if given else 3)
            targets[arch] = _compile_target(stage, arch, opt, bytecode_file=bc_file,
                                            cubin=(cubins or {}).get(arch),
                                            remarks_text=(remarks or {}).get(arch), timeout=timeout,
                                            info_source={"run": "jit", "cache": "cache"}.get(info.mode, "given"))
            targets[arch]["facts"] = _target_facts(stage, arch, symbol)
        files = {}
        for p in sorted(stage.rglob("*")):
            if p.is_file():
                rel = p.relative_to(stage).as_posix()
                files[rel] = {"sha256": sha256_file(p), "bytes": p.stat().st_size}
        manifest = {
            "schema": SCHEMA,
            "kernel": {"name": info.name, "function": info.function, "symbol": symbol,
                       "mode": info.mode, "ref": info.ref, "source": info.source_file,
                       "line": info.source_line},
            "signature": {"spec": info.spec, "decoded": decode_symbol(symbol)},
            "bytecode_version": bytecode_version(bytecode) if bytecode else None,
            "hints": {"entry": _entry_hints(tileir_text), "requested": info.requested_hints},
            "targets": targets,
            "tools": tool_versions(),
            "files": files,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "cutile_diag": __version__,
            **({"extra": info.extra} if info.extra else {}),
        }
        write_atomic(stage / MANIFEST, dumps(manifest))
        # swap into place: an existing capture of the same name is replaced only once the
        # new one is complete
        if final.exists():
            old = out_root / f".{info.name}.old-{os.getpid()}"
            final.rename(old)
            stage.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            stage.rename(final)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return load_capture(final)


def unique_name(out_root: Path, base: str, taken: set[str]) -> str:
    name, k = base, 2
    while name in taken:
        name, k = f"{base}-{k}", k + 1
    taken.add(name)
    return name
