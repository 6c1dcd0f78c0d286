"""Errors a user can act on. Every message says what was wrong and what to do."""

from collections.abc import Iterable, Mapping


class WavewaitError(Exception):
    """Base class; faces turn it into an exit code 2 or an MCP `isError` result."""

    def worded(self, words: Mapping[str, str]) -> str:
        """The message in a face's words (`BadInput`): as it is, for most errors."""
        return str(self)


class BadInput(WavewaitError):
    """A value given by the caller is not allowed; nothing was changed.

    A message that names the caller's fields writes each as `{field}` and lists it in
    `fields`: `str()` names them as the MCP tools do (their arguments), and a face whose
    words differ (the CLI's `--max` for `max_messages`) says it with `worded`, so one check
    in the core reads right in every face.
    """

    def __init__(self, message: str, *, fields: Iterable[str] = ()) -> None:
        self.template = message
        self.fields = tuple(fields)
        super().__init__(self.worded({}))

    def worded(self, words: Mapping[str, str]) -> str:
        text = self.template
        for f in self.fields:
            base, bracket, index = f.partition("[")  # one entry of a list: `from_agents[1]`
            text = text.replace("{" + f + "}", words.get(f) or words.get(base, base) + bracket + index)
        return text


class UnknownAgent(BadInput):
    """No agent has this id or prefix."""


class AmbiguousId(BadInput):
    """A prefix fits more than one agent."""


class DeadRecipient(BadInput):
    """A message was addressed to an agent that is dead or closed."""


class BusError(WavewaitError):
    """The bus could not be opened or used (path, permissions, server down)."""


class ForgedSender(BadInput):
    """A process claimed to send as an agent it does not belong to (`identity.py`); nothing was sent."""


class BudgetSpent(BadInput):
    """A spawn into a wave whose budget is spent was refused; nothing was started."""
