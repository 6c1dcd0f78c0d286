"""Every slash command is also a command-palette entry (ctrl+p)."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .commands import COMMANDS
from .screens.main import main_screen
from .slash import SlashCommand


class SlashProvider(Provider):
    def _run(self, cmd: SlashCommand) -> None:
        main = main_screen(self.app)
        if cmd.runs_bare:
            main.run_command(cmd.name)
        else:
            main.prefill(cmd.name + " ")

    async def discover(self) -> Hits:
        for cmd in COMMANDS:
            yield DiscoveryHit(cmd.usage, partial(self._run, cmd), help=cmd.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for cmd in COMMANDS:
            score = matcher.match(cmd.usage)
            if score > 0:
                yield Hit(score, matcher.highlight(cmd.usage), partial(self._run, cmd), help=cmd.help)
