"""The agent CLIs' own event lines, as Claude Code 2.1.330 and Codex 0.169.0 printed them.

Captured from the real CLIs driven by tests/hosts/modelserver.py (every model request
reports 10 tokens in and 5 out): a run that wrote a file and answered, a run cut at
--max-turns 1, and runs whose model API refused the request (HTTP 400).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from wavewait.core.agent_events import EventReader

HERE = Path(__file__).parent / "agent_events"


def read(fmt: str, name: str) -> EventReader:
    r = EventReader(fmt)  # type: ignore[arg-type]
    for line in (HERE / name).read_bytes().splitlines():
        r.feed(line)
    return r


def test_a_claude_run_that_wrote_a_file_ends_in_success_with_its_answer_tokens_and_cost() -> None:
    r = read("claude", "claude-success.jsonl")
    assert (r.ended, r.status) == (True, "success")
    assert r.final_text == "Wrote hello.txt.\nAll done."
    assert (r.usage.input_tokens, r.usage.output_tokens) == (20, 10)  # two requests of 10 in, 5 out
    assert r.usage.cost_usd == pytest.approx(0.00028)
    assert r.usage.turns == 2
    assert r.skipped == 0


def test_a_claude_run_cut_at_max_turns_says_so() -> None:
    r = read("claude", "claude-max-turns.jsonl")
    assert (r.ended, r.status) == (True, "max_turns")
    assert r.final_text is None
    assert r.last_error == "Reached maximum number of turns (1)"
    assert r.last_activity == "tool Write"
    assert (r.usage.input_tokens, r.usage.output_tokens) == (10, 5)


def test_a_claude_run_whose_api_refused_is_an_error_with_the_apis_words() -> None:
    r = read("claude", "claude-api-error.jsonl")
    assert (r.ended, r.status) == (True, "error")
    assert r.last_error == "API Error: 400 scripted refusal: bad request"


def test_a_codex_run_that_wrote_a_file_ends_in_success_with_its_last_message_and_tokens() -> None:
    r = read("codex", "codex-success.jsonl")
    assert (r.ended, r.status) == (True, "success")
    assert r.final_text == "Wrote hello.txt.\nAll done."
    assert (r.usage.input_tokens, r.usage.output_tokens, r.usage.cost_usd) == (20, 10, None)


def test_a_codex_run_whose_api_refused_is_an_error_with_the_apis_message() -> None:
    r = read("codex", "codex-error.jsonl")
    assert (r.ended, r.status) == (True, "error")
    assert r.last_error == "scripted refusal: bad request"
    assert r.reason() == "error: scripted refusal: bad request"


def test_a_run_cut_short_is_not_ended_and_says_what_it_was_doing() -> None:
    lines = (HERE / "codex-success.jsonl").read_bytes().splitlines()[:4]  # killed before it answered
    r = EventReader("codex")
    for line in lines:
        r.feed(line)
    assert not r.ended and r.status is None
    assert r.reason() == "last: edited hello.txt"
    claude = (HERE / "claude-success.jsonl").read_bytes().splitlines()[:2]
    c = EventReader("claude")
    for line in claude:
        c.feed(line)
    assert not c.ended and c.reason() == "last: tool Write"
    assert c.usage.input_tokens == 10  # live, from the model's message so far


def test_lines_that_are_not_events_are_skipped_not_trusted() -> None:
    r = EventReader("claude")
    for line in [b"not json", b"[1, 2]", b'{"type": "result", "subtype": "success", "is_error": false, "usage": "x"}']:
        r.feed(line)
    assert r.skipped == 2
    assert r.status == "success" and r.usage.input_tokens == 0
