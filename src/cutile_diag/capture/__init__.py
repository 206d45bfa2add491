"""Stage 1 — capture: IR dumps of cuTile kernels.

* ``aot``      — ahead of time, on any machine: hand-built ``KernelSignature`` +
  ``cuda.tile.compilation.export_kernel`` → bytecode, then the artifact pipeline;
* ``run_mode`` — from a real run: a command executed with the dump variables set and an
  isolated cuTile cache, every compiled kernel collected;
* ``cache``    — mining a cuTile disk cache (every cubin embeds its TileIR and PTX).

All three end in ``artifacts.write_capture`` which writes one folder per kernel with a
schema-versioned ``manifest.json`` (see ``manifest``).
"""
