"""Stage 5 — the diagnose-and-optimise loop (``cutile-diag optimize``, ``cutile-diag loop``).

The perf recipe, run by the tool: branch ``cutile-perf-<kernel>-<date>``; iteration 0 is
the unchanged kernel; each iteration applies one playbook step (a libcst transform from
``cutile_diag.transforms``, or a person's edit through ``loop record``), checks correctness,
measures the candidate against the last kept version interleaved on every configuration,
commits, records, and keeps or reverts by the recipe's rules.

Every edit, reset and commit happens in the loop's own git worktree (``worktree``); the user's
checkout is never written.

Modules::

    api        the entry point: optimize(OptimizeRequest) -> LoopResult, plan(...), and for an
               existing loop (LoopRef) next_step / record / status / recover / clean
    setup      create_session(kernel_ref, backend=..., options=...) -> (Session, Ledger)
    worktree   the loop's worktree: worktree_path, ensure, remove, loop_of
    imports    children run the worktree's code (PYTHONPATH) and report what they imported
    runner     Runner(session, backend, ledger, diagnoser=, transforms=, options=, hooks=)
               .start() / .run() -> LoopResult  (baseline, stop rules, the iteration cycle)
    choose     choose(diagnosis, kept_version, ...) -> Choice of Candidates
    evaluate   Evaluation: write, guard, capture/diff, verify, measure, decide, commit/reset, record
    recover    recover(session, ledger): close an interrupted iteration, in the worktree only
    manual     next_step(...), record_manual(...), status(...)
    backends/  base (Version, Workspace, Backend protocol), workload (+ worker), command, simulated
    decide     decide(comparison) -> Decision; stop_rules(decisions); RULES
    stats      interleaved paired-round comparison: compare(...) -> Comparison
    ledger     Ledger (ledger.jsonl), render_table / parse_table (perf_results.md)
    records    parse_records(text) for ``--print-record`` output
    locate     locate(path, kernel) -> KernelLocation
    git        Git (the CLI), repo_root
    diagnosis  EngineDiagnoser / ApplicabilityDiagnoser / ScriptedDiagnoser -> LoopDiagnosis
"""
from .decide import RULES, Decision, stop_rules
from .errors import (BackendError, CandidateCrash, DirtyTreeError, ForbiddenEditError, GitError, LoopError,
                     MeasurementTimeout)
from ..ledger import Ledger, parse_table, render_table

__all__ = ["RULES", "Decision", "stop_rules", "LoopError", "GitError", "DirtyTreeError",
           "ForbiddenEditError", "BackendError", "CandidateCrash", "MeasurementTimeout", "Ledger",
           "parse_table", "render_table"]
