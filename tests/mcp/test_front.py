"""The front that answers `initialize` and `tools/list` while the SDK imports never says anything
the SDK would not: the pre-rendered answers are the SDK's current ones, and a server with the
front answers exactly as one without it (over raw JSON-RPC, for every handshake version)."""

from __future__ import annotations

import json

import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from wavewait.mcp import prerendered
from wavewait.mcp.front import OFF
from wavewait.mcp.prerender import ask_sdk, payload


def test_the_prerendered_answers_are_the_sdks_own():
    assert json.loads(prerendered.PAYLOAD) == payload(), "run `python -m wavewait.mcp.prerender`"


@pytest.mark.parametrize("version", [HANDSHAKE_PROTOCOL_VERSIONS[0], HANDSHAKE_PROTOCOL_VERSIONS[-1], "1999-01-01"])
def test_a_server_with_the_front_answers_as_one_without(version):
    assert ask_sdk(version, env={OFF: "1"}) == ask_sdk(version)  # on vs off
