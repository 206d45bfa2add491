"""An audit hook (as source: a Ray worker's setup hook and a worker process's sitecustomize both
run it) that logs every file a process opens for writing or renames onto, under the campaign's
folder or in a worker's loop scratch folder, with the writer's pid: who writes what."""
from __future__ import annotations

_SOURCE = '''
import os, sys
def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(ch in mode for ch in "wax+")) or \\
            (isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR)))
    elif event in ("os.replace", "os.rename"):
        path, writes = args[1], True
    else:
        return
    if not writes or isinstance(path, int):
        return
    p = os.path.abspath(os.fsdecode(path))
    if p.startswith(WATCH + os.sep) or "cutile-diag-worker-loops-" in p:
        with open(LOG, "a") as f:
            f.write(f"{os.getpid()} {event} {p}\\n")
sys.addaudithook(_hook)
'''


def audit_source(watch: str, log: str) -> str:
    """Python source that installs the hook in the process that runs it."""
    return f"WATCH, LOG = {watch!r}, {log!r}\n" + _SOURCE
