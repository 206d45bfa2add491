"""The replay folder: one recorded launch of one kernel signature.

::

    <folder>/replay.json          schema "cutile-diag.replay/1"
    <folder>/s<i>.pt              storage i's bytes before the launch (uint8, torch.save), when stored
    <folder>/s<i>.after.pt        storage i's bytes after the launch, when the kernel wrote it
    <folder>/expected-regenerated-<tag>.pt   where inputs are regenerated: the recorded version's answer on
                                  them (tag: the device type they were drawn on), written by its first replay
                                  (as large as the written arguments)

``replay.json``::

    kernel:   {name, attr, module, file, source_sha256}   attr: the module global holding the kernel
    grid:     [x, y, z]
    args:     [{name, value}]               the launch's arguments in parameter order
    wrapper:  {name, args: [value], kwargs: {name: value}} | null   the function of the kernel's
              module that made the launch (replayed instead of the bare launch: a changed grid is timed),
              or ``Class.method``, a static method of one of its classes (an autograd backward; its ctx
              is the value {ctx: {attrs, saved, needs_input_grad}}); ``rebound``: required arguments the
              wrapper rebinds before the launch, recorded as they were at the launch (the replay keeps the
              wrapper where the recorded version, so called, reproduces the launch and its outputs).  The
              recorded version's verdict on any wrapper is kept in ``wrapper-verdict.json`` for the workers
              of later versions
    wrapper_missing: why there is no wrapper call (then the bare launch is replayed)
    storages: [{id, nbytes, start, device_type, stored: "whole" | "regenerated",
                stats: {dtype, mean, std, min, max} (regenerated), written: bool | null, pure_output: bool}]
    executed: the launch ran (outputs and ``written`` known); false for a dry run
    cap_bytes: the size cap the recording was made under; signature: the launch's spec text

A value is ``{"tensor": {storage, dtype, shape, stride, offset}}`` (a view of a storage: arguments
that share memory share a storage), ``{"value": v}`` (None, bool, int, float, str),
``{"dtype": "float16"}``, ``{"stream": true}`` (the replay's current stream), ``{"tuple": [...]}``,
``{"list": [...]}`` or ``{"dict": {...}}``.
Integer and bool storages are always stored whole; floating-point ones past the per-kernel cap
(``CUTILE_DIAG_REPLAY_CAP_MB``, default ``DEFAULT_CAP_MB``) are regenerated from their statistics
(a fixed seed, clamped to the recorded range) and the record says so.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

from ..errors import CutileDiagError

SCHEMA = "cutile-diag.replay/1"
MANIFEST = "replay.json"
DEFAULT_CAP_MB = 256.0           # per recorded launch: the bytes stored in full before regenerating floats
ENV_DIR = "CUTILE_DIAG_REPLAY_DIR"
ENV_CAP = "CUTILE_DIAG_REPLAY_CAP_MB"


class ReplayError(CutileDiagError):
    """A replay folder that is missing, corrupt, or recorded from another version of the kernel."""


class Unrecordable(Exception):
    """A value the replay format cannot hold (an object of the user's own type)."""


def source_sha256(path: str | Path | None) -> str | None:
    """Digest of a kernel module's source: a recording is only replayed against the text it was made from
    (the loop's baseline) or knowingly against a candidate (``load(..., any_version=True)``)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except (OSError, TypeError):
        return None


def read_manifest(folder: str | Path) -> dict:
    """``replay.json`` of ``folder``, checked; a ReplayError (one line, exit 2) otherwise."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise ReplayError(f"no replay recording at {folder}",
                          hint="a recording is made by the campaign's survey or the loop's first check run")
    if not path.is_file():
        raise ReplayError(f"{folder} is not a replay recording (no {MANIFEST})")
    try:
        d = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReplayError(f"{path} is corrupt: {e}") from None
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        got = d.get("schema") if isinstance(d, dict) else type(d).__name__
        raise ReplayError(f"{path} has schema {got!r}; this cutile-diag reads {SCHEMA}")
    for k in ("kernel", "grid", "args", "storages"):
        if k not in d:
            raise ReplayError(f"{path} is corrupt: no {k!r}")
    for s in d["storages"]:
        for suffix in ("",) if s.get("stored") == "whole" else ():
            f = folder / f"s{s['id']}{suffix}.pt"
            if not f.is_file():
                raise ReplayError(f"{folder} is incomplete: {f.name} is missing")
    return d


def write_manifest(folder: Path, d: dict) -> None:
    """Write ``replay.json`` into ``folder``, stamped with the schema version."""
    (folder / MANIFEST).write_text(json.dumps({"schema": SCHEMA, **d}, indent=1))


def replay_folders(root: str | Path) -> list[Path]:
    """Every recording under ``root`` (one folder per kernel signature), by name."""
    root = Path(root)
    return sorted(p.parent for p in root.glob(f"*/{MANIFEST}")) if root.is_dir() else []


WRAPPER_VERDICT = "wrapper-verdict.json"   # the recorded version's verdict on its wrapper, for later versions


def write_wrapper_verdict(folder: Path, manifest: dict, why: str | None) -> None:
    """Keep the recorded version's verdict on its wrapper (None: it replays the recording) for later versions."""
    with contextlib.suppress(OSError):
        (Path(folder) / WRAPPER_VERDICT).write_text(
            json.dumps({"source_sha256": manifest["kernel"].get("source_sha256"), "why": why}))


def wrapper_verdict(folder: Path, manifest: dict) -> str | None:
    """Why the recorded wrapper does not replay this recording (None: it does), as the recorded version judged it.
    Before that version has run, a plain wrapper is trusted, and one called with arguments it had rebound by the
    launch (``rebound``) is not: only the recorded version can show those values reproduce the launch."""
    w = manifest.get("wrapper") or {}
    if not w:
        return manifest.get("wrapper_missing") or "no wrapper call was recorded"
    try:
        got = json.loads((Path(folder) / WRAPPER_VERDICT).read_text())
        if got.get("source_sha256") != manifest["kernel"].get("source_sha256"):
            got = None          # left by an earlier recording in this folder: not this one's verdict
    except (OSError, ValueError, AttributeError):
        got = None
    if isinstance(got, dict):
        return got.get("why")
    if w.get("rebound"):
        return (f"{w['name']} rebinds {', '.join(w['rebound'])} before the launch, and the recorded version has not "
                "been replayed yet to show the values at the launch reproduce it")
    return None
