"""Errors cutile-diag reports to people: one clear line, a non-zero exit, no traceback.

Every failure that is the user's input or environment (a missing file, a missing tool, a
kernel that does not compile) is raised as a ``CutileDiagError``; the CLI prints
``cutile-diag: error: <message>`` and exits with ``exit_code``.  Anything else is a bug
and keeps its traceback.
"""
from __future__ import annotations


class CutileDiagError(Exception):
    """The base of every error the CLI reports as one line (message and hint), exit code 2."""
    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message and hint on one line, whitespace collapsed."""
        text = " ".join(self.message.split())
        if self.hint:
            text += f" ({' '.join(self.hint.split())})"
        return text


class UsageError(CutileDiagError):
    """Bad command-line input: a malformed spec, an unknown arch, a missing file."""


class ToolNotFoundError(CutileDiagError):
    """A compiler/binary tool is not installed."""


class ToolFailedError(CutileDiagError):
    """A tool ran but failed or timed out."""


class KernelLoadError(CutileDiagError):
    """The kernel reference does not resolve to a ``@ct.kernel``."""


class CompileError(CutileDiagError):
    """cuTile rejected the kernel (type error, compile failure)."""


class ParseError(CutileDiagError):
    """An input file is not what it claims to be; carries file:line:column."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 column: int | None = None, hint: str | None = None):
        self.path, self.line, self.column = path, line, column
        where = ":".join(str(p) for p in (path, line, column) if p is not None)
        super().__init__(f"{where}: {message}" if where else message, hint=hint)


class NoGPUError(CutileDiagError):
    """The command needs a GPU and none is usable."""
