"""The ``FILE.py::NAME`` grammar: a kernel (or workload, or launch wrapper) named inside a file."""
from __future__ import annotations

from pathlib import Path

from ..errors import UsageError

SEP = "::"


def split_ref(ref: str) -> tuple[Path, str | None]:
    """``path/file.py::name`` -> (path as written, name); the name is None when absent or empty."""
    path, sep, name = ref.rpartition(SEP)
    if not sep:
        return Path(ref), None
    return Path(path), (name or None)


def ref_file(ref: str) -> str:
    """The file part of a ref as written (the whole text when it names no object)."""
    path, sep, _ = ref.rpartition(SEP)
    return path if sep else ref


def parse_ref(ref: str) -> tuple[Path, str]:
    """``path/file.py::kernel`` -> (absolute path, kernel name); both parts required, the file must exist."""
    if SEP not in ref:
        raise UsageError(f"'{ref}' does not name a kernel", hint="give FILE.py::KERNEL, e.g. ops/softmax.py::softmax")
    path, name = split_ref(ref)
    if not name:
        raise UsageError(f"'{ref}' has no kernel name after '::'")
    p = path.expanduser().resolve()
    if not p.is_file():
        raise UsageError(f"{p}: no such file")
    return p, name
