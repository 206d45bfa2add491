"""Resolve ``path/to/file.py::kernel_name`` to a ``@ct.kernel`` object."""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ..errors import KernelLoadError, UsageError
from ..source.ref import split_ref


@dataclass
class LoadedKernel:
    """A ``@ct.kernel`` imported from ``FILE.py::NAME``, with what capture reads from it."""
    ref: str            # as given
    path: Path          # absolute source file
    attr: str           # attribute name in the module
    kernel: object      # cuda.tile kernel object
    module: ModuleType

    @property
    def pyfunc(self):
        """The decorated Python function."""
        return self.kernel._pyfunc

    @property
    def function_name(self) -> str:
        """The function's ``__name__`` (may differ from the module attribute)."""
        return self.pyfunc.__name__

    @property
    def line(self) -> int:
        """The first line of the function (its ``def`` or decorator) in its file."""
        return self.pyfunc.__code__.co_firstlineno

    @property
    def param_names(self) -> list[str]:
        """The kernel's parameter names, in order."""
        return list(self.kernel._annotated_function.pysig.parameters)

    def constant_params(self) -> set[str]:
        """The parameters annotated ``ct.Constant[...]``."""
        ann = self.kernel._annotated_function
        names = list(ann.pysig.parameters)
        return {n for n, a in zip(names, ann.parameter_annotations) if getattr(a, "constant", False)}


def package_name(path: Path) -> tuple[Path, str] | None:
    """(folder to put on sys.path, dotted module name) when ``path`` lives in a package
    (its folder has an ``__init__.py``), else None.  Walks up while folders are packages."""
    path = path.resolve()
    parts = [] if path.name == "__init__.py" else [path.stem]
    d = path.parent
    if not (d / "__init__.py").is_file():
        return None
    while (d / "__init__.py").is_file() and d.name.isidentifier():
        parts.insert(0, d.name)
        d = d.parent
    if not all(p.isidentifier() for p in parts):
        return None
    return d, ".".join(parts)


def import_file(path: Path) -> ModuleType:
    """Import a kernel file (its source must stay on disk: cuTile reads it).

    A file inside a package (TileGym's ``src/tilegym/ops/cutile/*.py`` use ``from .utils
    import ...``) is imported as part of it, by its dotted name with the package root on
    ``sys.path``, so relative imports resolve; anything else is imported on its own."""
    path = path.resolve()
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if path.suffix != ".py":
        raise UsageError(f"{path}: not a Python file")
    pkg = package_name(path)
    if pkg is None:
        return _import_standalone(path)
    try:
        module = _import_in_package(path, *pkg)
    except KernelLoadError as e:
        # the package itself may not import (a missing optional dependency in an __init__):
        # a file without relative imports still loads standalone; otherwise the package's error is the one to see
        try:
            return _import_standalone(path)
        except KernelLoadError:
            raise e from None
    if module is not None:
        return module
    # an installed copy of the package is already imported in this process: the file alone is what was asked for
    try:
        return _import_standalone(path)
    except KernelLoadError as e:
        shadow = getattr(sys.modules.get(pkg[1].split(".")[0]), "__file__", None)
        raise KernelLoadError(f"{e.message}; {path} belongs to package {pkg[1].split('.')[0]}, but this process "
                              f"already imported that package from {shadow}") from None


def _same_file(module: ModuleType, path: Path) -> bool:
    f = getattr(module, "__file__", None)
    return bool(f) and Path(f).resolve() == path


def _import_in_package(path: Path, root: Path, dotted: str) -> ModuleType | None:
    top = dotted.split(".")[0]
    loaded = sys.modules.get(dotted)
    if loaded is not None:
        return loaded if _same_file(loaded, path) else None
    if top in sys.modules and not str(Path(getattr(sys.modules[top], "__file__", "") or "")).startswith(
            str(root) + "/"):
        return None
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        module = importlib.import_module(dotted)
    except SyntaxError as e:
        raise KernelLoadError(f"{e.filename or path}:{e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:  # the user's package raised at import
        raise _import_error(path, e) from None
    return module if _same_file(module, path) else None


def _import_standalone(path: Path) -> ModuleType:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    modname = f"_cutile_diag_user_{path.stem}_{digest}"
    if modname in sys.modules:
        return sys.modules[modname]
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    # sibling imports (`from helpers import x`) resolve like a script run from that folder
    added = str(path.parent) not in sys.path
    if added:
        sys.path.insert(0, str(path.parent))
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        del sys.modules[modname]
        raise KernelLoadError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    except Exception as e:  # the user's module raised at import
        del sys.modules[modname]
        raise _import_error(path, e) from None
    return module


def _import_error(path: Path, e: BaseException) -> KernelLoadError:
    tb = e.__traceback__
    line = None
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    where = f"{path}:{line}" if line else str(path)
    return KernelLoadError(f"{where}: importing the file raised {type(e).__name__}: {e}")


def is_kernel(obj) -> bool:
    """Whether ``obj`` is a cuda.tile kernel object (False when cuda.tile is not installed)."""
    try:
        from cuda.tile._execution import kernel as _kernel_cls
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, _kernel_cls)


def kernels_in(module: ModuleType) -> dict[str, object]:
    """The module's public ``@ct.kernel`` attributes by name."""
    return {n: v for n, v in vars(module).items() if is_kernel(v) and not n.startswith("_")}


def load_kernel(ref: str) -> LoadedKernel:
    """Import ``FILE.py[::NAME]`` and return its kernel; without NAME the file's only kernel.
    A missing file, name or a non-kernel attribute is one line with a hint."""
    path, name = split_ref(ref)
    module = import_file(path)
    found = kernels_in(module)
    if name is None:
        if len(found) == 1:
            name = next(iter(found))
        elif not found:
            raise KernelLoadError(f"{path}: defines no @ct.kernel function")
        else:
            raise UsageError(f"{path} defines several kernels; name one with ::",
                             hint="one of " + ", ".join(sorted(found)))
    if not hasattr(module, name):
        hint = ("kernels here: " + ", ".join(sorted(found))) if found else "the file defines no @ct.kernel"
        raise KernelLoadError(f"{path}: no kernel named '{name}'", hint=hint)
    obj = getattr(module, name)
    if not is_kernel(obj):
        what = "a plain function" if inspect.isfunction(obj) else type(obj).__name__
        raise KernelLoadError(f"{path}::{name} is {what}, not a @ct.kernel",
                              hint="decorate it with @ct.kernel")
    return LoadedKernel(ref=ref, path=path.resolve(), attr=name, kernel=obj, module=module)
