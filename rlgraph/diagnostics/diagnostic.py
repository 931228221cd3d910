"""The Diagnostic value every pass returns, and the source Span it points at."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlgraph.diagnostics.codes import CODES


@dataclass(frozen=True)
class Span:
    """A region of source text. Lines and columns are 1-based; end_column is exclusive."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def point(cls, file: str, line: int = 1, column: int = 1) -> "Span":
        return cls(file, line, column, line, column + 1)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Diagnostic:
    code: str
    severity: str
    message: str
    span: Span
    hints: tuple[str, ...] = ()
    label: str = ""  # short text printed beside the caret
    notes: tuple[tuple[str, Span], ...] = field(default=())  # related places, e.g. "first defined here"

    def __post_init__(self):
        if self.code not in CODES:
            raise ValueError(f"unregistered diagnostic code {self.code!r}")

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def to_json(self) -> dict:
        return {
            "code": self.code,
            "severity": self.severity,
            "message": self.message,
            "file": self.span.file,
            "line": self.span.line,
            "column": self.span.column,
            "end_line": self.span.end_line,
            "end_column": self.span.end_column,
            "label": self.label,
            "hints": list(self.hints),
            "notes": [{"message": m, "file": s.file, "line": s.line, "column": s.column} for m, s in self.notes],
        }


def error(code: str, message: str, span: Span, *hints: str, label: str = "", notes=()) -> Diagnostic:
    return Diagnostic(code, CODES[code].severity, message, span, tuple(h for h in hints if h), label, tuple(notes))


def warning(code: str, message: str, span: Span, *hints: str, label: str = "", notes=()) -> Diagnostic:
    return Diagnostic(code, "warning", message, span, tuple(h for h in hints if h), label, tuple(notes))


def has_errors(diagnostics) -> bool:
    return any(d.is_error for d in diagnostics)
