"""The kernel's source, read with libcst: the bottom layer that capture, diagnose and the loop share."""
