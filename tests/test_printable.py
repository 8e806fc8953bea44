"""One escape for every output: every character Unicode calls a control, a format
character or a line/paragraph separator is written as its escape, in the terminal,
report.md, report.html and the progress lines; everything else is left as it is."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from nsbridge import progress
from nsbridge.guard.printable import printable
from nsbridge.report.document.escape import md_cell, terminal

HIDDEN = [chr(c) for c in range(sys.maxunicode + 1)
          if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp")]


def test_every_hidden_character_is_escaped() -> None:
    assert len(HIDDEN) > 150            # C0, DEL, C1, bidi, zero-width, tags, ...
    for ch in HIDDEN:
        shown = printable(f"a{ch}b")
        assert shown.isascii() and shown.startswith("a\\") and shown.endswith("b"), hex(ord(ch))
        assert shown[1:-1].encode().decode("unicode_escape") == ch   # the escape names it


@pytest.mark.parametrize("ch", ["\u061c", "\u200b", "\ufeff", "\u00ad", "\u202e", "\u2066",
                                "\x9b", "\x1b", "\u2028", "\U000e0041"])
def test_the_characters_that_hid_before_are_escaped_in_every_view(ch: str) -> None:
    name = f"aten::m{ch}m"
    assert ch not in terminal(name) and ch not in md_cell(name)


def test_visible_text_is_unchanged() -> None:
    for text in ("aten::addmm", "müller/ü.py", "日本語", "µs ±3% → x", "emoji 🚀", "tab-free"):
        assert printable(text) == text


def test_progress_lines_escape_the_scripts_name(capsys: pytest.CaptureFixture[str]) -> None:
    progress.enable(True)
    try:
        with progress.step("running evil\x1b[2J\u202e.py", script_output=True):
            pass
    finally:
        progress.enable(False)
    err = capsys.readouterr().err
    assert "\x1b[2J" not in err and "\u202e" not in err
    assert "evil\\x1b[2J\\u202e.py" in err
