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


def add_budget(group, help: str, metavar: str | None = "S") -> None:
    """``--budget`` (seconds per iteration) for optimize, campaign and ``loop record``: parsed
    here, read by ``loop_overrides``, validated in ``LoopOptions`` with the loop's other options."""
    group.add_argument("--budget", type=float, default=None, metavar=metavar, help=help)


def _ids(text: str | None) -> list[str]:
    return [x.strip().upper() for x in (text or "").split(",") if x.strip()]


def loop_overrides(args):
    """The loop flags a command registered (optimize, campaign, ``loop record``) as the typed
    ``LoopOverrides``; a flag the command lacks, or not given, stays unset."""
    from ..loop.api import LoopOverrides

    def get(name):
        return getattr(args, name, None)
    return LoopOverrides(
        max_iterations=get("max_iterations"), iteration_budget_s=get("budget"), rounds=get("rounds"),
        max_sweep=get("max_sweep"), lookahead=get("lookahead"), beam=get("beam"), until_roof=get("until_roof"),
        time_limit_s=get("time_limit"), capture_workload=get("capture_workload") or None,
        keep_going=True if get("keep_going") else None, capture=False if get("no_capture") else None,
        archs=get("arch") or None, capture_args=get("capture_arg") or None,
        only=_ids(get("only")) or None, skip=_ids(get("skip")) or None)
