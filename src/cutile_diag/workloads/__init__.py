"""Workloads shipped with cutile-diag: one per example kernel, and TileGym ops by op name.

Public API::

    load_workload("path/file.py::Name" | "examples:matmul" | "tilegym:softmax", **kwargs) -> Workload
    BUILTIN                         # "examples:matmul" -> factory(**kwargs) -> Workload
    builtin_names() -> list[str]
    resolve_builtin("examples:matmul", source="variant.py") -> Workload   # unknown arguments: WorkloadError
    resolve_builtin("matmul")       # a bare name works when exactly one built-in has it

Example workloads take ``source=`` (a copy of the example module, e.g. an optimisation
variant): its ``launch`` wrapper and kernels are used instead of the shipped ones.
TileGym workloads import ``tilegym`` lazily, so listing them needs no GPU or package.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable

from ..errors import UsageError
from ..workload import Workload, WorkloadError, _FunctionWorkload, instantiate, validate
from ..output import prog
from ..capture.loader import import_file, is_kernel
from ..replay.workload import folders_of, replay_workload
from ..source.ref import split_ref


def _examples(name: str) -> Callable[..., Workload]:
    def make(**kw):
        from . import examples
        return examples.make(name, **kw)
    return make


def _tilegym(op: str) -> Callable[..., Workload]:
    def make(**kw):
        from . import tilegym_ops
        return tilegym_ops.make(op, **kw)
    return make


EXAMPLE_WORKLOADS = ("vector_add", "vector_add_persistent", "matmul", "matmul_f32", "matmul_tuned",
                     "softmax", "gather_scale", "row_norm", "row_lse", "multipass_norm", "persistent_rows")
TILEGYM_WORKLOADS = ("softmax", "rms_norm", "matmul", "silu_and_mul", "layer_norm_legacy")

BUILTIN: dict[str, Callable[..., Workload]] = {
    **{f"examples:{n}": _examples(n) for n in EXAMPLE_WORKLOADS},
    **{f"tilegym:{n}": _tilegym(n) for n in TILEGYM_WORKLOADS},
}


def builtin_names() -> list[str]:
    """Every built-in reference (``examples:<name>``, ``tilegym:<op>``), in registry order."""
    return list(BUILTIN)


def builtin_key(ref: str) -> str:
    """The registry key ``ref`` names (a bare name when one prefix has it); an unknown or ambiguous name raises
    ``WorkloadError`` with the choices.  Nothing is built or imported."""
    key = ref.strip()
    if key not in BUILTIN:
        if ":" not in key:
            matches = [n for n in BUILTIN if n.split(":", 1)[1] == key]
            if len(matches) == 1:
                key = matches[0]
            elif len(matches) > 1:
                raise WorkloadError(f"'{ref}' is ambiguous", hint="one of " + ", ".join(matches))
        if key not in BUILTIN:
            raise WorkloadError(f"unknown workload '{ref}'",
                                hint="built in: " + ", ".join(BUILTIN) + "; or give path/file.py::Workload")
    return key


def resolve_builtin(ref: str, **kwargs) -> Workload:
    """The built-in workload ``ref`` names (a bare name when one prefix has it), built with ``kwargs``;
    an unknown or ambiguous name raises ``WorkloadError`` with the choices."""
    key = builtin_key(ref)
    wl = BUILTIN[key](**kwargs)
    wl.ref = key
    return wl


def _stripped(ref) -> str:
    """The reference without surrounding blanks; an empty one is a usage error."""
    if not isinstance(ref, str) or not ref.strip():
        raise UsageError("empty workload reference",
                         hint="give examples:<kernel>, tilegym:<op> or path/file.py::Workload")
    return ref.strip()


def check_ref(ref: str) -> None:
    """A cheap check of a workload reference before a measuring process is started for it: a built-in name is known,
    a file exists.  Importing and building the workload stays with that process (a TileGym op imports torch)."""
    ref = _stripped(ref)
    if ref.startswith("replay:"):
        folders_of(ref[len("replay:"):])       # a recording or a folder of them (a damaged one is judged later)
        return
    if "::" not in ref and not ref.endswith(".py"):
        builtin_key(ref)
        return
    path, _ = split_ref(ref)
    if not Path(path).is_file():
        raise WorkloadError(f"{path}: no such file", hint="give path/file.py::Workload")


def _is_workload_class(obj) -> bool:
    return inspect.isclass(obj) and issubclass(obj, Workload) and obj not in (Workload, _FunctionWorkload)


def _workloads_in(module) -> dict[str, Any]:
    out = {}
    for n, v in vars(module).items():
        if n.startswith("_"):
            continue
        if isinstance(v, Workload) or (_is_workload_class(v) and v.__module__ == module.__name__):
            out[n] = v
    return out


def load_workload(ref: str, **kwargs) -> Workload:
    """Resolve a workload reference.

    * ``examples:<kernel>`` — a shipped example kernel (``cutile-diag`` examples);
    * ``tilegym:<op>`` — a TileGym op through the installed ``tilegym`` package;
    * ``path/to/file.py::Name`` — a ``Workload`` subclass or instance in a user file
      (``path/to/file.py`` alone when the file defines exactly one);
    * ``replay:FOLDER`` — recorded launches (``cutile_diag.replay``), one configuration each.
    """
    ref = _stripped(ref)
    if ref.startswith("replay:"):
        # recorded launches (``cutile_diag.replay``): the kernel's module as it is now, on the recorded inputs
        wl = replay_workload(ref, **kwargs)
        wl.ref, wl.ref_kwargs = ref, dict(kwargs)
        return validate(wl, ref)
    if "kernel_specs" in kwargs:
        # a bare @ct.kernel at argument specs (roofline FILE.py::KERNEL, rebuilt in a measuring subprocess)
        from .kernel import KernelWorkload
        wl = KernelWorkload(ref, **kwargs)
        wl.ref, wl.ref_kwargs = ref, dict(kwargs)
        return wl
    if "::" not in ref and not ref.endswith(".py"):
        wl = resolve_builtin(ref, **kwargs)
        wl.ref, wl.ref_kwargs = wl.ref or ref, dict(kwargs)
        return validate(wl, ref)
    path, name = split_ref(ref)
    # a shipped example file named by its kernel maps to the example workload
    try:
        from ..examples import EXAMPLE_KERNELS, EXAMPLES_DIR
        if name and path.resolve().parent == EXAMPLES_DIR and name in \
                {k for ks in EXAMPLE_KERNELS.values() for k in ks} and f"examples:{name}" in BUILTIN:
            wl = resolve_builtin(f"examples:{name}", **kwargs)
            wl.ref, wl.ref_kwargs = f"examples:{name}", dict(kwargs)
            return validate(wl, ref)
    except OSError:
        pass
    module = import_file(path)   # KernelLoadError / UsageError with file:line on failure
    found = _workloads_in(module)
    if name is None:
        if len(found) == 1:
            name = next(iter(found))
        elif not found:
            raise WorkloadError(f"{path}: defines no Workload",
                                hint="subclass cutile_diag.workload.Workload, or use examples:<kernel> / tilegym:<op> "
                                     f"(built in: {', '.join(builtin_names())})")
        else:
            raise WorkloadError(f"{path} defines several workloads; name one with ::",
                                hint="one of " + ", ".join(sorted(found)))
    if not hasattr(module, name):
        hint = ("workloads here: " + ", ".join(sorted(found))) if found else "the file defines no Workload"
        raise WorkloadError(f"{path}: no workload named '{name}'", hint=hint)
    obj = getattr(module, name)
    if not (isinstance(obj, Workload) or _is_workload_class(obj)):
        if is_kernel(obj):
            raise WorkloadError(f"{path}::{name} is a @ct.kernel, not a workload",
                                hint=f"`{prog()} roofline FILE.py::KERNEL [--arg NAME=SPEC ...]` takes a bare kernel; "
                                     "other commands need a Workload (inputs, run, reference, flops, bytes) "
                                     "or a built-in one: " + ", ".join(builtin_names()))
        raise WorkloadError(f"{path}::{name} is {type(obj).__name__}, not a Workload")
    wl = instantiate(obj, f"{path}::{name}", kwargs)
    wl.ref, wl.ref_kwargs = f"{Path(path).resolve()}::{name}", dict(kwargs)
    return validate(wl, f"{path}::{name}")
