"""Bounded, validated input before any work: each error names the field and what to do."""

from __future__ import annotations

import os
import time

import pytest

from wavewait.core import messages
from wavewait.core.errors import BadInput
from wavewait.core.ids import check_id, check_name, check_type, check_word
from wavewait.core.limits import (
    MAX_ARG_BYTES,
    MAX_DATA_BYTES,
    MAX_LIST_LEN,
    MAX_MESSAGE_BYTES,
    MAX_PATH_BYTES,
    check_argv,
    check_data,
    check_list,
    check_path,
    check_text,
    shown,
)

from coretools import crew

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("bad", ["abc\n", "abc\r\n", "abc ", " abc", "ab\tc", "ab\x00c", "abc\x7f", "ab/c", "a..b"])
def test_an_id_with_a_trailing_newline_or_control_character_is_refused(bad):
    with pytest.raises(BadInput, match=r"^agent: "):
        check_id(bad, "agent")


@pytest.mark.parametrize("bad", ["worker\n", "worker ", " worker", "wor\x1bker", "wor\x85ker", "a/b", "   "])
def test_a_name_with_control_characters_or_outer_whitespace_is_refused(bad):
    with pytest.raises(BadInput, match=r"^name: "):
        check_name(bad)


def test_a_name_may_hold_inner_spaces_and_any_letters():
    assert check_name("file reader — ü 2") == "file reader — ü 2"


def test_an_item_type_with_a_trailing_newline_is_refused():
    with pytest.raises(BadInput, match=r"^type: "):
        check_type("message\n")


def test_a_message_of_1_mib_is_taken_and_one_byte_more_is_refused_saying_the_bound():
    assert check_text("x" * MAX_MESSAGE_BYTES, "message")
    with pytest.raises(BadInput, match=r"^message: at most 1\.0 MiB .* in a file"):
        check_text("x" * (MAX_MESSAGE_BYTES + 1), "message")
    # bytes, not characters: 300,000 four-byte characters are 1.14 MiB
    with pytest.raises(BadInput, match=r"1\.0 MiB"):
        check_text("\U0001f600" * 300_000, "message")


def test_a_50_mb_message_is_refused_at_once():
    body = "x" * 50_000_000
    started = time.monotonic()
    with pytest.raises(BadInput, match=r"message: at most 1\.0 MiB"):
        check_text(body, "message")
    assert time.monotonic() - started < 0.1


def test_paths_are_bounded_to_4_kib_and_may_not_hold_nul():
    assert check_path("a" * MAX_PATH_BYTES)
    with pytest.raises(BadInput, match=r"^changes\[3\]: at most 4096 bytes"):
        check_path("a" * (MAX_PATH_BYTES + 1), "changes[3]")
    with pytest.raises(BadInput, match=r"NUL"):
        check_path("a\x00b")


def test_lists_are_capped_and_each_entry_is_checked_by_index():
    assert check_list(["a", "b"], "changes", check_path) == ["a", "b"]
    with pytest.raises(BadInput, match=f"^changes: at most {MAX_LIST_LEN:,} entries"):
        check_list(["a"] * (MAX_LIST_LEN + 1), "changes", check_path)
    with pytest.raises(BadInput, match=r"^changes\[1\]: must be a non-empty path"):
        check_list(["a", 7], "changes", check_path)
    with pytest.raises(BadInput, match=r"^changes: must be a list"):
        check_list("a", "changes", check_path)


def test_item_data_is_bounded_json():
    with pytest.raises(BadInput, match=r"^data: at most 64\.0 KiB"):
        check_data({"x": "y" * MAX_DATA_BYTES})
    with pytest.raises(BadInput, match=r"^data: must hold only JSON values"):
        check_data({"x": object()})


async def test_send_and_notify_completion_refuse_oversized_input_before_touching_the_bus(file_bus):
    await crew(file_bus)
    box = file_bus.root / "inbox" / "orchestrator" / "new"
    with pytest.raises(BadInput, match=r"^message: at most 1\.0 MiB"):
        await messages.send(file_bus, "file-reader", "orchestrator", "x" * 50_000_000)
    with pytest.raises(BadInput, match=r"^message: at most 1\.0 MiB"):
        await messages.notify_completion(file_bus, "linter", status="success", message="x" * 50_000_000)
    with pytest.raises(BadInput, match=r"^changes: at most"):
        await messages.notify_completion(file_bus, "linter", status="success", changes=["a"] * 5000)
    with pytest.raises(BadInput, match=r"^changes\[0\]: at most 4096 bytes"):
        await messages.notify_completion(file_bus, "linter", status="success", changes=["a" * 5000])
    with pytest.raises(BadInput, match=r"^worker_id: "):
        await messages.notify_completion(file_bus, "linter", status="success", worker_id="linter\n")
    assert os.listdir(box) == []


def test_an_error_quotes_at_most_the_start_of_a_long_value():
    """A refusal names what was wrong; it does not echo a megabyte back into a model's context."""
    assert shown("worker") == "'worker'"
    quoted = shown("a/" * 500_000)
    assert quoted.startswith("'a/a/") and "(1,000,000 characters)" in quoted and len(quoted) < 80
    assert len(shown(["x" * 1_000_000] * 50)) < 200
    with pytest.raises(BadInput) as refused:
        check_type("[" * 1_000_000, "types[0]")
    assert len(str(refused.value)) < 200 and "(1,000,000 characters)" in str(refused.value)


def test_a_command_is_bounded_as_exec_takes_it():
    longest = "é" * (MAX_ARG_BYTES // 2)  # as many bytes as Linux takes in one word
    assert check_argv(("true", longest)) == ["true", longest]
    for bad, said in [
        ([], r"^command: give the program and its arguments"),
        ("true", r"^command: give the program"),
        (["a/" * 2049], r"^command\[0\]: at most 4096 bytes"),
        (["true", "x" * (MAX_ARG_BYTES + 1)], r"^command\[1\]: at most 128\.0 KiB"),
        (["true", longest + "é"], r"^command\[1\]: at most 128\.0 KiB"),
        (["true", "a\x00b"], r"^command\[1\]: may not contain a NUL"),
        (["true", ""], r"^command\[1\]: must be a non-empty string"),
        (["true", 5], r"^command\[1\]: must be a non-empty string"),
        (["true"] * (MAX_LIST_LEN + 1), r"^command: at most 1,000 words"),
    ]:
        with pytest.raises(BadInput, match=said):
            check_argv(bad)


@pytest.mark.parametrize("bad", ["", "two words", "tab\there", "new\nline", "x" * 256, 7])
def test_a_word_is_one_short_token(bad):
    with pytest.raises(BadInput, match=r"^model: "):
        check_word(bad, "model")


def test_a_word_may_hold_slashes_dots_and_any_letters():
    for good in ("claude-sonnet-4-5", "origin/main~3", "v1.2.3", "modèle", "x" * 255):
        assert check_word(good, "base") == good
