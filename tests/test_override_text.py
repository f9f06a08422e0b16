"""Values Hydra's override grammar reads only quoted (``ü``, ``(``, quotes, backslashes): the
programs quote what they print and read what users type (cloudlstm.cli.override_text)."""

from __future__ import annotations

import shlex

import pytest

from cloudlstm.cli.override_text import as_override, hydra_quoted, override_text, shell_override

TEXTS = [
    "/runs/a", "/data/my run", "/data/dü", "/data/d(1)", "it's", 'say "x"', "a\\b", "a\\",
    "a\\'b", "\\\\", "2024", "1e3", "null", "a,b", "[x]", "$HOME/r", "", " lead",
]  # fmt: skip


# what the grammar reads unquoted as the same text
PLAIN = ("/runs/a", "/data/my run", "a\\b", "a\\", "$HOME/r", "")


@pytest.mark.parametrize("text", TEXTS)
def test_a_quoted_value_reads_back_as_the_text(text):
    assert override_text(f"k={hydra_quoted(text)}") == text


@pytest.mark.parametrize("text", TEXTS)
def test_an_override_is_quoted_only_where_the_plain_form_reads_otherwise(text):
    override = as_override("run", text)
    assert override_text(override) == text
    plain = f"run={text}"
    assert (override == plain) == (text in PLAIN)


@pytest.mark.parametrize("text", TEXTS)
def test_what_a_shell_passes_on_reads_back_as_the_text(text):
    [arg] = shlex.split(shell_override("run", text))
    assert override_text(arg) == text


def test_a_value_the_grammar_cannot_read_is_taken_as_typed():
    assert override_text("run=/data/dü (copy)") == "/data/dü (copy)"
    assert override_text("run=2024") == "2024"  # a number to the grammar, a folder here
