"""Which copy of the user's code a measurement runs: the loop's worktree, never the checkout.

Both measurement modes run Python with the worktree's copy first: the folder the kernel file
imports from (above its topmost package, e.g. ``<worktree>/src``) leads ``PYTHONPATH``, and
entries of the inherited ``PYTHONPATH`` that point into the checkout are moved to the
worktree.  That outranks an editable install of the user's package (``.pth`` entries and
setuptools' import finders come after ``PYTHONPATH``), and it is verified, not assumed: the
workload worker reports the files of its loaded modules, and command children load
``audit/sitecustomize.py``, which writes them at exit.  A module loaded from the checkout
while the worktree holds its own copy of the file is an error that stops the loop: it would
measure the original code.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Mapping

AUDIT_DIR = Path(__file__).with_name("audit")
ENV_ORIGIN, ENV_WORKTREE, ENV_KERNEL, ENV_AUDIT = ("CUTILE_DIAG_ORIGIN", "CUTILE_DIAG_WORKTREE",
                                                   "CUTILE_DIAG_KERNEL_FILE", "CUTILE_DIAG_IMPORT_AUDIT")


def _inside(path: str | Path, folder: str | Path) -> bool:
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(folder))
        return True
    except ValueError:
        return False


def import_root(root: Path, rel_file: str) -> Path:
    """The ``sys.path`` entry the file imports from: the folder above its topmost package."""
    root = Path(root)
    d = (root / rel_file).parent
    while d != root and (d / "__init__.py").exists():
        d = d.parent
    return d


def remap(path: str, origin: Path, worktree: Path) -> str:
    """A path into the checkout, moved to the same place in the worktree (others unchanged)."""
    if not os.path.isabs(path) or not _inside(path, origin) or _inside(path, worktree):
        return path
    rel = Path(os.path.realpath(path)).relative_to(os.path.realpath(origin))
    return str(Path(worktree) / rel)


def child_env(origin: Path, worktree: Path, kernel_file: str, *, audit: Path | None = None,
              environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment additions for a child that must run the worktree's code."""
    environ = os.environ if environ is None else environ
    entries = ([str(AUDIT_DIR)] if audit else []) + [str(import_root(worktree, kernel_file))]
    for e in (environ.get("PYTHONPATH") or "").split(os.pathsep):
        if e:
            entries.append(remap(e, origin, worktree))
    env = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(entries)), ENV_ORIGIN: str(origin),
           ENV_WORKTREE: str(worktree), ENV_KERNEL: kernel_file}
    if audit:
        env[ENV_AUDIT] = str(audit)
    return env


def loaded_files(environ: Mapping[str, str] | None = None) -> dict:
    """This process's view: modules loaded from the checkout although the worktree has the file
    (``foreign``) and where the kernel file was loaded from (``kernel``)."""
    environ = os.environ if environ is None else environ
    origin, wt, kernel = environ.get(ENV_ORIGIN), environ.get(ENV_WORKTREE), environ.get(ENV_KERNEL)
    out: dict = {"foreign": {}, "kernel": None}
    if not (origin and wt):
        return out
    kfile = os.path.realpath(os.path.join(wt, kernel)) if kernel else None
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if not isinstance(f, str):
            continue
        real = os.path.realpath(f)
        if kfile and real == kfile:
            out["kernel"] = real
        elif _inside(real, origin) and not _inside(real, wt):
            rel = Path(real).relative_to(os.path.realpath(origin))
            if (Path(wt) / rel).exists():          # the worktree has its own copy: this one is the wrong one
                out["foreign"][name] = real
    return out


def read_audit(path: Path) -> list[dict]:
    """The JSON lines of an import audit file (unreadable lines skipped); [] when it cannot be read."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for ln in lines:
        try:
            out.append(json.loads(ln))
        except json.JSONDecodeError:
            continue
    return out


def foreign_message(foreign: Mapping[str, str], worktree: Path, what: str) -> tuple[str, str]:
    """(error, hint) for code loaded from the checkout instead of the worktree."""
    items = sorted(foreign.items())
    shown = ", ".join(f"{m} from {f}" for m, f in items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3 else "")
    return (f"{what} imported the checkout's code instead of the loop's worktree ({worktree}): {shown}",
            "an editable install or a sys.path entry points at your checkout ahead of PYTHONPATH; the loop puts the "
            "worktree first on PYTHONPATH, so remove the explicit path (or the finder) that outranks it")
