"""Numeric command-line options, validated to one-line UsageErrors.

Parsed here, not by argparse (``type=float``), whose errors are a usage block rather than
one line; and argparse's ``float`` takes ``nan`` and ``inf``, which no option means.
"""
from __future__ import annotations

import math

from ..errors import UsageError


def number_arg(flag: str, text, *, low: float = 0.0, strict: bool = True, integer: bool = False):
    """A finite number above ``low`` (or at least it when not strict); None when not given."""
    if text is None:
        return None
    try:
        v = int(text) if integer else float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{flag}: '{text}' is not {'an integer' if integer else 'a number'}") from None
    if not math.isfinite(v) or (v <= low if strict else v < low):
        raise UsageError(f"{flag}: must be a finite number {'>' if strict else '>='} {low:g}, not {text}")
    return v


def positive_arg(flag: str, text, *, integer: bool = False):
    """``number_arg(flag, text)`` > 0, worded "FLAG must be a positive number|integer, not 'TEXT'"."""
    try:
        return number_arg(flag, text, integer=integer)
    except UsageError:
        raise UsageError(f"{flag} must be a positive {'integer' if integer else 'number'}, not '{text}'") from None
