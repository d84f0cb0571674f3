"""Blank batch templates, generated from the one column specification (``COLUMNS``).

Input: a template name (``payroll`` or ``suppliers``) and a format (``csv`` or ``xlsx``).
Output: the template's bytes, identical on every call (templates/ in the repository is
checked against them). The .xlsx formats the sort code, account number and other
digit columns as Text and the amount as money, so Excel cannot damage what is typed.
Raises ``ConfigError`` for an unknown name or format.
"""

from __future__ import annotations

import datetime as dt
import io
import zipfile
from pathlib import Path
from typing import Any

from payrun.errors import ConfigError
from payrun.validation import COLUMNS, ColumnSpec

__all__ = ["TEMPLATES", "TEMPLATE_FORMATS", "render_template", "write_template"]

_PAYMENT = frozenset(
    {"payee_name", "sort_code", "account_number", "amount", "reference", "source_account"}
)
_TEMPLATE_COLUMNS: dict[str, frozenset[str]] = {
    "payroll": _PAYMENT | {"row_id"},
    "suppliers": _PAYMENT | {"row_id", "currency"},
}
TEMPLATES: dict[str, tuple[str, ...]] = {
    name: tuple(spec.name for spec in COLUMNS if spec.name in names)
    for name, names in _TEMPLATE_COLUMNS.items()
}
"""Each template's columns, in the one order of ``COLUMNS`` (the same in every template);
every name is a canonical column."""
TEMPLATE_FORMATS = ("csv", "xlsx")
_TEXT_FORMAT = "@"
_MONEY_FORMAT = "#,##0.00"
_TEXT_COLUMNS = frozenset({"sort_code", "account_number", "source_account", "row_id", "reference"})
_FIXED_TIME = dt.datetime(2026, 1, 1)
_ZIP_TIME = (2026, 1, 1, 0, 0, 0)
_WIDE = 24
_WIDE_COLUMNS = frozenset({"payee_name", "reference", "source_account"})
_NARROW = 16


def render_template(name: str, fmt: str = "csv") -> bytes:
    """Return the named template in ``fmt`` (``csv`` or ``xlsx``)."""
    columns = _columns(name)
    if fmt == "csv":
        return (",".join(columns) + "\r\n").encode("utf-8")
    if fmt == "xlsx":
        return _xlsx(columns)
    msg = f"unknown template format {fmt!r}: use one of {', '.join(TEMPLATE_FORMATS)}"
    raise ConfigError(msg)


def write_template(name: str, fmt: str, path: Path | str) -> Path:
    """Write the template to ``path`` and return the path."""
    target = Path(path)
    data = render_template(name, fmt)
    try:
        target.write_bytes(data)
    except OSError as exc:
        msg = f"cannot write the template {target}: {exc.strerror or exc}"
        raise ConfigError(msg) from exc
    return target


def _columns(name: str) -> tuple[str, ...]:
    if name not in TEMPLATES:
        msg = f"unknown template {name!r}: use one of {', '.join(TEMPLATES)}"
        raise ConfigError(msg)
    return TEMPLATES[name]


def _xlsx(columns: tuple[str, ...]) -> bytes:
    # Only templates write xlsx
    from openpyxl import Workbook  # type: ignore[import-untyped]
    from openpyxl.styles import Font  # type: ignore[import-untyped]
    from openpyxl.utils import get_column_letter  # type: ignore[import-untyped]

    book = Workbook()
    sheet = book.active
    sheet.title = "payments"
    specs = {spec.name: spec for spec in COLUMNS}
    for index, column in enumerate(columns, start=1):
        letter = get_column_letter(index)
        cell = sheet.cell(row=1, column=index, value=column)
        cell.font = Font(bold=True)
        dimension = sheet.column_dimensions[letter]
        dimension.width = _WIDE if column in _WIDE_COLUMNS else _NARROW
        if column == "amount":
            dimension.number_format = _MONEY_FORMAT
        elif column in _TEXT_COLUMNS:
            dimension.number_format = _TEXT_FORMAT
    sheet.freeze_panes = "A2"
    _add_guide(book, [specs[column] for column in columns])
    book.properties.creator = "payrun"
    book.properties.created = _FIXED_TIME
    return _stable_zip(_save(book))


def _add_guide(book: Any, specs: list[ColumnSpec]) -> None:
    """A second sheet that explains each column (the first sheet is the one read)."""
    guide = book.create_sheet("columns")
    guide.append(["column", "required", "meaning"])
    for spec in specs:
        guide.append([spec.name, "yes" if spec.required else "no", spec.description])
    guide.column_dimensions["A"].width = _NARROW
    guide.column_dimensions["C"].width = 80


def _save(book: Any) -> bytes:
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


def _stable_zip(data: bytes) -> bytes:
    """Rewrite the zip with fixed timestamps: openpyxl stamps 'now' into core.xml and entries."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for entry in source.infolist():
            content = source.read(entry.filename)
            if entry.filename == "docProps/core.xml":
                content = _fix_modified(content)
            info = zipfile.ZipInfo(entry.filename, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            target.writestr(info, content)
    return out.getvalue()


def _fix_modified(core: bytes) -> bytes:
    start = core.find(b"<dcterms:modified")
    end = core.find(b"</dcterms:modified>", start)
    if start < 0 or end < 0:
        return core
    opening = core.find(b">", start) + 1
    stamp = _FIXED_TIME.strftime("%Y-%m-%dT%H:%M:%SZ").encode()
    return core[:opening] + stamp + core[end:]
