"""The agent CLIs' own session files, as Claude Code 2.1.330 and Codex 0.169.0 wrote them for
a flight killed while its model held its second request (tests/hosts/test_coding_wave.py;
the scripted model reports 10 tokens in and 5 out per request). Trimmed to the entries that
carry usage and a few around them; paths made neutral.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from wavewait.core.agent_events import EventReader
from wavewait.core.agent_sessions import CHUNK, usage_of
from wavewait.core.flights import final_usage

HERE = Path(__file__).parent / "agent_sessions"
CODEX_THREAD = "01a21407-1213-75b0-a29d-f5dceab3e6cd"
CLAUDE_SESSION = "1ca96bd9-d653-4241-9616-f3818dc22c9d"


def codex_home(tmp_path: Path, text: str) -> dict[str, str]:
    folder = tmp_path / "codex" / "sessions" / "2026" / "11" / "25"
    folder.mkdir(parents=True)
    (folder / f"rollout-2026-11-25T18-45-37-{CODEX_THREAD}.jsonl").write_text(text)
    return {"HOME": str(tmp_path / "nobody"), "CODEX_HOME": str(tmp_path / "codex")}


def test_a_killed_codex_run_has_the_tokens_of_each_response_it_received_in_its_rollout(tmp_path: Path) -> None:
    env = codex_home(tmp_path, (HERE / "codex-killed.jsonl").read_text())
    u = usage_of("codex", CODEX_THREAD, env)
    assert u is not None and (u.input_tokens, u.output_tokens, u.cost_usd) == (10, 5, None)


def test_the_last_token_count_wins_even_chunks_away_from_the_end(tmp_path: Path) -> None:
    """The file is read from its end in chunks: a line cut by a chunk's edge is joined, not lost."""
    lines = (HERE / "codex-killed.jsonl").read_text()
    later = lines.replace('"input_tokens":10', '"input_tokens":70').replace('"output_tokens":5', '"output_tokens":35')
    filler = '{"type":"response_item","payload":{"type":"message","text":"' + "x" * (CHUNK // 3) + '"}}\n'
    env = codex_home(tmp_path, lines + later + filler * 7)
    u = usage_of("codex", CODEX_THREAD, env)
    assert u is not None and (u.input_tokens, u.output_tokens) == (70, 35)


def test_a_killed_claude_run_has_its_tokens_and_money_from_its_cost_state(tmp_path: Path) -> None:
    folder = tmp_path / "claude" / "projects" / "-home-person-worktrees-project"
    folder.mkdir(parents=True)
    shutil.copy(HERE / "claude-killed.jsonl", folder / f"{CLAUDE_SESSION}.jsonl")
    env = {"HOME": str(tmp_path / "nobody"), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}
    u = usage_of("claude", CLAUDE_SESSION, env)
    assert u is not None and (u.input_tokens, u.output_tokens) == (10, 5)
    assert u.cost_usd is not None and u.cost_usd > 0


def test_a_claude_run_killed_without_a_cost_state_has_its_messages_whole_usage(tmp_path: Path) -> None:
    """KILL leaves no cost-state: each model message's usage as written once it was whole."""
    folder = tmp_path / ".claude" / "projects" / "p"
    folder.mkdir(parents=True)
    kept = [line for line in (HERE / "claude-killed.jsonl").read_text().splitlines() if "cost-state" not in line]
    (folder / f"{CLAUDE_SESSION}.jsonl").write_text("\n".join(kept) + "\n")
    u = usage_of("claude", CLAUDE_SESSION, {"HOME": str(tmp_path)})
    assert u is not None and (u.input_tokens, u.output_tokens, u.cost_usd) == (10, 5, None)


def test_no_file_or_an_id_that_is_not_one_is_unknown(tmp_path: Path) -> None:
    env = codex_home(tmp_path, (HERE / "codex-killed.jsonl").read_text())
    assert usage_of("codex", "01a21407-0000-0000-0000-000000000000", env) is None
    assert usage_of("codex", None, env) is None
    assert usage_of("codex", "../../*", env) is None  # never a path or a pattern
    assert usage_of("claude", CODEX_THREAD, env) is None


def test_a_session_file_behind_the_events_never_lowers_the_spend_they_showed(tmp_path, monkeypatch) -> None:
    """A CLI killed before it wrote its last message (a budget stopped it on that message's
    usage): the final usage keeps what the events counted, the file adding only what they missed."""
    events = (Path(__file__).parent / "agent_events" / "claude-success.jsonl").read_text().splitlines()
    reader = EventReader(format="claude")
    for line in events[:2]:  # the init line and one model message: 10 tokens in, 1 out
        reader.feed(line)
    assert not reader.ended and (reader.usage.input_tokens, reader.usage.output_tokens) == (10, 1)
    behind = (HERE / "claude-killed.jsonl").read_text().replace(CLAUDE_SESSION, str(reader.session_id))
    behind = behind.replace('"inputTokens":10', '"inputTokens":3').replace('"outputTokens":5', '"outputTokens":7')
    folder = tmp_path / "claude" / "projects" / "p"
    folder.mkdir(parents=True)
    (folder / f"{reader.session_id}.jsonl").write_text(behind)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    u = asyncio.run(final_usage(reader))
    assert u is not None and (u.input_tokens, u.output_tokens) == (10, 7)
    assert u.cost_usd is not None and u.cost_usd > 0  # the file's money, which the events lack
