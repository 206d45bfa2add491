"""CLI subcommands, one module each (see cutile_diag.cli)."""
