"""Shared output plumbing: rich for people, JSON for agents, progress for long work."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Iterable, Iterator

from rich.console import Console

# stdout carries the result (rich text or JSON); stderr carries progress and errors so
# that `--json` output stays machine-readable.
def _width() -> int | None:
    # rich falls back to 80 columns when stdout is not a terminal (CI logs, files, pipes);
    # tables read better wider there
    if os.environ.get("COLUMNS"):
        return None
    return None if sys.stdout.isatty() else 140


console = Console(highlight=False, soft_wrap=False, width=_width())
err_console = Console(stderr=True, highlight=False)


def prog() -> str:
    """How this user runs cutile-diag, so that every command a hint prints can be pasted as is:
    ``./dev`` exports CUTILE_DIAG_PROG (the console script is then not on PATH); else the console
    script when it is on PATH; else the script or interpreter running now.  Every hint that
    names a command starts it with ``f"{prog()} …"``."""
    given = os.environ.get("CUTILE_DIAG_PROG")
    if given:
        return given
    if shutil.which("cutile-diag"):
        return "cutile-diag"
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "cutile-diag":
        return shlex.quote(argv0)
    return f"{shlex.quote(sys.executable)} -m cutile_diag"


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut in the middle (kernel names differ at both
    ends: ``_persistent…_fwd_kernel``)."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


class Footnotes:
    """Long cell texts said once below a table, so that its rows stay one line each: the cell
    shows ``[n]``, the same text the same ``n``; short texts stay in the cell."""

    def __init__(self, inline: int = 32):
        self.inline = inline
        self.texts: dict[str, int] = {}

    def ref(self, text: str) -> str:
        """``[n]`` for ``text``, numbered at first use."""
        return f"[{self.texts.setdefault(text, len(self.texts) + 1)}]"

    def cell(self, text: str) -> str:
        """A bracketed source inside a derived one (``2 x clock 3201 MHz [preset …] x 6016 bit
        [preset …]``) becomes a reference too, so the derivation stays readable in the row."""
        out, depth, start = [], 0, 0
        for i, ch in enumerate(text):        # top-level [...] groups -> note references
            if ch == "[":
                if depth == 0:
                    out.append(text[start:i])
                    start = i + 1
                depth += 1
            elif ch == "]" and depth:
                depth -= 1
                if depth == 0:
                    out.append(self.ref(text[start:i]))
                    start = i + 1
        out.append(text[start:])
        short = "".join(out)
        return short if len(short) <= self.inline else self.ref(short)

    def print(self, to: Console) -> None:
        """Print the footnotes in order."""
        for text, n in self.texts.items():
            to.print(f"[{n}] {text}", markup=False, highlight=False)


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, enums, paths, sets and tuples to plain JSON types."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if hasattr(obj, "to_json"):
            return to_jsonable(obj.to_json())
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not f.name.startswith("_")}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = [to_jsonable(v) for v in obj]
        return sorted(items, key=str) if isinstance(obj, (set, frozenset)) else items
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    return obj


def dumps(obj: Any) -> str:
    """``obj`` as indented JSON, through ``to_jsonable``."""
    return json.dumps(to_jsonable(obj), indent=2, sort_keys=False)


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON to stdout (the ``--json`` output)."""
    sys.stdout.write(dumps(obj) + "\n")
    sys.stdout.flush()


@contextlib.contextmanager
def progress(total: int, description: str, *, enabled: bool = True) -> Iterator[Any]:
    """A progress bar on stderr; a no-op object when disabled (JSON mode, non-TTY tests)."""
    if not enabled or total <= 1 or not err_console.is_terminal:
        class _Null:
            def advance(self, *_a, **_k): ...
            def update(self, *_a, **_k): ...
        yield _Null()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, transient=True) as p:
        task = p.add_task(description, total=total)

        class _Bar:
            def advance(self, n: int = 1, description: str | None = None):
                p.update(task, advance=n, **({"description": description} if description else {}))

            def update(self, description: str):
                p.update(task, description=description)
        yield _Bar()


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write via a temp file + rename so a crash never leaves a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(tmp, mode) as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def human_bytes(n: float | int | None) -> str:
    """A byte count in B, KiB, MiB or GiB (``-`` for None)."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def join_nonempty(parts: Iterable[str], sep: str = ", ") -> str:
    """The non-empty parts joined by ``sep``."""
    return sep.join(p for p in parts if p)
