"""Stage 5 — the diagnose-and-optimise loop (``cutile-diag optimize``, ``cutile-diag loop``).

The perf recipe, run by the tool: branch ``cutile-perf-<kernel>-<date>``; iteration 0 is
the unchanged kernel; each iteration applies one playbook step (a libcst transform from
``loop.transforms``, or a person's edit through ``loop record``), checks correctness,
measures the candidate against the last kept version interleaved on every configuration,
commits, records, and keeps or reverts by the recipe's rules.

Modules::

    setup      create_session(kernel_ref, backend=..., options=...) -> (Session, Ledger)
    runner     Runner(session, backend, ledger, diagnoser=, transforms=, options=, hooks=)
               .start() / .run() -> LoopResult;  recover(session, ledger)
    manual     next_step(...), record_manual(...), status(...)
    backends   WorkloadBackend, CommandBackend, SimulatedBackend (+ SimSpec), Version, Workspace
    decide     decide(comparison) -> Decision; stop_rules(decisions); RULES
    stats      interleaved paired-round comparison: compare(...) -> Comparison
    ledger     Ledger (ledger.jsonl), render_table / parse_table (perf_results.md)
    records    parse_records(text) for ``--print-record`` output
    locate     locate(path, kernel) -> KernelLocation
    git        Git (the CLI), repo_root
    diagnosis  EngineDiagnoser / ApplicabilityDiagnoser / ScriptedDiagnoser -> LoopDiagnosis
    transforms the libcst rewrites (playbook items the loop applies by itself)
"""
from .decide import RULES, Decision, stop_rules
from .errors import (BackendError, CandidateCrash, DirtyTreeError, ForbiddenEditError, GitError, LoopError,
                     MeasurementTimeout)
from .ledger import Ledger, parse_table, render_table

__all__ = ["RULES", "Decision", "stop_rules", "LoopError", "GitError", "DirtyTreeError",
           "ForbiddenEditError", "BackendError", "CandidateCrash", "MeasurementTimeout", "Ledger",
           "parse_table", "render_table"]
