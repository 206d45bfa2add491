"""Capture from a real run: ``cutile-diag capture --out DIR -- python script.py …``.

The command runs with ``CUDA_TILE_DUMP_BYTECODE`` set and a fresh, isolated
``CUDA_TILE_CACHE_DIR`` (a cache hit would skip tileiras, so no cubin or remarks would be
produced).  Afterwards every dumped bytecode is matched to the cubin the JIT produced for it
by recomputing cuTile's cache key over (arch, opt level) — which also recovers the exact
arch and opt level — and each kernel is written as a capture folder.  A command that fails
or times out produces no capture; its raw dumps are kept and named in the error.  The
kernels are written all-or-nothing (``artifacts.CaptureSet``): a kernel that cannot be
captured fails the whole set, and the error names its dump or cache entry.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import CutileDiagError, UsageError
from ..procs import wait_or_kill
from .artifacts import CaptureSet, KernelInfo, check_out_dir, unique_name
from .cache import CacheEntry, read_cache, resolve_db
from .cubin import embedded_tileir
from .manifest import CaptureFolder
from ..output import prog

_DUMP_NAME_RE = re.compile(r"^(?P<func>.+?)\.(?P<stem>[^.]+)\.ln(?P<line>\d+)\.[^.]+\.tileirbc$")


class RunFailedError(CutileDiagError):
    """The captured command failed or timed out, or collecting its kernels did; nothing was written."""
    pass


class NothingCapturedError(CutileDiagError):
    """The run or cache held no kernel to capture (exit 1: not bad input)."""
    exit_code = 1


def _one_line(err: BaseException) -> str:
    """A failure inside an all-or-nothing capture set, for the error that aborts it."""
    return err.one_line() if isinstance(err, CutileDiagError) else f"{type(err).__name__}: {err}"


@dataclass
class RunCapture:
    """What ``capture_run`` did: the command, its exit code and time, the captures, and notes."""
    command: list[str]
    returncode: int
    seconds: float
    captures: list[CaptureFolder] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _run(command: list[str], env: dict, timeout: float | None, log: Path,
         echo: Callable[[str], None] | None) -> tuple[int, float, bool]:
    start = time.monotonic()
    try:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, text=True, errors="replace", bufsize=1)
    except FileNotFoundError:
        raise UsageError(f"command not found: {command[0]}") from None
    except PermissionError:
        raise UsageError(f"command not executable: {command[0]}") from None

    def pump():
        with open(log, "w") as f:
            for line in proc.stdout:  # type: ignore[union-attr]
                f.write(line)
                if echo:
                    echo(line.rstrip("\n"))

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    timed_out = wait_or_kill(proc, timeout)
    t.join(timeout=5)
    return proc.returncode, time.monotonic() - start, timed_out


def _match_cache(bc: bytes, entries: list[CacheEntry], archs: list[str]) -> tuple[CacheEntry, str, int] | None:
    """The cache entry built from this bytecode, with its arch and opt level."""
    try:
        from cuda.tile._compile import _get_compiler_version_string
        from cutile_cache._cache import cache_key
        ver = _get_compiler_version_string()
    except Exception:
        return None
    if not ver:
        return None
    by_key = {e.key: e for e in entries}
    for arch in archs:
        for opt in (3, 2, 1, 0):
            for debug in (False, True):
                try:
                    k = cache_key(ver, arch, opt, bc, debug, preview_features=(), linker_inputs=())
                except TypeError:
                    return None
                if k in by_key:
                    return by_key[k], arch, opt
    return None


def capture_run(command: list[str], *, out_dir: str | Path, timeout: float | None = None,
                archs: list[str] | None = None, echo: Callable[[str], None] | None = None,
                on_step: Callable[[str], None] | None = None) -> RunCapture:
    """Run ``command`` with cuTile's bytecode dump and a fresh cache, then write one capture per
    dumped kernel (its JIT cubin when one matches, else compiled here) and per cubin without a
    dump, all-or-nothing into ``out_dir``."""
    if not command:
        raise UsageError("no command given after '--'", hint=f"e.g. {prog()} capture --out DIR -- python script.py")
    check_out_dir(out_dir)       # before the run, which may take minutes
    work = Path(tempfile.mkdtemp(prefix="cutile-diag-run-"))
    dump, cache = work / "dump", work / "cache"
    dump.mkdir()
    cache.mkdir()
    env = dict(os.environ)
    env.update({"CUDA_TILE_DUMP_BYTECODE": str(dump), "CUDA_TILE_CACHE_DIR": str(cache),
                "PYTHONUNBUFFERED": "1"})
    env.pop("CUDA_TILE_DUMP_TILEIR", None)   # we disassemble ourselves (with and without -g)
    log = work / "run.log"
    if on_step:
        on_step(f"running {' '.join(command)[:60]}")
    try:
        rc, secs, timed_out = _run(command, env, timeout, log, echo)
    except BaseException:        # command not found, Ctrl-C: no error names the work dir, so drop it
        shutil.rmtree(work, ignore_errors=True)
        raise
    if timed_out:
        raise RunFailedError(f"command timed out after {timeout:g} s and was killed; no capture written "
                             f"(raw dumps and log kept in {work})")
    if rc != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:]
        hint = ""
        if "failed to compile Tile IR program" in log.read_text(errors="replace") and os.environ.get("CUDA_HOME"):
            hint = "; CUDA_HOME is set: an older toolkit there breaks tileiras, unset it"
        raise RunFailedError(f"command exited with {rc}; no capture written "
                             f"(last output: {tail[0][:200] if tail else 'none'}; raw dumps and log kept in {work}){hint}")
    result = RunCapture(command, rc, secs)
    what = "the run's cuTile cache"
    try:
        entries = read_cache(cache) if (cache / "cache.db").exists() else []
        seen_archs = sorted({a for a in (e.arch() for e in entries) if a})
        match_archs = seen_archs or list(archs or [])
        used: set[str] = set()
        taken: set[str] = set()
        bcs = sorted(dump.glob("*.tileirbc"))
        with CaptureSet(out_dir) as cs:
            for i, bc_path in enumerate(bcs, 1):
                what = f"dump {bc_path.name}"
                bc = bc_path.read_bytes()
                m = _DUMP_NAME_RE.match(bc_path.name)
                func = m.group("func") if m else bc_path.stem
                hit = _match_cache(bc, entries, match_archs) if entries else None
                info = KernelInfo(name=unique_name(Path(out_dir), func, taken), function=func, mode="run",
                                  source_line=int(m.group("line")) if m else None,
                                  extra={"command": command, "dump_file": bc_path.name,
                                         **({"source_stem": m.group("stem")} if m else {})})
                if on_step:
                    on_step(f"collect {func} ({i}/{len(bcs)})")
                if hit:
                    entry, arch, opt = hit
                    used.add(entry.key)
                    info.opt_levels = {arch: opt}
                    info.extra["cache_key"] = entry.key
                    cs.write(info, archs=[arch], bytecode=bc, cubins={arch: entry.cubin},
                             remarks={arch: entry.remarks})
                else:
                    # compiled with the cache off, or by another tileiras: rebuild ourselves
                    tgt = list(archs or seen_archs or ["sm_90"])
                    info.extra["note"] = "no JIT cubin matched this bytecode; compiled by cutile-diag"
                    result.notes.append(f"{func}: no JIT cubin matched; compiled for {', '.join(tgt)}")
                    cs.write(info, archs=tgt, bytecode=bc)
            for e in [e for e in entries if e.key not in used]:
                # a cubin without a dumped bytecode (e.g. an export that bypassed the dump)
                label = (e.kernel_names or ["?"])[0]
                what = f"cache entry {e.key[:16]} ({label})"
                if on_step:
                    on_step(f"collect {label[:40]}")
                capture_cache_entry(e, cs, taken, mode="run")
            result.captures = cs.commit()
    except (CutileDiagError, OSError) as e:
        raise RunFailedError(f"capturing {what} failed: {_one_line(e)}; nothing written to {out_dir} "
                             f"(raw dumps and log kept in {work})") from None
    if not result.captures:
        result.notes.append("the command compiled no cuTile kernel (nothing was dumped)")
    shutil.rmtree(work, ignore_errors=True)
    return result


# files a cache blob cannot provide: it stores the cubin (with TileIR text and PTX inside)
CACHE_UNAVAILABLE = {
    "kernel.tileirbc": "a cuTile cache entry stores the cubin, not the bytecode",
    "kernel.loc.tileir": "the TileIR embedded in a cubin has no source locations",
}


def capture_cache_entry(e: CacheEntry, cs: CaptureSet, taken: set[str], mode: str = "cache") -> CaptureFolder:
    """One cache entry as a capture in ``cs``: the cubin, its embedded TileIR and remarks; the files
    a cache cannot hold are listed as unavailable."""
    sections = e.sections()
    tileir = embedded_tileir(sections)
    arch = e.arch() or "sm_unknown"
    symbol = e.kernel_names[0] if e.kernel_names else None
    func = None
    if symbol:
        mm = re.match(r"^(.*?)_K[a-z]\d", symbol)
        func = mm.group(1) if mm else symbol
    info = KernelInfo(name=unique_name(cs.out, func or f"kernel-{e.key[:8]}", taken), function=func,
                      symbol=symbol, mode=mode,
                      extra={"cache_key": e.key, "compiler_version": e.metadata.get("compiler_version"),
                             "compilation_time_seconds": e.metadata.get("compilation_time_seconds")})
    return cs.write(info, archs=[arch], tileir_text=tileir, cubins={arch: e.cubin},
                    remarks={arch: e.remarks}, unavailable=CACHE_UNAVAILABLE)


def capture_from_cache(path: str | Path | None, *, out_dir: str | Path, kernel: str | None = None,
                       limit: int | None = None, on_step: Callable[[str], None] | None = None) -> list[CaptureFolder]:
    """Every entry (newest first, at most ``limit``) as a capture, all-or-nothing."""
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be a positive number of entries, not {limit}")
    check_out_dir(out_dir)
    db = resolve_db(path)
    entries = read_cache(db)
    if not entries:
        raise NothingCapturedError(f"no kernels captured: the cuTile cache {db} holds no entries")
    if kernel:
        entries = [e for e in entries if any(n == kernel or n.startswith(kernel + "_K") for n in e.kernel_names)]
        if not entries:
            raise UsageError(f"no cache entry for kernel '{kernel}'")
    if limit:
        entries = entries[:limit]
    taken: set[str] = set()
    with CaptureSet(out_dir) as cs:
        for i, e in enumerate(entries, 1):
            label = (e.kernel_names or ["?"])[0]
            if on_step:
                on_step(f"mine {label[:40]} ({i}/{len(entries)})")
            try:
                capture_cache_entry(e, cs, taken)
            except (CutileDiagError, OSError) as err:
                raise CutileDiagError(f"cache entry {e.key[:16]} ({label}) failed: {_one_line(err)}; "
                                      f"nothing written to {out_dir}") from None
        return cs.commit()
