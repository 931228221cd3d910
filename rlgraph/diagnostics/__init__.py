"""Diagnostics: a stable code registry, the Diagnostic value, and its renderers."""

from rlgraph.diagnostics.codes import CODES, Code
from rlgraph.diagnostics.diagnostic import Diagnostic, Span, error, has_errors, warning
from rlgraph.diagnostics.render import render, render_concise, render_full, render_json

__all__ = [
    "CODES", "Code", "Diagnostic", "Span", "error", "warning", "has_errors",
    "render", "render_full", "render_concise", "render_json",
]
