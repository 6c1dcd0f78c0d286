"""Every slash command is also a command-palette entry (ctrl+p)."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .commands import COMMANDS, SlashCommand
from .typed_app import wave_app


class SlashProvider(Provider):
    def _run(self, cmd: SlashCommand) -> None:
        main = wave_app(self.app).main
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
