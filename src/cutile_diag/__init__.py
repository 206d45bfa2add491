"""cutile-diag: make cuTile kernels faster on purpose."""
__version__ = "0.1.0"
