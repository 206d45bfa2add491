"""Shared machinery of the loop's transforms: results, errors, kernel lookup, libcst helpers.

A *source transform* rewrites a cuTile kernel file with libcst (comments and formatting
of untouched code survive byte for byte); a *hint transform* leaves the source alone and
produces a ``kernel.replace_hints(...)`` dict.  Both answer ``applicable(source, kernel)``
with ``(bool, reason)`` and refuse — never guess — when a rewrite is ambiguous, already
done, or has nothing to act on.  The analysis they share (dtype inference, launch sites,
single-assignment tracing) lives in ``source.analysis``; the libcst model of the
kernel file (``load``, ``Kernel``, the helpers) in ``source.model``.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import libcst as cst

from ..source.model import Kernel, TransformError, TransformNotApplicable, TransformParamError, changed_lines, load

# ---------------------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class TransformResult:
    """What a source transform did.  ``changed_lines`` are 1-based lines of ``new_source``
    that are new or different (what a reviewer needs to look at)."""
    transform: str
    new_source: str
    description: str
    changed_lines: tuple[int, ...]
    params: dict[str, Any]
    notes: tuple[str, ...] = ()
    kind: ClassVar[str] = "source"


@dataclass(frozen=True)
class HintsResult:
    """What a hint transform chose: keyword arguments for ``kernel.replace_hints``."""
    transform: str
    hints: dict[str, Any]
    description: str
    params: dict[str, Any]
    notes: tuple[str, ...] = ()
    kind: ClassVar[str] = "hints"

    def apply_to(self, kernel):
        """The hinted kernel object (its own JIT cache; build it once, not per launch)."""
        return kernel.replace_hints(**self.hints)


# ---------------------------------------------------------------------------------------
# transforms


@dataclass
class Plan:
    """A transform's decision: the rewritten module (or hints) and what to say about it."""
    description: str
    params: dict[str, Any]
    module: cst.Module | None = None
    hints: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


# Transform._run's plans, least recently used first (a plan's module is an immutable libcst tree: shared safely)
_PLANS: OrderedDict = OrderedDict()
_PLANS_MAX = 2048


@dataclass(frozen=True)
class Transform:
    """Base of every transform.  Subclasses set ``name``/``playbook_id``/``summary`` as
    field defaults, declare ``PARAMS`` (name -> default) and implement ``_plan``."""
    name: str = ""
    playbook_id: str = ""
    summary: str = ""
    kind: ClassVar[str] = "source"
    PARAMS: ClassVar[dict[str, Any]] = {}

    # parameterised transforms without defaults (tile sizes, hint values): with no
    # parameters, ``applicable`` asks whether any candidate applies
    REQUIRES_PARAMS: ClassVar[bool] = False

    # transforms whose output can meet this one's precondition (read_once needs the tile loads
    # gather_to_load writes): the loop screens them applied together (loop.composite)
    ENABLED_BY: ClassVar[tuple[str, ...]] = ()

    # -- public API
    def applicable(self, source: str, kernel_name: str, **params) -> tuple[bool, str]:
        """(True, what it would do) when the transform applies with ``params``, else (False, why not); a parameterised
        transform given none asks whether any candidate applies."""
        if self.REQUIRES_PARAMS and not params:
            return self._probe(source, kernel_name)
        try:
            plan = self._run(source, kernel_name, params)
        except TransformNotApplicable as e:
            return False, e.reason
        return True, plan.description

    def apply(self, source: str, kernel_name: str, **params):
        """The rewritten source (or hints) for ``params``; raises ``TransformNotApplicable``, naming this transform,
        when it does not apply."""
        try:
            plan = self._run(source, kernel_name, params)
        except TransformNotApplicable as e:
            raise TransformNotApplicable(e.reason, transform=self.name) from None
        return self._result(source, plan)

    def candidates(self, source: str, kernel_name: str) -> list[dict[str, Any]]:
        """Parameter sets worth measuring, most promising first; [] if none applies."""
        ok, _ = self.applicable(source, kernel_name)
        return [{}] if ok else []

    def candidates_for(self, source: str, kernel_name: str, facts: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``candidates`` given the diagnosis's evidence facts of the version (``cubin.resident_ctas``
        ...); transforms whose settings depend on the compiled kernel override it."""
        return self.candidates(source, kernel_name)

    def why_no_candidates(self, source: str, kernel_name: str) -> str:
        """Why ``candidates`` came back empty (ask only then: it does not compute them again)."""
        if not self.REQUIRES_PARAMS:
            return self.applicable(source, kernel_name)[1]
        try:
            load(source, kernel_name)
        except TransformNotApplicable as e:
            return e.reason
        return self._why_no_candidates(source, kernel_name)

    def _probe(self, source: str, kernel_name: str) -> tuple[bool, str]:
        try:
            load(source, kernel_name)
        except TransformNotApplicable as e:
            return False, e.reason
        cands = self.candidates(source, kernel_name)
        if cands:
            shown = ", ".join(" ".join(f"{k}={v}" for k, v in c.items() if k != "overwrite") for c in cands[:6])
            return True, f"{len(cands)} candidate(s): {shown}" + (", ..." if len(cands) > 6 else "")
        return False, self._why_no_candidates(source, kernel_name)

    def _why_no_candidates(self, source: str, kernel_name: str) -> str:
        return "every candidate value is already set"

    # -- for subclasses
    def _plan(self, k: Kernel, params: dict[str, Any]) -> Plan:  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_params(self, params: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(params) - set(self.PARAMS))
        if unknown:
            accepted = ", ".join(self.PARAMS) or "none"
            raise TransformParamError(f"{self.name}: unknown parameter(s) {', '.join(unknown)}",
                                      hint=f"accepted: {accepted}")
        return {**self.PARAMS, **params}

    # -- plumbing
    def _run(self, source: str, kernel_name: str, params: dict[str, Any]) -> Plan:
        params = self._check_params(dict(params))
        # a beam step asks every frontier member whether every transform applies, and the next step asks again of
        # the same sources: a plan (or why there is none) is kept per transform, source and parameters
        key = (type(self), repr(self), kernel_name, repr(sorted(params.items())), source)
        got = _PLANS.get(key)
        if got is None:
            try:
                got = self._plan(load(source, kernel_name), params)
            except TransformNotApplicable as e:
                got = e
            _PLANS[key] = got
            if len(_PLANS) > _PLANS_MAX:
                _PLANS.pop(next(iter(_PLANS)))
        else:
            _PLANS.move_to_end(key)
        if isinstance(got, TransformNotApplicable):
            raise TransformNotApplicable(got.reason, transform=got.transform)
        return got

    def _result(self, source: str, plan: Plan):
        assert plan.module is not None
        new_source = plan.module.code
        if new_source == source:
            raise TransformNotApplicable("the rewrite changes nothing", transform=self.name)
        try:
            compile(new_source, "<transformed>", "exec")
        except SyntaxError as e:  # a bug in a transform, not the user's fault
            raise TransformError(f"{self.name}: internal error: produced invalid Python "
                                 f"(line {e.lineno}: {e.msg})") from None
        return TransformResult(transform=self.name, new_source=new_source,
                               description=plan.description,
                               changed_lines=changed_lines(source, new_source),
                               params=plan.params, notes=tuple(plan.notes))


@dataclass(frozen=True)
class HintTransform(Transform):
    """A transform whose result is a ``replace_hints`` dict; the source is never touched."""
    kind: ClassVar[str] = "hints"

    def _result(self, source: str, plan: Plan):
        assert plan.hints is not None
        return HintsResult(transform=self.name, hints=dict(plan.hints),
                           description=plan.description, params=plan.params,
                           notes=tuple(plan.notes))
