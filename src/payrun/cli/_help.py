"""A command's --help laid out for a person: options in titled groups, examples at the end.

``group_options`` sorts a parser's options into the groups a table names (the one place a
command lists them: an option added later by any module lands in its group by name, or
under "other options" until the table names it). ``HelpFormatter`` wraps the description
and keeps the epilog's indented lines (the examples) as written.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence

__all__ = ["HelpFormatter", "OptionGroup", "group_options"]

OptionGroup = tuple[str, str, Sequence[str]]
"""A group's title, its one-line description, and its options by any of their names."""


class HelpFormatter(argparse.HelpFormatter):
    """argparse's layout; in the description and epilog, an indented line is kept as it is
    (an example command), other paragraphs are wrapped to the width."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines: list[str] = []
        for paragraph in text.split("\n\n"):
            if lines:
                lines.append("")
            for line in paragraph.splitlines() or [""]:
                if line.startswith(" "):
                    lines.append(indent + line)
                else:
                    lines.extend(
                        textwrap.wrap(line, width, initial_indent=indent, subsequent_indent=indent)
                        or [""]
                    )
        return "\n".join(lines)


def group_options(parser: argparse.ArgumentParser, groups: Sequence[OptionGroup]) -> None:
    """Move ``parser``'s options into ``groups``, shown in that order after the positional
    arguments; options no group names stay under "other options" (with -h), shown last."""
    # argparse has no public way to regroup actions already added
    plain = parser._optionals  # noqa: SLF001
    by_name = {
        name: action
        for action in plain._group_actions
        for name in action.option_strings  # noqa: SLF001
    }
    made = []
    for title, description, names in groups:
        group = parser.add_argument_group(title, description)
        for name in names:
            action = by_name.get(name)
            if action is not None and action in plain._group_actions:  # noqa: SLF001
                plain._group_actions.remove(action)  # noqa: SLF001
                group._group_actions.append(action)  # noqa: SLF001
        made.append(group)
    plain.title = "other options"
    # Positional arguments first, then the groups, then what no group names
    others = [g for g in parser._action_groups if g is not plain and g not in made]  # noqa: SLF001
    parser._action_groups[:] = [*others, *made, plain]  # noqa: SLF001
