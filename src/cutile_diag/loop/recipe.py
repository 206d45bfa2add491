"""A version as a set of transforms applied to the original source (the beam's unit: ``loop.beam``).

A history of applications amounts to one setting per transform: ``kernel_hints`` set to 8,
then 2, then 8 again is the set {kernel_hints{8}}.  Every set is built from the original
source in one canonical order, so that one set is one source (one digest, measured once),
whichever order the loop reached it in.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:      # the simulated backend reads sets too: no import of the backends here
    from .backends.base import Version

# steps that change only how arithmetic rounds: what was measured on the version before them
# is not worth measuring again on top of them (its outcome cannot have changed much)
ARITHMETIC = frozenset({"approx_div", "flush_to_zero", "exp_to_exp2"})


def name_of(key: str) -> str:
    """The transform name of a recipe key (the part before its JSON parameters)."""
    return key.split("{", 1)[0]


def params_of(key: str) -> dict:
    """The parameters of a recipe key ({} when it has none)."""
    name = name_of(key)
    return json.loads(key[len(name):]) if len(key) > len(name) else {}


def recipe(applied: Sequence[str]) -> tuple[str, ...]:
    """The set a history of applications amounts to: each transform's last setting, in the
    order the transform was first applied."""
    out: dict[str, str] = {}
    for key in applied:
        out[name_of(key)] = key
    return tuple(out.values())


def arithmetic_only(before: Sequence[str], after: Sequence[str]) -> bool:
    """``after`` differs from ``before`` only in arithmetic transforms (``ARITHMETIC``)."""
    changed = set(recipe(before)) ^ set(recipe(after))
    return bool(changed) and all(name_of(k) in ARITHMETIC for k in changed)


def build(keys: Sequence[str], original: Version, *, kernel_file: str, kernel: str,
          transforms: Mapping[str, Any]) -> Version | None:
    """The version the set ``keys`` makes of ``original``: applied in name order (else in the
    given order, for a precondition one step provides another); None when neither applies
    (a manual edit is not a transform that can be replayed)."""
    from .backends.base import Version
    keys = recipe(keys)
    if any(name_of(k) not in transforms for k in keys):
        return None
    for order in (sorted(keys, key=name_of), list(keys)):
        src = original.files[kernel_file]
        try:
            for k in order:
                src = transforms[name_of(k)].apply(src, kernel, **params_of(k)).new_source
        except Exception:
            continue
        return Version("", {**original.files, kernel_file: src}, None, tuple(order))
    return None
