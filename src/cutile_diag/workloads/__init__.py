"""Workloads shipped with cutile-diag: one per example kernel, and TileGym ops by op name.

Public API::

    BUILTIN                         # "examples:matmul" -> factory(**kwargs) -> Workload
    builtin_names() -> list[str]
    resolve_builtin("examples:matmul", source="variant.py") -> Workload   # unknown arguments: WorkloadError
    resolve_builtin("matmul")       # a bare name works when exactly one built-in has it

Example workloads take ``source=`` (a copy of the example module, e.g. an optimisation
variant): its ``launch`` wrapper and kernels are used instead of the shipped ones.
TileGym workloads import ``tilegym`` lazily, so listing them needs no GPU or package.
"""
from __future__ import annotations

from typing import Callable

from ..workload import Workload, WorkloadError


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
                     "softmax", "gather_scale", "row_norm", "row_lse")
TILEGYM_WORKLOADS = ("softmax", "rms_norm", "matmul", "silu_and_mul")

BUILTIN: dict[str, Callable[..., Workload]] = {
    **{f"examples:{n}": _examples(n) for n in EXAMPLE_WORKLOADS},
    **{f"tilegym:{n}": _tilegym(n) for n in TILEGYM_WORKLOADS},
}


def builtin_names() -> list[str]:
    return list(BUILTIN)


def resolve_builtin(ref: str, **kwargs) -> Workload:
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
    wl = BUILTIN[key](**kwargs)
    wl.ref = key
    return wl
