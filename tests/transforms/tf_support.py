"""Test support for the transforms: AOT compile to TileIR text, canonical IR deltas.

``Compiler`` writes a (rewritten) kernel file to a temp folder, loads it with the capture
loader, binds the module's ``CAPTURE_SPECS[name]`` and exports TileIR bytecode, then
disassembles it with ``tileirdisasm`` — the same path ``cutile-diag capture`` takes, minus
tileiras.  Results are cached per (source, kernel, hints), so each variant compiles once
per test session.
"""
from __future__ import annotations

import hashlib
import re
import subprocess
from collections import Counter
from difflib import SequenceMatcher
from pathlib import Path

from cutile_diag.capture.loader import load_kernel
from cutile_diag.capture.spec import bind, build_signature, parse_spec
from cutile_diag.examples import EXAMPLES_DIR
from cutile_diag.toolchain import find_tool

EXAMPLE_FILES = {"vector_add": "vector_add.py", "vector_add_persistent": "vector_add.py",
                 "matmul": "matmul.py", "matmul_f32": "matmul.py", "matmul_tuned": "matmul.py",
                 "softmax": "softmax.py", "gather_scale": "gather_scale.py"}


def example_source(kernel: str) -> str:
    return (EXAMPLES_DIR / EXAMPLE_FILES[kernel]).read_text()


class Compiler:
    def __init__(self, root: Path):
        self.root = root
        self.cache: dict[tuple, str] = {}

    def write(self, source: str, stem: str = "k") -> Path:
        digest = hashlib.sha1(source.encode()).hexdigest()[:12]
        path = self.root / f"{stem}_{digest}.py"
        if not path.exists():
            path.write_text(source)
        return path

    def tileir(self, source: str, kernel: str, hints: dict | None = None) -> str:
        key = (source, kernel, tuple(sorted((hints or {}).items())))
        if key not in self.cache:
            from cuda.tile.compilation import export_kernel
            path = self.write(source, kernel)
            lk = load_kernel(f"{path}::{kernel}")
            specs = {n: parse_spec(v) for n, v in lk.module.CAPTURE_SPECS[kernel].items()}
            sig = build_signature(bind(lk, specs))
            k = lk.kernel.replace_hints(**hints) if hints else lk.kernel
            out = path.with_suffix(f".{kernel}.{len(self.cache)}.tileirbc")
            export_kernel(k, [sig], str(out), output_format="tileir_bytecode")
            p = subprocess.run([str(find_tool("tileirdisasm")), str(out)], capture_output=True,
                               text=True, check=True)
            self.cache[key] = p.stdout
        return self.cache[key]

    def aot(self, source: str, kernel: str, specs: dict | None = None) -> str:
        """TileIR text of a full AOT capture (export, tileiras to an sm_90 cubin): the
        rewritten kernel really compiles.  ``specs`` default to the module's CAPTURE_SPECS."""
        return (self.aot_folder(source, kernel, specs) / "kernel.tileir").read_text()

    def aot_folder(self, source: str, kernel: str, specs: dict | None = None) -> Path:
        """The capture folder of ``aot`` (cubin, remarks, resource usage under ``sm_90/``)."""
        key = ("aot", source, kernel, tuple(sorted((specs or {}).items())))
        if key not in self.cache:
            from cutile_diag.capture.aot import capture_aot
            path = self.write(source, kernel)
            out = path.with_suffix(f".{kernel}.aot{len(self.cache)}")
            folder = capture_aot(f"{path}::{kernel}", specs, out_dir=out)
            assert (folder.path / "sm_90" / "kernel.cubin").stat().st_size > 0
            self.cache[key] = folder.path
        return self.cache[key]


# ---------------------------------------------------------------------------------------
# TileIR text helpers (regexes on IR text are fine here: the rewrites themselves use libcst)

_SSA = re.compile(r"%[A-Za-z_][\w]*|%\d+")


def canonical(text: str) -> list[str]:
    """IR lines with whitespace normalised and SSA names renamed in order of appearance
    (``%argN`` kept), entry symbol replaced: two texts differ only where the IR does."""
    names: dict[str, str] = {}

    def ren(m):
        s = m.group(0)
        if re.fullmatch(r"%arg\d+", s):
            return s
        if s not in names:
            names[s] = f"%v{len(names)}"
        return names[s]

    out = []
    for line in text.splitlines():
        line = " ".join(line.split())
        line = re.sub(r"entry @\S+?\(", "entry @K(", line)
        out.append(_SSA.sub(ren, line))
    return [ln for ln in out if ln]


def ir_delta(old: str, new: str) -> tuple[list[str], list[str]]:
    """(lines only in old, lines only in new) of the canonical texts."""
    a, b = canonical(old), canonical(new)
    removed, added = [], []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            removed += a[i1:i2]
        if tag in ("replace", "insert"):
            added += b[j1:j2]
    return removed, added


_OP = re.compile(r"^\s*(?:(?:%[\w#:]+(?:, )?)+ = )?([a-z_][a-z0-9_]*)\b")


def op_lines(text: str, op: str) -> list[str]:
    """Lines whose operation is ``op`` (``load_view_tko``, ``for``, ...)."""
    out = []
    for line in text.splitlines():
        m = _OP.match(line)
        if m and m.group(1) == op:
            out.append(" ".join(line.split()))
    return out


def op_counts(text: str) -> Counter:
    c: Counter = Counter()
    for line in text.splitlines():
        m = _OP.match(line)
        if m:
            c[m.group(1)] += 1
    return c


def entry_line(text: str) -> str:
    return next(" ".join(ln.split()) for ln in text.splitlines() if ln.startswith("entry @"))


def entry_symbol(text: str) -> str:
    return re.match(r"entry @(\S+?)\(", entry_line(text)).group(1)


def emulated(root: Path, source: str, stem: str = "k"):
    """The module of ``source`` running on the numpy emulator (see ``emulate``)."""
    from .emulate import load_emulated
    digest = hashlib.sha1(source.encode()).hexdigest()[:12]
    path = root / f"{stem}_{digest}.py"
    if not path.exists():
        path.write_text(source)
    return load_emulated(path)


HINTS_RE = re.compile(r" optimization_hints = <default = \{([^}]*)\}>")


def op_hints(line: str) -> str | None:
    """``latency = 10`` from an op line's hint dict, or None."""
    m = HINTS_RE.search(line)
    return m.group(1) if m else None


def strip_op_hints(line: str) -> str:
    return HINTS_RE.sub("", line)
