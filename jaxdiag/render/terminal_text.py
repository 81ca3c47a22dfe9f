"""Text from traces, logs and saved reports, made safe for a terminal: the one place it is escaped.

Function, annotation, host and file names come from programs and files others
wrote. In a terminal two things in them would act rather than show: rich's
markup (``[link=http://…]``, ``[bold]``, and ``[/data/shard-1]``, which rich
rejects with ``MarkupError``) and control characters (``ESC [2J`` clears the
screen, ``ESC ]8;;…`` makes a link; C1 codes and bidirectional overrides reorder
or hide text). So:

- ``esc(value)``: every renderer passes each value it did not write itself
  through it before putting it into markup (a table cell, a ``console.print``);
- ``plain(value)``: for lines printed without rich (errors, ``typer.echo``);
- ``safe_console``, the console every terminal renderer prints on
  (``render.terminal.text_console``), applies both rules again to whatever it
  renders: control characters are shown as ``\\x1b`` and any markup tag that is
  not a plain style (``[bold]``, ``[/dim]``) is shown as written, so a value a
  renderer forgot to pass through ``esc`` can neither act nor crash the command.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

#: C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides and isolates.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: The tags our renderers write: style words only (``bold red``, ``/dim``, ``/``).
_STYLE_TAG = re.compile(r"/?(?:(?:bold|dim|italic|underline|reverse|red|green|yellow|cyan|blue|magenta)\s*)*")
_SAFE_CONSOLE: type | None = None


def plain(value: Any) -> str:
    """``str(value)`` with each control character (but tab and newline) written as ``\\xNN`` / ``\\uNNNN``."""
    return _CONTROL.sub(_shown, str(value))


def one_line(value: Any) -> str:
    """``plain(value)`` with each newline written as ``\\n``: an error is one line, whatever a file's key or name holds."""
    return plain(value).replace("\n", "\\n")


def esc(value: Any) -> str:
    """``plain(value)`` with rich's markup escaped: shown as written, never read as a tag."""
    from rich.markup import escape

    return escape(plain(value))


def safe_console(**kwargs: Any) -> "Console":
    """A rich ``Console(**kwargs)`` that shows control characters and any tag but a plain style as text."""
    global _SAFE_CONSOLE
    if _SAFE_CONSOLE is None:
        _SAFE_CONSOLE = _safe_console_class()
    console: Console = _SAFE_CONSOLE(**kwargs)
    return console


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _only_style_tags(markup: str) -> str:
    """``markup`` with every unescaped tag escaped (shown as text) but plain styles, opened before they close."""
    from rich.markup import RE_TAGS

    opened: list[str] = []

    def one(match: re.Match[str]) -> str:
        whole, backslashes, tag = match.groups()
        if len(backslashes) % 2:
            return str(whole)
        tag = tag.strip()
        if _STYLE_TAG.fullmatch(tag):
            if not tag.startswith("/"):
                opened.append(tag)
                return str(whole)
            name = tag[1:].strip() or (opened[-1] if opened else "")
            if name in opened:
                del opened[len(opened) - 1 - opened[::-1].index(name)]
                return str(whole)
        return f"{backslashes}\\{whole[len(backslashes) :]}"

    return str(RE_TAGS.sub(one, markup))


def _safe_console_class() -> type:
    from rich.console import Console
    from rich.text import Text

    class SafeConsole(Console):
        """Every string it renders passes ``plain`` and, where markup is on, ``_only_style_tags``."""

        def render_str(self, text: str, **kwargs: Any) -> Text:
            text = plain(text)
            if kwargs.get("markup", self._markup) is not False:
                text = _only_style_tags(text)
            return super().render_str(text, **kwargs)

    return SafeConsole
