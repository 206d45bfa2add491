"""Renderers of a DiffResult, kept apart from the engine: rich text, JSON, HTML."""
from .html_render import render_html
from .json_render import to_json
from .rich_render import render, render_summary

__all__ = ["render", "render_summary", "render_html", "to_json"]
