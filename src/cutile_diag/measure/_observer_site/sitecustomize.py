"""cutile-diag's launch observer, loaded at interpreter start in the observed command.

``measure.observe.observe_command`` puts this folder first on the child's
PYTHONPATH.  It does three things and nothing else at start-up (no cutile_diag import):

1. hands over to the ``sitecustomize`` the interpreter would have loaded without us (the
   user's or the distribution's), with this folder taken off ``sys.path`` so it is found;
2. registers a one-shot import hook for ``cuda.tile``;
3. when ``cuda.tile`` has executed, replaces its ``launch`` with the recording one
   (``observe.install``), before any user module can bind ``from cuda.tile import launch``.
"""
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain_user_sitecustomize() -> None:
    me = sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    try:
        if importlib.util.find_spec("sitecustomize") is not None:
            import sitecustomize  # noqa: F401  (the user's own; its errors are its own)
    finally:
        if "sitecustomize" not in sys.modules and me is not None:
            sys.modules["sitecustomize"] = me
    sys.modules["_cutile_diag_observer_site"] = me


class _CuTileHook:
    """Meta-path finder that wraps ``cuda.tile``'s loader once, then leaves ``sys.meta_path``."""

    def find_spec(self, name, path=None, target=None):
        if name != "cuda.tile":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None) if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _install(module)

        loader.exec_module = exec_module
        return spec


def _install(module) -> None:
    src = os.environ.get("CUTILE_DIAG_OBSERVER_SRC")
    if importlib.util.find_spec("cutile_diag") is None and src:
        sys.path.append(src)          # last: never shadows anything of the user's
    try:
        from cutile_diag.measure.observe import install
    except Exception as e:           # observing must never break the user's program
        print(f"cutile-diag: launch observer not installed: {type(e).__name__}: {e}", file=sys.stderr)
        return
    install(module)


_chain_user_sitecustomize()
if os.environ.get("CUTILE_DIAG_LAUNCH_DIR"):
    sys.meta_path.insert(0, _CuTileHook())
