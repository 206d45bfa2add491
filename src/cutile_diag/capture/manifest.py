"""The capture folder: ``manifest.json`` (schema-versioned) and typed accessors.

Layout of one captured kernel variant::

    <name>/manifest.json
    <name>/kernel.tileirbc            bytecode (absent when mined from a cache blob)
    <name>/kernel.tileir              tileirdisasm text
    <name>/kernel.loc.tileir          tileirdisasm -g text (source locations)
    <name>/<arch>/kernel.cubin, remarks.yaml, kernel.sass, resource-usage.txt,
                  kernel.ptx, ptxas.txt, elf-info.txt
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..errors import ParseError, UsageError
from ..ir_parsers.remarks import parse_remarks
from ..ir_parsers.resources import parse_elf_attributes, parse_ptxas_verbose, parse_resource_usage
from ..ir_parsers.sass import parse_sass
from ..ir_parsers.tileir import parse_tileir

SCHEMA = "cutile-diag.capture/1"
SCHEMA_PREFIX = "cutile-diag.capture/"
MANIFEST = "manifest.json"
INDEX = "index.json"

# role -> file name inside the kernel folder / the arch sub-folder
KERNEL_FILES = {"bytecode": "kernel.tileirbc", "tileir": "kernel.tileir", "tileir_loc": "kernel.loc.tileir"}
TARGET_FILES = {"cubin": "kernel.cubin", "remarks": "remarks.yaml", "sass": "kernel.sass",
                "resources": "resource-usage.txt", "ptx": "kernel.ptx", "ptxas": "ptxas.txt",
                "elf_info": "elf-info.txt"}


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class CaptureFolder:
    """A capture folder and its manifest; ``problems`` lists what made it unreadable or foreign."""
    path: Path
    manifest: dict
    schema_ok: bool = True
    problems: list[str] = field(default_factory=list)

    # --- identity
    @property
    def name(self) -> str:
        """The kernel name the manifest records, else the folder's name."""
        return self.manifest.get("kernel", {}).get("name") or self.path.name

    @property
    def symbol(self) -> str | None:
        """The kernel's mangled symbol, when the manifest has it."""
        return self.manifest.get("kernel", {}).get("symbol")

    @property
    def targets(self) -> list[str]:
        """The compiled architectures, sorted."""
        return sorted(self.manifest.get("targets", {}))

    def target(self, arch: str | None = None) -> dict:
        """The manifest's entry of ``arch`` (default: ``default_arch``); UsageError when it was not compiled."""
        t = self.manifest.get("targets", {})
        if not t:
            raise UsageError(f"{self.path}: capture has no compiled target")
        if arch is None:
            arch = self.default_arch
        if arch not in t:
            raise UsageError(f"{self.path}: no target {arch}", hint="captured: " + ", ".join(sorted(t)))
        return t[arch]

    @property
    def default_arch(self) -> str | None:
        """sm_90 when captured, else the first target (None without targets)."""
        t = self.targets
        if not t:
            return None
        return "sm_90" if "sm_90" in t else t[0]

    # --- files
    def file(self, role: str, arch: str | None = None) -> Path | None:
        """The path of a kernel-level (``KERNEL_FILES``) or per-arch (``TARGET_FILES``) role, or None
        when that file does not exist."""
        if role in KERNEL_FILES:
            p = self.path / KERNEL_FILES[role]
        else:
            a = arch or self.default_arch
            if a is None:
                return None
            p = self.path / a / TARGET_FILES[role]
        return p if p.exists() else None

    def read(self, role: str, arch: str | None = None) -> str | None:
        """The text of a role's file, or None when it does not exist."""
        p = self.file(role, arch)
        return p.read_text(errors="replace") if p else None

    def tileir_text(self) -> str | None:
        """The tileirdisasm text (no source locations), or None."""
        return self.read("tileir")

    def tileir_loc_text(self) -> str | None:
        """The ``tileirdisasm -g`` text (with source locations), or None."""
        return self.read("tileir_loc")

    @cached_property
    def module(self):
        """Parsed TileIR, with source locations when the -g text exists."""
        p = self.file("tileir_loc") or self.file("tileir")
        if p is None:
            raise UsageError(f"{self.path}: capture has no TileIR text")
        return parse_tileir(p.read_text(errors="replace"), path=str(p))

    def remarks(self, arch: str | None = None):
        """The parsed remarks YAML of ``arch``, or None."""
        p = self.file("remarks", arch)
        return parse_remarks(p.read_text(errors="replace"), path=str(p)) if p else None

    def sass(self, arch: str | None = None):
        """The parsed SASS of ``arch`` (``{function: SassFunction}``), or None."""
        t = self.read("sass", arch)
        return parse_sass(t) if t is not None else None

    def resources(self, arch: str | None = None):
        """The parsed ``cuobjdump -res-usage`` report of ``arch``, or None."""
        p = self.file("resources", arch)
        return parse_resource_usage(p.read_text(), path=str(p)) if p else None

    def ptxas(self, arch: str | None = None):
        """The parsed ``ptxas -v`` output of ``arch``, or None."""
        t = self.read("ptxas", arch)
        return parse_ptxas_verbose(t) if t is not None else None

    def attributes(self, arch: str | None = None):
        """The parsed ELF attributes (``.nv.info``) of ``arch``, or None."""
        t = self.read("elf_info", arch)
        return parse_elf_attributes(t) if t is not None else None

    def facts(self, arch: str | None = None) -> dict:
        """The cubin-side facts recorded in the manifest for one target."""
        return self.target(arch).get("facts", {})


def load_capture(path: str | Path) -> CaptureFolder:
    """Open a capture folder (the kernel folder, or an output root holding exactly one)."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{p}: no such capture folder")
    if p.is_file():
        if p.name == MANIFEST:
            p = p.parent
        else:
            raise UsageError(f"{p}: not a capture folder (expected a directory with {MANIFEST})")
    m = p / MANIFEST
    if not m.exists():
        subs = sorted(d for d in p.iterdir() if (d / MANIFEST).exists()) if p.is_dir() else []
        if len(subs) == 1:
            return load_capture(subs[0])
        if subs:
            raise UsageError(f"{p} holds {len(subs)} captures; name one",
                             hint=", ".join(d.name for d in subs[:8]))
        raise UsageError(f"{p}: not a capture folder (no {MANIFEST})")
    if not m.is_file():
        raise UsageError(f"{m}: not a file")
    try:
        manifest = json.loads(m.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ParseError(f"manifest is not UTF-8 text (byte {e.start})", path=str(m)) from None
    except json.JSONDecodeError as e:
        raise ParseError(f"manifest is not JSON: {e.msg}", path=str(m), line=e.lineno, column=e.colno) from None
    if not isinstance(manifest, dict):
        raise ParseError(f"manifest is {_json_type(manifest)}, not a JSON object", path=str(m))
    problems = _check_shape(manifest)
    schema = str(manifest.get("schema", ""))
    folder = CaptureFolder(p, manifest, problems=problems)
    if schema != SCHEMA:
        folder.schema_ok = False
        folder.problems.append(
            f"manifest schema '{schema or 'none'}' is not {SCHEMA}: fields may be missing; "
            "only the files themselves are trusted")
    return folder


def _json_type(v) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(v), "a number")


def _check_shape(manifest: dict) -> list[str]:
    """Drop (and name) every field whose JSON type differs from what the readers index into,
    so a manifest written by another tool degrades instead of raising AttributeError later."""
    problems: list[str] = []

    def ok(parent: dict, key: str, want: type, where: str) -> bool:
        v = parent.get(key)
        if key in parent and not isinstance(v, want) and not (v is None and want is str):
            problems.append(f"manifest {where} is {_json_type(parent.pop(key))}, not "
                            f"{_json_type(want())}: ignored")
        return isinstance(parent.get(key), want)

    for key, want in (("schema", str), ("kernel", dict), ("signature", dict), ("hints", dict), ("targets", dict)):
        ok(manifest, key, want, f"'{key}'")
    for key in ("name", "function", "symbol"):
        ok(manifest.get("kernel", {}), key, str, f"'kernel.{key}'")
    sig = manifest.get("signature", {})
    if ok(sig, "spec", dict, "'signature.spec'") and not all(isinstance(v, str) for v in sig["spec"].values()):
        problems.append("manifest 'signature.spec' has non-string specs: ignored")
        del sig["spec"]
    for arch, tgt in list(manifest.get("targets", {}).items()):
        if ok(manifest["targets"], arch, dict, f"'targets.{arch}'"):
            for key in ("facts", "ptx_directives"):
                ok(tgt, key, dict, f"'targets.{arch}.{key}'")
    return problems


def list_captures(root: str | Path) -> list[CaptureFolder]:
    """The capture at ``root``, or every capture folder directly under it (sorted by name)."""
    root = Path(root)
    if (root / MANIFEST).exists():
        return [load_capture(root)]
    return [load_capture(d) for d in sorted(root.iterdir()) if (d / MANIFEST).exists()]
