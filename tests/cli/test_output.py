"""What the CLI prints of text it did not write: literally, without markup or terminal control."""

from __future__ import annotations

from mleforge.cli.output import print_table, terminal_safe


def test_a_column_and_cells_that_look_like_markup_print_literally(capsys):
    print_table("[bold]title[/]", ["[/x]", "value"], [["[/x]", "[red]not red[/red]"], ["[link=x]y", None]])
    out = capsys.readouterr().out
    for literal in ("[/x]", "[red]not red[/red]", "[link=x]y", "[bold]title[/]"):
        assert literal in out


def test_escape_sequences_and_control_characters_are_stripped():
    hostile = ("a\x1b[31mred\x1b[0m b\x1b]0;retitled\x07 c\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ "
               "d\x1b[2J\x1b[H e\rover\x08\x07 f\x9b31m g\x1bPdcs\x1b\\ h\x1b7\x1b8 i\x00\x7f")
    safe = terminal_safe(hostile)
    assert "\x1b" not in safe and "\x9b" not in safe and "\r" not in safe
    assert all(ch in "\n\t" or (ord(ch) >= 0x20 and not 0x7F <= ord(ch) <= 0x9F) for ch in safe)
    assert safe == "ared b clink d eover f31m g h i"
    assert terminal_safe("rows\tcols\nnext line ünïcödé") == "rows\tcols\nnext line ünïcödé"


def test_print_table_strips_control_characters_from_cells(capsys):
    print_table("t", ["a\x1b[31m"], [["x\x1b]0;pwned\x07y"]])
    out = capsys.readouterr().out
    assert "\x1b" not in out and "xy" in out


def test_floats_read_to_the_precision_asked_five_digits_by_default(capsys):
    """The CLI's tables keep 5 significant digits; the benchmarks' (benchmarks/_record.py) ask 4,
    as the docs' results pages show them."""
    from io import StringIO

    from rich.console import Console

    from mleforge.cli.output import fmt

    assert (fmt(0.123456), fmt(0.123456, 4), fmt(12345.678, 4)) == ("0.12346", "0.1235", "1.235e+04")
    assert (fmt(None, 4), fmt(True, 4), fmt([1, 2], 4), fmt(3, 4)) == ("-", "yes", "1, 2", "3")
    elsewhere = StringIO()
    print_table("t", ["x"], [[0.123456]], precision=4, out=Console(file=elsewhere, width=80))
    assert "0.1235" in elsewhere.getvalue() and "0.12346" not in elsewhere.getvalue()
    assert capsys.readouterr().out == ""  # on the console given, not stdout
