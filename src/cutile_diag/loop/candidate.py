"""A candidate step and its ledger key: shared by ``loop.choose`` and ``loop.composite``
(which builds candidates that ``choose`` offers), so that neither imports the other back."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from .backends import Version


@dataclass
class Candidate:
    """One version to evaluate: the files after the transform, what the transform returned, and its parameters."""
    version: Version
    result: Any                  # TransformResult, or a composite's (loop.composite)
    params: dict
    transform: str = ""          # what ran, when not the choice's transform (a composite: "a+b")


def transform_key(name: str, params: Mapping[str, Any]) -> str:
    """The ledger's key of a transform with its parameters: the name, then the parameters as sorted JSON."""
    return name + (json.dumps(dict(params), sort_keys=True, default=str) if params else "")
