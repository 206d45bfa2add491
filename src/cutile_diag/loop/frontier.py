"""A bounded lookahead: a second frontier version for one more step.

A structural step (new loads, a new grid, a new loop shape) often pays only with the step
after it; measured alone it lands within noise or a little slower and the greedy walk
reverts it for good.  Under ``--until-roof`` / ``--continue`` such a step — correct, reverted
as ``insignificant`` or as a regression of at most ``--lookahead`` (default 5 %) — stays a
*frontier* for the next iteration: the next step is chosen on the kept version as always
and also on the frontier, and the frontier's candidates join the sweep as composites
(``loop.composite``: its step, then the next).  Everything is screened and confirmed against
the kept version, so what lands still follows the recipe: only a measured, significant
improvement over it.  A frontier lives one step: a composite built on one is never a
frontier itself.  It is read from the ledger (the previous iteration), so ``--resume`` sees it.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from ..ledger import IterationRecord
from .backends import Version
from .choose import Choice
from .composite import on_top

DEFAULT_LOOKAHEAD = 0.05

# transforms that change the kernel's structure (loads, grid, loop shape): the steps whose pay-off
# may need the next step; hints and arithmetic swaps stand or fall alone
STRUCTURAL = frozenset({"gather_to_load", "persistent_grid", "rows_per_block", "read_once", "tma_zero_padding",
                        "store_allow_tma_false", "group_m_swizzle"})


def is_structural(transform: str, transforms: Mapping[str, Any]) -> bool:
    """Every step of ``transform`` ("a+b" for a composite) is structural (a transform may say so
    itself with a ``structural`` attribute)."""
    return bool(transform) and all(getattr(transforms.get(t), "structural", t in STRUCTURAL)
                                   for t in transform.split("+"))


def frontier_record(iterations: list[dict], bound: float, transforms: Mapping[str, Any]) -> dict | None:
    """The previous iteration's record when it is a frontier: a structural, correct step that
    was reverted within ``bound`` (a ratio <= 1 + bound) and was not built on a frontier itself.
    Correct is the record's verification (``IterationRecord.check_passed``), not the table's text:
    a check that ran and passed, or a simulated pass, as it is for a keep."""
    if bound <= 0 or not iterations:
        return None
    r = iterations[-1]
    change = r.get("change") or {}
    ratio = (r.get("comparison") or {}).get("ratio")
    rule = (r.get("decision") or {}).get("rule")
    if (r.get("iteration", 0) == 0 or r.get("status") != "revert" or not IterationRecord.from_json(r).check_passed
            or rule not in ("insignificant", "regression", "cumulative-regression")
            or not isinstance(ratio, (int, float)) or ratio > 1.0 + bound
            or change.get("frontier") is not None or not (r.get("commits") or {}).get("candidate")
            or not is_structural(str(change.get("transform") or ""), transforms)):
        return None
    return r


def frontier_version(r: dict, show: Callable[[str, str], str], allowed: list[str]) -> tuple[Version, list[dict]]:
    """The frontier's files (from its kept-reachable commit) and its steps as composite parts."""
    commit = r["commits"]["candidate"]
    v = Version(f"frontier-{r['iteration']}", {p: show(commit, p) for p in allowed}, commit,
                tuple(r.get("applied") or ()))
    change = r.get("change") or {}
    parts = [dict(p, source=None) for p in change.get("parts") or []] or [
        {"entry": (r.get("entry") or {}).get("id") or "?", "transform": change.get("transform"),
         "params": change.get("params") or {}, "description": change.get("description") or ""}]
    return v, parts


def extend(choice: Choice | None, on_frontier: Choice | None, a: Version, *, kernel_file: str,
           frontier: tuple[Version, list[dict]], iteration: int, attempted: set, max_sweep: int) -> Choice | None:
    """The step to screen: the kept version's choice, with the frontier's choice beside it as
    composites on the kept version (or alone, when nothing applies to the kept version)."""
    if on_frontier is None:
        return choice
    fv, parts = frontier
    parts = [dict(p) for p in parts]
    parts[-1]["source"] = fv.files[kernel_file]
    comps = on_top(a, kernel_file, parts, on_frontier.candidates, entry=on_frontier.rec.id,
                   transform=on_frontier.transform.name, frontier=iteration, attempted=attempted)
    if not comps:
        return choice
    if choice is None:
        return Choice(on_frontier.rec, on_frontier.transform, comps[:max_sweep])
    room = max(1, max_sweep - len(choice.candidates))
    have = {c.version.digest for c in choice.candidates}
    return Choice(choice.rec, choice.transform, choice.candidates + [c for c in comps if c.version.digest not in have][:room])


def lookahead_choice(runner, a: Version, choice: Choice | None,
                     choose_on: Callable[[Version], Choice | None]) -> Choice | None:
    """``choice`` extended with the frontier's candidates when the previous iteration left one
    (the runner's options allow it: ``--until-roof`` or ``--continue``, ``lookahead`` > 0)."""
    opt = runner.opt
    if not (opt.until_roof is not None or opt.keep_going):
        return choice
    r = frontier_record(runner.led.iterations, float(opt.lookahead), runner.transforms)
    if r is None:
        return choice
    fv, parts = frontier_version(r, runner.git.show, list(runner.s.allowed))
    on_f = choose_on(fv)
    out = extend(choice, on_f, a, kernel_file=runner.s.kernel_file, frontier=(fv, parts),
                 iteration=int(r["iteration"]), attempted=runner.led.attempted(), max_sweep=runner.max_sweep())
    if out is not choice:
        runner.echo(f"  lookahead: iteration {r['iteration']}'s step ({(r.get('change') or {}).get('transform')}, "
                    f"ratio {r['comparison']['ratio']:.3f}) is a frontier: the next step is screened on it too")
    return out
