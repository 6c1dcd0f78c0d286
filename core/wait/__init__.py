"""Waiting: the engine (engine.py) and one module per kind of wait (docs/words.md, "Kinds of wait").

The faces call the kinds' functions through this package: `wait.wait_fan_in(...)`.
"""

from ..checks import JOIN_TIMEOUT as CHECK_TIMEOUT  # a join's check's default, as the faces name it
from ..results import event_view
from ..signals import glob_base, scan_root
from .agent import AgentCondition, parse_deadline, wait_agent
from .engine import Condition, Control, Progress, ProgressFn, WaitSettings, check_timeout, run
from .event import EventCondition, wait_event
from .fan_in import FanInCondition, FilesTarget, Join, parse_need, wait_fan_in
from .next import MAX_MESSAGES, NextCondition, wait_next
from .signal import SignalCondition, wait_signal

__all__ = [
    "CHECK_TIMEOUT",
    "MAX_MESSAGES",
    "AgentCondition",
    "Condition",
    "Control",
    "EventCondition",
    "FanInCondition",
    "FilesTarget",
    "Join",
    "NextCondition",
    "Progress",
    "ProgressFn",
    "SignalCondition",
    "WaitSettings",
    "check_timeout",
    "event_view",
    "glob_base",
    "parse_deadline",
    "parse_need",
    "run",
    "scan_root",
    "wait_agent",
    "wait_event",
    "wait_fan_in",
    "wait_next",
    "wait_signal",
]
