"""The one error every data problem raises: it names the file, the row, what is wrong and the fix."""

from __future__ import annotations


class DataError(Exception):
    """A dataset that cannot be used as it is.

    `file` is the path (or data name) at fault; `row` the 1-based row number in it (the line number
    for JSONL, the row number for parquet), or None when the problem is the whole file.
    """

    def __init__(self, message: str, *, file: str | None = None, row: int | None = None) -> None:
        super().__init__(message)
        self.file = file
        self.row = row
