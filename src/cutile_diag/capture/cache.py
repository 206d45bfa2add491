"""Mining a cuTile disk cache (``cache.db``): every cubin embeds its TileIR and PTX.

Table ``cache(key, blob, blob_size, atime, metadata)``; ``blob`` is the cubin and
``metadata`` JSON carries ``kernel_names`` and the cleaned remarks YAML.  Arch is recovered
from the embedded PTX ``.target``; hints from the embedded TileIR entry line; the opt level
is not stored anywhere and stays unknown.
"""
from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from . import cubin as cubin_mod

DB_NAME = "cache.db"


@dataclass
class CacheEntry:
    """One row of cuTile's sqlite cache: the cubin blob and its JSON metadata."""
    key: str
    cubin: bytes
    metadata: dict
    atime: float | None

    @property
    def kernel_names(self) -> list[str]:
        """The mangled kernel symbols the metadata lists."""
        return list(self.metadata.get("kernel_names") or [])

    @property
    def remarks(self) -> str | None:
        """The remarks YAML; None when the entry stores none (tileiras < 13.4), "" when there were none."""
        return self.metadata.get("remarks")

    def sections(self):
        """The cubin's ELF sections by name."""
        return cubin_mod.read_sections(self.cubin)

    def arch(self) -> str | None:
        """The ``sm_XX`` of the cubin, read from its embedded PTX's ``.target`` (None without PTX)."""
        ptx = cubin_mod.embedded_ptx(self.sections())
        return cubin_mod.arch_of_ptx_target(cubin_mod.ptx_target(ptx or ""))


def default_cache_dir() -> Path:
    """Where cuTile keeps its cache: CUDA_TILE_CACHE_DIR unless it turns the cache off, else
    ``$XDG_CACHE_HOME/cutile-python``."""
    base = os.environ.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    env = os.environ.get("CUDA_TILE_CACHE_DIR")
    return Path(env) if env and env.strip().lower() not in ("0", "off", "none") else Path(base) / "cutile-python"


def resolve_db(path: str | Path | None) -> Path:
    """The cache database file for a folder or file (None: the default folder); UsageError when absent."""
    p = Path(path) if path else default_cache_dir()
    if p.is_dir():
        p = p / DB_NAME
    if not p.exists():
        raise UsageError(f"{p}: no cuTile cache database here",
                         hint="pass the cache folder (CUDA_TILE_CACHE_DIR, default ~/.cache/cutile-python)")
    return p


def read_cache(path: str | Path | None) -> list[CacheEntry]:
    """Every entry of the cache database, newest first, read through a read-only connection."""
    db = resolve_db(path)
    try:
        # read-only: never touch a cache another process may be using
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
        try:
            rows = conn.execute("SELECT key, blob, metadata, atime FROM cache ORDER BY atime DESC").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise UsageError(f"{db}: not a readable cuTile cache database ({e})") from None
    out = []
    for key, blob, meta, atime in rows:
        try:
            md = json.loads(meta) if meta else {}
        except json.JSONDecodeError:
            md = {"_unreadable_metadata": True}
        out.append(CacheEntry(key, bytes(blob), md, atime))
    return out
