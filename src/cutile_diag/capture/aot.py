"""Ahead-of-time capture: no GPU needed, any target arch.

``KernelSignature.from_kernel_args`` needs libcuda, so the signature is built by hand from
argument specs (``spec``) and the kernel exported to bytecode with
``cuda.tile.compilation.export_kernel``.  Bytecode >= 13.3 is arch-independent, so one
bytecode serves every ``--arch``; only tileiras differs per target.
"""
from __future__ import annotations

import contextlib
import sys
import warnings
from pathlib import Path
from typing import Callable, Iterable

from ..errors import CompileError, UsageError
from ..toolchain import normalize_arch, require_tools
from . import loader as loader_mod
from . import spec as spec_mod
from .artifacts import DEFAULT_TIMEOUT, CaptureSet, KernelInfo, TileirasFailed, check_name, check_out_dir
from .manifest import CaptureFolder
from ..errors import ToolNotFoundError

# cuTile's user-facing error types (TileError covers type, syntax, value, compiler errors)
_HINT_KEYS = {"num_ctas", "occupancy", "num_worker_warps", "opt_level"}


def _cutile_error_types() -> tuple[type, ...]:
    from cuda.tile import TileError
    return (TileError,)


def _describe_cutile_error(e: Exception, loaded) -> str:
    loc = getattr(e, "loc", None)
    msg = getattr(e, "message", None) or str(e)
    first = " ".join(str(msg).strip().splitlines()[0].split()) if str(msg).strip() else type(e).__name__
    where = None
    if loc is not None and getattr(loc, "filename", None):
        where = f"{loc.filename}:{loc.line}"
    if where is None:
        where = f"{loaded.path}:{loaded.line}"
    text = f"{where}: cuTile rejected {loaded.attr}: {type(e).__name__}: {first}"
    if "failed to compile Tile IR program" in str(msg):
        text += " (if CUDA_HOME points at an older CUDA toolkit, unset it: tileiras then loads its libnvvm)"
    return text


def specs_for(loaded, given: dict | None, alternative: str = "") -> dict[str, spec_mod.ParamSpec]:
    """The module's ``CAPTURE_SPECS[kernel]`` with the user's specs on top (so ``--arg TM=64``
    alone changes one constant of a kernel that ships specs); the user's alone otherwise.
    ``alternative``: the calling command's other source of specs, for the error without any."""
    table = getattr(loaded.module, "CAPTURE_SPECS", None) or {}
    raw = dict(table.get(loaded.attr) or {})
    raw.update(given or {})
    if not raw:
        raise spec_mod.MissingSpecsError(f"no argument specs for {loaded.attr}",
                         hint=spec_mod.spec_hint(loaded, alternative=alternative))
    out = {}
    for name, v in raw.items():
        out[name] = v if isinstance(v, (spec_mod.ArraySpec, spec_mod.ScalarSpec, spec_mod.ConstSpec)) \
            else spec_mod.parse_spec(v, where=f"{name}")
    return out


def _apply_hints(loaded, hints: dict | None):
    if not hints:
        return loaded.kernel
    bad = set(hints) - _HINT_KEYS
    if bad:
        raise UsageError(f"unknown kernel hint {', '.join(sorted(bad))}",
                         hint="hints are " + ", ".join(sorted(_HINT_KEYS)))
    try:
        return loaded.kernel.replace_hints(**hints)
    except (ValueError, TypeError) as e:
        raise UsageError(f"bad hint value: {e}") from None


def export_bytecode(loaded, bound: spec_mod.BoundSpec, *, hints: dict | None = None,
                    warnings_out: list[str] | None = None) -> bytes:
    """Arch-independent TileIR bytecode for one signature (no tileiras run).

    cuTile's warnings (e.g. its bytecode-version probe falling back) are captured, not
    printed (stderr carries one error line at most); they go into ``warnings_out``."""
    import io
    from cuda.tile.compilation import export_kernel
    kernel = _apply_hints(loaded, hints)
    sig = spec_mod.build_signature(bound)
    buf = io.BytesIO()
    import os
    for var in ("CUDA_HOME", "CUDA_PATH"):
        # an empty value is never meaningful, but cuTile hands it to tileiras, whose bytecode
        # version probe then fails and silently falls back to 13.1 (seen on the H200)
        if var in os.environ and not os.environ[var].strip():
            del os.environ[var]
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            export_kernel(kernel, [sig], buf, gpu_code=None, output_format="tileir_bytecode")
    except _cutile_error_types() as e:
        text = _describe_cutile_error(e, loaded)
        if "requires version 13.3 or later, but got 13.1" in str(e):
            home = os.environ.get("CUDA_HOME")
            text = (f"{loaded.path}:{loaded.line}: cuTile could not run tileiras to pick a bytecode version "
                    "(its probe fell back to 13.1)"
                    + (f"; CUDA_HOME={home} is set: an older toolkit there breaks tileiras, unset it" if home
                       else "; check that tileiras >= 13.4, its ptxas and its libnvvm run here"))
        raise CompileError(text) from None
    except FileNotFoundError as e:
        if "tileiras" in str(e) or "tileirdisasm" in str(e):
            raise ToolNotFoundError("'tileiras' not found (cuTile needs it to pick the bytecode version)",
                                    hint="install nvidia-cuda-tileiras (pip install 'cuda-tile[tileiras]')") from None
        raise
    except OSError as e:
        if "source code" in str(e):
            raise CompileError(f"{loaded.path}: cuTile cannot read the kernel's source "
                               "(kernels must live in a real .py file)") from None
        raise
    except (ValueError, TypeError) as e:
        raise CompileError(f"{loaded.path}:{loaded.line}: cannot export {loaded.attr}: {e}") from None
    finally:
        if warnings_out is not None:
            warnings_out.extend(" ".join(str(w.message).split()) for w in caught)
    return buf.getvalue()


def opt_level_for(kernel, arch: str) -> int:
    """The -O level cuTile compiles ``kernel`` with for ``arch`` (3 when its options cannot say)."""
    try:
        return int(kernel._compiler_options.opt_level_for_target(arch))
    except Exception:
        return 3


def capture_aot(ref: str, specs: dict | None = None, *, archs: Iterable[str] = ("sm_90",),
                out_dir: str | Path, hints: dict | None = None, name: str | None = None,
                on_step: Callable[[str], None] | None = None,
                timeout: float = DEFAULT_TIMEOUT, specs_alternative: str = "") -> CaptureFolder:
    """Capture one kernel ahead of time for each arch; returns the capture folder.
    ``timeout`` bounds each per-arch tileiras compile (seconds); ``specs_alternative`` is
    ``specs_for``'s ``alternative``."""
    archs = [normalize_arch(a) for a in archs]
    if not archs:
        raise UsageError("no target arch given")
    if name is not None:
        check_name(name)
    check_out_dir(out_dir)
    # cuTile's own bytecode-version probe runs tileiras, which runs ptxas: without them it
    # only warns and fails later with a misleading message, so check first
    require_tools("tileiras", "tileirdisasm", "ptxas", "cuobjdump")
    # the user's module may print at import or compile time: keep our stdout (--json) clean
    with contextlib.redirect_stdout(sys.stderr):
        loaded = loader_mod.load_kernel(ref)
        bound = spec_mod.bind(loaded, specs_for(loaded, specs, specs_alternative))
        if on_step:
            on_step(f"export {loaded.attr}")
        cutile_warnings: list[str] = []
        bc = export_bytecode(loaded, bound, hints=hints, warnings_out=cutile_warnings)
        kernel = _apply_hints(loaded, hints)
        info = KernelInfo(
            name=name or loaded.attr, function=loaded.function_name, mode="aot", ref=ref,
            source_file=str(loaded.path), source_line=loaded.line, spec=bound.as_dict(),
            requested_hints=dict(hints or {}),
            opt_levels={a: opt_level_for(kernel, a) for a in archs},
            extra={"cutile_warnings": cutile_warnings} if cutile_warnings else {})
        if on_step:
            on_step(f"compile {loaded.attr} for {', '.join(archs)}")
        try:
            with CaptureSet(out_dir) as cs:     # a failed compile leaves no (empty) --out behind
                cs.write(info, archs=archs, bytecode=bc, tileiras_timeout=timeout)
                return cs.commit()[0]
        except TileirasFailed as e:
            hint = "; raise --timeout" if "timed out" in e.message else ""
            raise CompileError(f"{loaded.path}:{loaded.line}: tileiras failed on {loaded.attr} for {e.arch}: "
                               f"{e.message}{hint}") from None
