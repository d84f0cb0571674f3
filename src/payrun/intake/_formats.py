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

__all__ = ["StyleDamage", "format_kind", "style_damage", "text_kind"]

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
_TEXT_SECTION = 3
_CONDITION = re.compile(r"\[[<>=]")
_DIGIT = re.compile(r"[0#?]")
_SEVERITY = {
    None: 0,
    Damage.FORMAT_ONE_PLACE: 1,
    Damage.FORMAT_NO_PENCE: 2,
    Damage.FORMAT_OTHER: 3,
    Damage.FORMAT_HIDES: 4,
}


def format_kind(code: str) -> Damage | None:
    """What a number format does to a positive number cell, or None when it shows it to the
    penny. Conditional formats (``[<1000]``) are judged by their most rounding section."""
    conditional = _CONDITION.search(code) is not None
    text = _LITERALS.sub("", code)
    sections = text.split(";")
    first = sections[0]
    if len(sections) > 1 and not first.strip():
        # ;;; or ;-0.00: a positive number looks empty
        return Damage.FORMAT_HIDES
    if "general" in first.lower() or first.strip() == "@":
        return None
    if _DATE.search(first):
        # A date or time: calamine reads the cell as a date
        return None
    if not _DIGIT.search(first):
        # "TBC", "-": text shown instead of the number
        return Damage.FORMAT_HIDES
    kinds = [_section_kind(section) for section in (sections[:2] if conditional else [first])]
    return max(kinds, key=lambda kind: _SEVERITY[kind])


def text_kind(code: str) -> Damage | None:
    """What a number format does to a text cell: only its fourth section applies."""
    sections = _LITERALS.sub("", code).split(";")
    if len(sections) >= _TEXT_SECTION + 1 and "@" not in sections[_TEXT_SECTION]:
        # 0;0;0; or 0;0;0;"X": the text is not shown
        return Damage.FORMAT_HIDES
    return None


def _section_kind(section: str) -> Damage | None:
    if "%" in section or "/" in section or "e+" in section.lower() or "e-" in section.lower():
        return Damage.FORMAT_OTHER
    if _SCALED.search(section):
        #  ,  0, shows thousands
        return Damage.FORMAT_OTHER
    places = _PLACES.search(section)
    shown = len(places.group(1)) if places else 0
    if shown >= _SHOWN_PLACES:
        return None
    return Damage.FORMAT_NO_PENCE if shown == 0 else Damage.FORMAT_ONE_PLACE


StyleDamage = dict[int, tuple[Damage | None, Damage | None]]
"""Cell style index -> (damage to a number cell, damage to a text cell)."""


def style_damage(styles_xml: bytes) -> StyleDamage:
    """The cell styles whose number format does damage (styles that do none left out).

    Only the stylesheet's own ``numFmts`` count: conditional formats (``dxfs``) have
    number formats of their own with the same ids.
    """
    root = ElementTree.fromstring(styles_xml)
    custom = _custom_formats(root)
    damage: StyleDamage = {}
    for child in root:
        if _local(child.tag) != "cellXfs":
            continue
        for index, xf in enumerate(x for x in child if _local(x.tag) == "xf"):
            number = xf.get("numFmtId", "0")
            code = custom.get(int(number)) if number.isdigit() else None
            if code is None and number.isdigit():
                code = _BUILT_IN.get(int(number))
            if code is not None:
                kinds = (format_kind(code), text_kind(code))
                if kinds != (None, None):
                    damage[index] = kinds
    return damage


def _custom_formats(root: ElementTree.Element) -> dict[int, str]:
    custom: dict[int, str] = {}
    for child in root:
        if _local(child.tag) == "numFmts":
            for element in child:
                number = element.get("numFmtId", "")
                if _local(element.tag) == "numFmt" and number.isdigit():
                    custom[int(number)] = element.get("formatCode", "")
    return custom


def _local(name: str) -> str:
    return name.rpartition("}")[2]
