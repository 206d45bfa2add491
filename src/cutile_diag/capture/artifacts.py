"""From bytecode (or a prebuilt cubin) to a complete capture folder.

Per kernel: TileIR text (plain and ``-g``) from the bytecode; per target arch: the cubin
(compiled with cuTile's own tileiras flags, or the JIT's / cache's cubin as found), remarks
YAML, SASS, resource usage, ELF attributes, the embedded PTX and a ``ptxas -v`` re-assembly
of it for exact spill bytes and performance advisories.  Everything is written into a
staging folder and renamed into place, so an interrupted capture never leaves a
half-written folder that looks complete.  A target whose artifacts could not all be made
(a tool crashed, no embedded PTX) is kept but marked: ``targets[arch].missing`` and the
top-level ``incomplete`` list, so it never passes for a complete capture.
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
from ..errors import CutileDiagError, ToolFailedError, ToolNotFoundError, UsageError
from ..output import dumps, write_atomic
from ..toolchain import require_tools, run_tool, tool_versions
from . import cubin as cubin_mod
from .manifest import KERNEL_FILES, MANIFEST, SCHEMA, TARGET_FILES, CaptureFolder, load_capture, sha256_file
from ..ir_parsers.remarks import parse_remarks, summarize
from ..ir_parsers.resources import parse_elf_attributes, parse_ptxas_verbose, parse_resource_usage
from ..ir_parsers.sass import parse_sass
from ..ir_parsers.tileir import parse_hints, parse_tileir

BYTECODE_MAGIC = b"\x7fTileIR\x00"
DEFAULT_TIMEOUT = 600.0      # seconds per tool run (tileiras per arch included)


class IncompleteCaptureError(CutileDiagError):
    """Captures were written but lack required artifacts (exit 1: not bad input)."""
    exit_code = 1


def incomplete_error(bad) -> IncompleteCaptureError:
    """The error for the captures (``CaptureFolder``s, not empty) that lack required artifacts."""
    c = bad[0]
    why = next((f"{a}: {t['errors'][0]}" for a, t in c.manifest["targets"].items() if t.get("errors")), "")
    more = f" and {len(bad) - 1} more capture(s)" if len(bad) > 1 else ""
    return IncompleteCaptureError(
        f"capture incomplete: {c.name} lacks {', '.join(c.manifest['incomplete'])}"
        + (f" ({why})" if why else "") + more,
        hint="listed under 'incomplete' in manifest.json; --allow-incomplete accepts it")


class TileirasFailed(ToolFailedError):
    """tileiras failed for one target arch (the AOT layer names the kernel and arch)."""

    def __init__(self, arch: str, cause: ToolFailedError):
        super().__init__(cause.message, hint=cause.hint)
        self.arch = arch


def check_name(name: str) -> str:
    """A capture name is one plain folder name inside --out: no path separators (a/b or ../x
    would escape or need folders we never create) and no leading dot (staging folders are
    dot-names)."""
    bad = (not name or name.startswith(".") or len(name) > 200
           or any(c in name for c in "/\\\0") or not name.isprintable())
    if bad:
        raise UsageError(f"bad capture name {name!r}",
                         hint="one folder name: no '/', no leading '.', printable characters")
    return name


def check_out_dir(out: str | Path) -> Path:
    """Fail before any work when --out cannot be a folder (an existing file, a file on its path,
    no write permission), instead of an OSError after minutes of compiling."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise UsageError(f"output folder {p}: exists and is not a folder")
    q = p
    while not q.exists() and q != q.parent:
        q = q.parent
    if q.exists() and not q.is_dir():
        raise UsageError(f"output folder {p}: {q} is a file, not a folder")
    if q.exists() and not os.access(q, os.W_OK | os.X_OK):
        raise UsageError(f"output folder {p}: {q} is not writable")
    return p


def make_dir(p: Path) -> Path:
    """Create ``p`` (and parents) after ``check_out_dir``; an OS failure is one UsageError line."""
    check_out_dir(p)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"output folder {p}: cannot create it ({e.strerror or e})") from None
    return p


def _swap_into(src: Path, final: Path) -> None:
    """Rename ``src`` to ``final``; an existing ``final`` is replaced only once ``src`` is complete."""
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.rename(old)
        src.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        src.rename(final)


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
    """The "major.minor" of a TileIR bytecode blob, or None when it lacks the magic."""
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
                           "ndim": p.ndim,
                           "index_dtype": str(p.index_dtype).split("'")[1] if "'" in str(p.index_dtype) else str(p.index_dtype),
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
            facts["sass"] = {"instructions": f.instructions, "digest": f.digest,
                             "classes": dict(sorted(f.classes.items())),
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
                    info_source: str = "given", remarks_expected: bool = True,
                    tileiras_timeout: float = DEFAULT_TIMEOUT) -> dict:
    """One arch folder.  ``entry["missing"]`` lists the required files that could not be made
    (with the reason in ``errors``); remarks are not required when the source cannot have them."""
    d = stage / arch
    d.mkdir(parents=True, exist_ok=True)
    entry: dict = {"opt_level": opt_level, "errors": [], "missing": []}

    def fail(role: str, why: str) -> None:
        entry["errors"].append(why)
        entry["missing"].append(TARGET_FILES[role])

    cubin_path = d / TARGET_FILES["cubin"]
    remarks_path = d / TARGET_FILES["remarks"]
    if cubin is None:
        assert bytecode_file is not None
        flags = tileiras_flags(arch, opt_level, str(remarks_path))
        try:
            run_tool("tileiras", [str(bytecode_file), "-o", str(cubin_path), *flags], timeout=tileiras_timeout)
        except ToolFailedError as e:
            raise TileirasFailed(arch, e) from None
        entry["tileiras_flags"] = [f if not f.startswith("--remarks-output-file=") else
                                   "--remarks-output-file=remarks.yaml" for f in flags]
        entry["cubin_source"] = "tileiras"
    else:
        cubin_path.write_bytes(cubin)
        if remarks_text is not None:     # "" is a real, empty remarks stream (a pure gather kernel)
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
            fail(role, f"cuobjdump {args[0]}: {e.one_line()}")
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
                                         str(Path(tmp) / "reassembled.cubin")], timeout=timeout)
                (d / TARGET_FILES["ptxas"]).write_text(res.stderr + res.stdout)
            except (ToolFailedError, ToolNotFoundError) as e:
                fail("ptxas", f"ptxas -v: {e.one_line()}")
    else:
        fail("ptx", "cubin has no embedded PTX (.nv_debug_ptx_txt)")
        fail("ptxas", "no PTX to re-assemble: spill bytes unknown")
    if remarks_expected and not remarks_path.exists():
        fail("remarks", "no remarks for this target")
    for k in ("errors", "missing"):
        if not entry[k]:
            del entry[k]
    return entry


def _op_hints(stage: Path) -> list[dict]:
    """Memory ops carrying latency/allow_tma hints, with their TileIR and Python lines."""
    import linecache
    p = stage / KERNEL_FILES["tileir_loc"]
    if not p.exists():
        p = stage / KERNEL_FILES["tileir"]
    if not p.exists():
        return []
    try:
        mod = parse_tileir(p.read_text(errors="replace"), path=str(p))
    except CutileDiagError:      # the facts stay in the text; a parser gap is not a failed capture
        return []
    out = []
    for e in mod.entries:
        for op in e.walk():
            if not op.hints:
                continue
            src = op.source
            code = linecache.getline(src.file, src.line).strip() if src else ""
            out.append({"op": op.name, "tileir": f"{p.name}:{op.line}",
                        "source": f"{src.file}:{src.line}" if src else None,
                        "code": code or None, "hints": op.hints})
    return out


def write_capture(out_root: Path, info: KernelInfo, *, archs: list[str],
                  bytecode: bytes | None = None, tileir_text: str | None = None,
                  cubins: dict[str, bytes] | None = None, remarks: dict[str, str | None] | None = None,
                  timeout: float = DEFAULT_TIMEOUT, tileiras_timeout: float | None = None,
                  unavailable: dict[str, str] | None = None) -> CaptureFolder:
    """Write one kernel's capture folder ``out_root/info.name`` atomically.

    ``timeout`` bounds each tool run; ``tileiras_timeout`` (default: the same) each per-arch
    compile.  ``remarks[arch] = None`` for a given cubin means its source never had remarks;
    ``unavailable`` maps files absent by nature of the source (a cache blob has no bytecode)
    to the reason, so they are not mistaken for failures."""
    # fail before writing anything when a tool is missing (the error names its pip package)
    require_tools(*(("tileirdisasm", "tileiras") if bytecode is not None else ()), "cuobjdump", "ptxas")
    check_name(info.name)
    out_root = make_dir(Path(out_root))
    final = out_root / info.name
    unavailable = dict(unavailable or {})
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
        incomplete = [] if tileir_text is not None else [KERNEL_FILES["tileir"]]
        targets = {}
        for arch in archs:
            given = arch in (cubins or {})
            # opt level: known for AOT/run captures; a cache blob does not record it
            opt = info.opt_levels.get(arch, None if given else 3)
            rtext = (remarks or {}).get(arch)
            no_remarks = given and rtext is None
            if no_remarks:
                unavailable[f"{arch}/{TARGET_FILES['remarks']}"] = \
                    "the cuTile cache entry stores no remarks (written by tileiras < 13.4)"
            targets[arch] = _compile_target(stage, arch, opt, bytecode_file=bc_file,
                                            cubin=(cubins or {}).get(arch),
                                            remarks_text=rtext, timeout=timeout,
                                            tileiras_timeout=tileiras_timeout or timeout,
                                            info_source={"run": "jit", "cache": "cache"}.get(info.mode, "given"),
                                            remarks_expected=not no_remarks)
            targets[arch]["facts"] = _target_facts(stage, arch, symbol)
            incomplete += [f"{arch}/{f}" for f in targets[arch].get("missing", [])]
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
            "hints": {"entry": _entry_hints(tileir_text), "requested": info.requested_hints,
                      "ops": _op_hints(stage)},
            "targets": targets,
            # required files that could not be made ([] = complete); why: targets[arch].errors
            "incomplete": incomplete,
            # files this kind of source cannot provide, with the reason (not failures)
            "unavailable": unavailable,
            "tools": tool_versions(),
            "files": files,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "cutile_diag": __version__,
            **({"extra": info.extra} if info.extra else {}),
        }
        write_atomic(stage / MANIFEST, dumps(manifest))
        _swap_into(stage, final)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return load_capture(final)


class CaptureSet:
    """Several kernels written all-or-nothing (run mode, cache mining): each capture is built
    in a staging folder beside ``out`` and the set is moved into ``out`` only when every
    kernel succeeded, so a failure part-way never leaves a partial set that looks complete."""

    def __init__(self, out: str | Path):
        self.out = Path(out)
        self.names: list[str] = []
        self.stage: Path | None = None

    def __enter__(self) -> "CaptureSet":
        check_out_dir(self.out)
        # beside ``out`` when it does not exist yet (a failure then leaves no empty ``out``);
        # inside it otherwise (its parent need not be writable)
        out = self.out.resolve()
        where = out if out.is_dir() else make_dir(out.parent)
        self.stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=where))
        self.stage.chmod(0o755)
        return self

    def write(self, info: KernelInfo, **kw) -> CaptureFolder:
        """Write one kernel's capture into the staging folder and remember its name for ``commit``."""
        assert self.stage is not None
        c = write_capture(self.stage, info, **kw)
        self.names.append(c.path.name)
        return c

    def commit(self) -> list[CaptureFolder]:
        """Move the staged captures into ``out``; returns them at their final paths."""
        assert self.stage is not None
        if not self.names:
            return []
        if not self.out.exists():
            self.stage.rename(self.out)          # one rename: the whole set appears at once
            self.stage = None
        else:
            for n in self.names:
                _swap_into(self.stage / n, self.out / n)
        return [load_capture(self.out / n) for n in self.names]

    def __exit__(self, *exc) -> None:
        if self.stage is not None and self.stage.exists():
            shutil.rmtree(self.stage, ignore_errors=True)


def unique_name(out_root: Path, base: str, taken: set[str]) -> str:
    """``base``, or ``base-2``, ``base-3``... the first not in ``taken`` (which it joins)."""
    name, k = base, 2
    while name in taken:
        name, k = f"{base}-{k}", k + 1
    taken.add(name)
    return name
