"""Headless Chromium driven over the DevTools protocol (one websocket, no driver to install).

The system's `chromium` is started with a fresh profile and `--remote-debugging-port=0`; the
port it chose is read from the profile's `DevToolsActivePort`. Commands go over the browser's
websocket in the flat protocol (`sessionId` names a tab), one at a time: a command's answer is
the message with its id, and the events in between are not needed here.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from conftest import until

# what Chromium needs to run as root in a container, and nothing it would fetch on its own
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    # the page asks fonts.googleapis.com for its font: refuse at once (the fallback font is
    # used), or `load`, and with it the page's start, waits on a network that is not there
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]

# The terminal's text, row by row, from xterm.js's buffer (the screen is drawn on a canvas, so
# the DOM holds none of it). `this` is the array of textual-serve's session objects on the page.
READ_SCREEN = """function () {
  const term = this[0].terminal, buf = term.buffer.active, rows = [];
  for (let y = 0; y < term.rows; y++) rows.push(buf.getLine(buf.viewportY + y).translateToString(true));
  return rows.join("\\n");
}"""

# textual-serve's session class: its prototype has connect() and sendSize()
IS_SESSION_CLASS = """function () {
  return typeof this === "function" && !!this.prototype
    && typeof this.prototype.connect === "function" && typeof this.prototype.sendSize === "function";
}"""


ENTER = {"key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}  # xterm.js reads Enter by its key code


def chromium_or_skip() -> str:
    """The path of `chromium`; outside CI a test without it is skipped, under CI=true it fails."""
    path = shutil.which("chromium")
    if path is None:
        why = "chromium is not installed (.ci/run installs it: apt-get install -y chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return path


class DevTools:
    """One websocket to the browser; `call` sends a command and returns its result."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    async def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        await self.ws.send_json(
            {"id": msg_id, "method": method, "params": params} | ({"sessionId": session} if session else {})
        )
        while True:
            msg = await self.ws.receive(timeout=30)
            assert msg.type == aiohttp.WSMsgType.TEXT, f"the browser's websocket ended during {method}: {msg}"
            answer = json.loads(msg.data)
            if answer.get("id") == msg_id:
                assert "error" not in answer, f"{method} {params}: {answer['error']}"
                return answer["result"]


class Tab:
    """A page in the browser, attached in the flat protocol."""

    def __init__(self, devtools: DevTools, target: str, session: str) -> None:
        self.devtools, self.target, self.session = devtools, target, session
        self._sessions: str | None = None  # the remote object of textual-serve's sessions

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        return await self.devtools.call(method, self.session, **params)

    async def evaluate(self, expression: str) -> Any:
        answer = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in answer, answer
        return answer["result"].get("value")

    async def screen(self) -> str:
        """The text the terminal shows now."""
        if self._sessions is None:
            self._sessions = await self._find_sessions()
        answer = await self.call(
            "Runtime.callFunctionOn", objectId=self._sessions, functionDeclaration=READ_SCREEN, returnByValue=True
        )
        assert "exceptionDetails" not in answer, answer
        return answer["result"]["value"]

    async def _find_sessions(self) -> str:
        """textual-serve keeps its session (and so its xterm.js Terminal) in a closure, not on
        `window`: find its class among the variables `window.onload` closes over, as the
        debugger's scope pane does, then every object of that class (`Runtime.queryObjects`)."""
        onload = (await self.call("Runtime.evaluate", expression="window.onload"))["result"]
        assert onload.get("type") == "function", f"the page has no window.onload: {onload}"
        internal = (await self.call("Runtime.getProperties", objectId=onload["objectId"]))["internalProperties"]
        (scopes,) = [p["value"]["objectId"] for p in internal if p["name"] == "[[Scopes]]"]
        for scope in (await self.call("Runtime.getProperties", objectId=scopes, ownProperties=True))["result"]:
            if "objectId" not in scope.get("value", {}):
                continue
            names = await self.call("Runtime.getProperties", objectId=scope["value"]["objectId"], ownProperties=True)
            for var in names["result"]:
                value = var.get("value", {})
                if value.get("type") != "function":
                    continue
                check = await self.call(
                    "Runtime.callFunctionOn",
                    objectId=value["objectId"],
                    functionDeclaration=IS_SESSION_CLASS,
                    returnByValue=True,
                )
                if check["result"].get("value"):
                    proto = await self.call(
                        "Runtime.callFunctionOn",
                        objectId=value["objectId"],
                        functionDeclaration="function () { return this.prototype }",
                    )
                    found = await self.call("Runtime.queryObjects", prototypeObjectId=proto["result"]["objectId"])
                    return found["objects"]["objectId"]
        raise AssertionError("textual-serve's session class is not among window.onload's variables")

    async def type(self, text: str) -> None:
        """Type `text` key by key into the focused element ("\\r" is Enter)."""
        for ch in text:
            key = ENTER if ch == "\r" else {"key": ch}
            await self.call("Input.dispatchKeyEvent", type="keyDown", text=ch, **key)
            await self.call("Input.dispatchKeyEvent", type="keyUp", **key)

    async def screenshot(self, path: Path) -> None:
        shot = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))

    async def close(self) -> None:
        """Close the tab, as a person closing it does (its websocket to the server goes)."""
        await self.devtools.call("Target.closeTarget", targetId=self.target)


class Chromium:
    """A headless Chromium with a profile of its own under `folder`."""

    def __init__(self, exe: str, folder: Path, size: tuple[int, int]) -> None:
        self.profile = folder / "profile"
        self.log = folder / "chromium.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [exe, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={size[0]},{size[1]}", "about:blank"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its renderers and helpers end with it (one process group)
            )

    async def endpoint(self) -> str:
        """The browser's websocket address, once Chromium has written it into its profile."""
        port_file = self.profile / "DevToolsActivePort"

        def written() -> bool:
            assert self.proc.poll() is None, f"chromium exited: {self.log.read_text(errors='replace')[-2000:]}"
            return len(port_file.read_text().split()) == 2 if port_file.exists() else False

        await until(written, timeout=30, what="chromium's DevTools port")
        port, path = port_file.read_text().split()
        return f"ws://127.0.0.1:{port}{path}"

    @contextlib.asynccontextmanager
    async def tab(self, url: str) -> AsyncIterator[Tab]:
        """A new tab on `url`, attached; the browser's websocket stays open while it is used."""
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(await self.endpoint(), max_msg_size=0) as ws,
        ):
            devtools = DevTools(ws)
            target = (await devtools.call("Target.createTarget", url=url))["targetId"]
            session = (await devtools.call("Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
            yield Tab(devtools, target, session)

    def stop(self) -> None:
        """End the browser and every process of its group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):  # then it is killed below
            self.proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
