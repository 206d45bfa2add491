"""Tests of the TileIR parser and the structural differ (stage 2)."""
