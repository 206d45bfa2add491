"""The loop's capture of one version, in a killable child: ``python -m cutile_diag.loop.capture_child
JOB.json RESULT.json`` (``integrations.capture_version`` starts it; a tileiras crash or hang
costs the iteration's budget, never the loop process).

JOB: ``{"ref": "FILE.py::KERNEL", "out_dir", "name", "archs": [...], "args": ["NAME=SPEC", ...],
"workload", "workload_kwargs", "config", "command"}`` (the last four: where the arguments come
from without specs, ``measure.capture.capture_auto``).
RESULT: ``{"ok": true, "path", "source", "tried"}`` or ``{"ok": false, "error": one line,
"missing_specs": bool}`` (the kernel lacks argument specs: the caller names its own flags).
A crash writes no RESULT and leaves its traceback on stderr for the parent to quote.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..capture.aot import capture_aot
from ..capture.artifacts import incomplete_error
from ..capture.spec import MissingSpecsError, parse_assignments
from ..errors import CutileDiagError
from ..measure.capture import capture_auto
from ..output import write_atomic

# what `capture FILE::KERNEL` says beside its --arg hint; the loop's note names its own flags
SPECS_ALTERNATIVE = " (or --workload REF: the arguments of its launch)"


def capture(job: dict) -> dict:
    """Capture ``job["ref"]`` into ``out_dir/name``: specs (``args``, else CAPTURE_SPECS), or
    ``capture_auto``'s sources when the job names a workload or a command."""
    try:
        specs = parse_assignments(job.get("args") or []) or None
        archs, out_dir, name = job.get("archs") or ["sm_90"], Path(job["out_dir"]), job["name"]
        source, tried = "", []
        if job.get("workload") or job.get("command"):
            auto = capture_auto(job["ref"], specs, workload=job.get("workload"),
                                workload_kwargs=job.get("workload_kwargs") or {}, config=job.get("config"),
                                command=job.get("command"), archs=archs, out_dir=out_dir, name=name)
            folder, source, tried = auto.folder, auto.source, list(auto.tried)
        else:
            folder = capture_aot(job["ref"], specs, archs=archs, out_dir=out_dir, name=name,
                                 specs_alternative=SPECS_ALTERNATIVE)
        if folder.manifest.get("incomplete"):
            raise incomplete_error([folder])
        return {"ok": True, "path": str(folder.path), "source": source, "tried": tried}
    except CutileDiagError as e:
        return {"ok": False, "error": e.one_line(), "missing_specs": isinstance(e, MissingSpecsError)}


def main(argv: list[str] | None = None) -> int:
    """Run the JOB file's capture and write the RESULT file; 2 on a wrong argument count."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        print("usage: python -m cutile_diag.loop.capture_child JOB.json RESULT.json", file=sys.stderr)
        return 2
    result = capture(json.loads(Path(argv[0]).read_text()))
    write_atomic(Path(argv[1]), json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
