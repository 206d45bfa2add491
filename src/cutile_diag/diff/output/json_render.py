"""JSON rendering: a stable, documented shape (schema ``cutile-diag.ir-diff/1``).

Top level: ``schema``, ``equivalent`` (bool), ``summary``, ``before`` / ``after`` (inputs),
``entries`` (pairing), ``changes`` (semantic, unclassified-structural and cubin changes:
``kind``, ``level``, ``where`` (one line: Python file:line and region) and its parts
``entry`` / ``region_path`` / ``op`` / ``line_before`` / ``line_after`` / ``source``,
``before``, ``after``, ``detail``, ``knob`` / ``arch`` when known), ``structural`` (every
attribute / added / removed / moved / rewired delta with canonical texts, its fields and
the ids of the changes that explain it), ``regions`` (op-count deltas), ``cubin`` (facts
per arch) and ``warnings``.
"""
from __future__ import annotations

from ..model import DiffResult


def to_json(r: DiffResult) -> dict:
    """The result's ``--json`` form."""
    return r.to_json()
