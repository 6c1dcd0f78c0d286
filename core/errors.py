"""Errors a user can act on. Every message says what was wrong and what to do."""


class WavewaitError(Exception):
    """Base class; faces turn it into an exit code 2 or an MCP `isError` result."""


class BadInput(WavewaitError):
    """A value given by the caller is not allowed; nothing was changed."""


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
