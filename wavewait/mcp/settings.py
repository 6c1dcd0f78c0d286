"""How `wavewait mcp` was started: built once from flags and environment (by the CLI), then passed down."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ..core.tasks import Limits

from ..core.wait import WaitSettings

#: seconds a wait's progress line must have been still before it is sent as a notification.
#: Claude Code handles a progress notification a step after the response read in the same
#: chunk, finds the request gone and drops the connection ("unknown token"). A fan-in's line
#: changes on every report, and its last report decides the result: held until the line is
#: still, a notification is dropped when the result comes first, and the result never waits
#: (docs/hosts.md). WAVEWAIT_PROGRESS_GAP sets another (tests)
PROGRESS_GAP = 0.2


@dataclass(frozen=True)
class Settings:
    """Fixed for the server's lifetime; nothing reads flags or the environment after this."""

    bus: str  # directory or postgresql:// URL
    caller: str  # who calls the tools
    project_dir: str  # where relative signal paths start
    max_block: float | None = None  # longer waits return at this point as a normal timeout
    output_budget: int | None = None  # characters of message text one result may carry
    allow_paths: tuple[str, ...] = ()  # more folders wave_wait_for_signal may watch
    agent_command: str | None = None  # how spawn_agent runs a prompt
    presets: str | None = None  # --presets / WAVEWAIT_PRESETS: a TOML file of agent presets
    progress_every: float | None = None  # the engine's progress beat; None keeps the core's default
    progress_gap: float = PROGRESS_GAP  # how long a progress line is still before it is sent
    ack_grace: float | None = None  # seconds from a response's write to its acknowledgement (delivery.py)
    transport: Literal["stdio", "http"] = "stdio"
    host: str = "127.0.0.1"
    port: int = 8765
    token: str = ""  # HTTP bearer token
    queue: str | None = None  # --queue / WAVEWAIT_QUEUE: the queue tools exist only with one
    task_types: str | None = None  # --task-types / WAVEWAIT_TASK_TYPES
    task_id: str | None = None  # WAVEWAIT_TASK_ID: this server's caller is that task's agent
    limits: Limits | None = None  # --max-tasks / --max-depth / --max-attempts

    def wait_settings(self) -> WaitSettings:
        """The engine's timers for every wait this server runs."""
        if self.progress_every is None:
            return WaitSettings(progress_gap=self.progress_gap)
        return WaitSettings(progress_every=self.progress_every, progress_gap=self.progress_gap)
