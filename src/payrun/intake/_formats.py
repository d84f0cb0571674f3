"""Number formats that show a cell as something other than its value.

Input: a workbook's ``xl/styles.xml``. Output: the cell style indexes (the ``s`` of a
``<c>``) whose number format shows a number rounded to whole pounds or to one decimal
(``#,##0`` shows 1499.60 as 1,500), as another number (percent, fraction, scaled by
thousands, scientific), or hides the cell (``;;;``), with the ``Damage`` that says so.
Validation then refuses an amount shown differently from what would be paid, and any
payment cell a format hides. Date formats are left out: calamine reads those cells as
dates already.
"""

from __future__ import annotations

import re
from xml.etree import ElementTree

from payrun.intake._damage import Damage

__all__ = ["format_kind", "style_damage"]

_BUILT_IN = {
    1: "0",
    3: "#,##0",
    5: "#,##0;-#,##0",
    6: "#,##0;[Red]-#,##0",
    9: "0%",
    10: "0.00%",
    11: "0.00E+00",
    12: "# ?/?",
    13: "# ??/??",
    37: "#,##0 ;(#,##0)",
    38: "#,##0 ;[Red](#,##0)",
    41: '_(* #,##0_);_(* (#,##0);_(* "-"_);_(@_)',
    42: '_("£"* #,##0_);_("£"* (#,##0);_("£"* "-"_);_(@_)',
    48: "##0.0E+0",
}
"""Built-in formats that matter here (the others: General, 2 decimals, dates, text)."""
_LITERALS = re.compile(r'"[^"]*"|\\.|\[[^\]]*\]|_.|\*.')
_DATE = re.compile(r"[ymdhs]", re.IGNORECASE)
_SCALED = re.compile(r"[0#?],+(?![0#?,])")
_PLACES = re.compile(r"\.([0#?]*)")
_SHOWN_PLACES = 2


def format_kind(code: str) -> Damage | None:
    """What a number format does to a money value, or None when it shows it to the penny."""
    text = _LITERALS.sub("", code)
    sections = text.split(";")
    if len(sections) > 1 and not any(section.strip() for section in sections):
        return Damage.FORMAT_HIDES  # ;;; and the like: the cell looks empty
    first = sections[0]
    if not first.strip() or first.strip().lower() == "general" or first.strip() == "@":
        return None
    if "%" in first or "/" in first or "e+" in first.lower() or "e-" in first.lower():
        return Damage.FORMAT_OTHER
    if _DATE.search(first):
        return None  # a date or time: calamine reads the cell as a date
    if _SCALED.search(first):
        return Damage.FORMAT_OTHER  # #,##0, shows thousands
    places = _PLACES.search(first)
    shown = len(places.group(1)) if places else 0
    if shown >= _SHOWN_PLACES:
        return None
    return Damage.FORMAT_NO_PENCE if shown == 0 else Damage.FORMAT_ONE_PLACE


def style_damage(styles_xml: bytes) -> dict[int, Damage]:
    """Cell style index -> the damage its number format does (styles that do none left out)."""
    root = ElementTree.fromstring(styles_xml)
    custom: dict[int, str] = {}
    damage: dict[int, Damage] = {}
    for element in root.iter():
        if _local(element.tag) == "numFmt":
            number = element.get("numFmtId", "")
            if number.isdigit():
                custom[int(number)] = element.get("formatCode", "")
    for element in root.iter():
        if _local(element.tag) != "cellXfs":
            continue
        for index, xf in enumerate(x for x in element if _local(x.tag) == "xf"):
            number = xf.get("numFmtId", "0")
            code = custom.get(int(number)) if number.isdigit() else None
            if code is None and number.isdigit():
                code = _BUILT_IN.get(int(number))
            kind = format_kind(code) if code is not None else None
            if kind is not None:
                damage[index] = kind
    return damage


def _local(name: str) -> str:
    return name.rpartition("}")[2]
