"""Loaded by the loop's command children (its folder leads PYTHONPATH): at exit, appends to
$CUTILE_DIAG_IMPORT_AUDIT which files the process imported from the user's checkout instead
of the loop's worktree (see cutile_diag.loop.imports).  Then it hands over to any other
sitecustomize on the path, so the user's own one still runs."""
import atexit
import json
import os
import sys


def _report():
    try:
        # by file, not by package: the command's Python need not have cutile_diag installed
        import importlib.util
        spec = importlib.util.spec_from_file_location("_cutile_diag_imports",
                                                      os.path.join(_here, os.pardir, "imports.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        seen = mod.loaded_files()
    except Exception as e:        # never break the user's command over the audit
        seen = {"error": f"{type(e).__name__}: {e}"}
    try:
        with open(os.environ["CUTILE_DIAG_IMPORT_AUDIT"], "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "argv": sys.argv[:4], **seen}) + "\n")
    except (KeyError, OSError):
        pass


if os.environ.get("CUTILE_DIAG_IMPORT_AUDIT"):
    atexit.register(_report)

_here = os.path.dirname(os.path.abspath(__file__))
_saved = list(sys.path)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_me = sys.modules.pop("sitecustomize", None)
try:
    import sitecustomize  # noqa: F401  (the next one on the path, if any)
except ImportError:
    pass
finally:
    sys.path[:] = _saved
    # the import that loads this module looks its name up when it is done: without a next one, this
    # module stays under it (else every child printed "Error in sitecustomize ... KeyError")
    if "sitecustomize" not in sys.modules and _me is not None:
        sys.modules["sitecustomize"] = _me
