"""Waiting: the engine (engine.py) and one module per kind of wait (docs/words.md, "Kinds of wait").

The faces call the kinds' functions through this package: `wait.wait_signal(...)`; the
`wait` of the faces (next message or fan-in) goes through one entry, `wait.wait_for(...)`
(entry.py).
"""

from ..checks import JOIN_TIMEOUT as CHECK_TIMEOUT  # a join's check's default, as the faces name it
from ..results import event_view
from ..signals import glob_base, scan_root
from .agent import AgentCondition, parse_deadline, wait_agent
from .engine import Condition, Control, Progress, ProgressFn, WaitSettings, check_timeout, run
from .entry import Plan, WaitRequest, plan, run_plan, wait_for
from .event import EventCondition, wait_event
from .fan_in import FanInCondition, Join, Targets, parse_need, read_targets, wait_fan_in
from .join_files import FilesTarget
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
    "Plan",
    "Progress",
    "ProgressFn",
    "SignalCondition",
    "Targets",
    "WaitRequest",
    "WaitSettings",
    "check_timeout",
    "event_view",
    "glob_base",
    "parse_deadline",
    "parse_need",
    "plan",
    "read_targets",
    "run",
    "run_plan",
    "scan_root",
    "wait_agent",
    "wait_event",
    "wait_fan_in",
    "wait_for",
    "wait_next",
    "wait_signal",
]
