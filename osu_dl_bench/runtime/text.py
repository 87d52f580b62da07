"""Text made safe for a terminal or a written file: a path or value echoed in a message, a
library's version string."""

from __future__ import annotations

import unicodedata


def is_control(ch: str) -> bool:
    """C0/C1 controls, DEL and Unicode format characters (bidi overrides among them)."""
    return unicodedata.category(ch) in ("Cc", "Cf")


def printable(text: str) -> str:
    """``text`` with terminal controls escaped (a path or value echoed in a message could
    otherwise move the cursor, recolour or reorder what the user reads); newlines stay."""
    return "".join(ch if ch == "\n" or not is_control(ch) else ascii(ch)[1:-1] for ch in text)


def one_line(text: str) -> str:
    """``text`` as printable makes it, with newlines escaped too: a value that belongs on
    one line of a report (a host name) must not start a line of its own."""
    return printable(text).replace("\n", "\\n")
