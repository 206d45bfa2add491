"""Renderers of a DiffResult, kept apart from the engine: rich text, JSON, HTML."""
from .html_render import render_html
from .json_render import to_json
from .rich_render import render

__all__ = ["render", "render_html", "to_json"]
