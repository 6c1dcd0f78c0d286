"""The shell recipes of the pages (README.md and docs/*.md), read from the pages themselves.

A block fenced as ```sh (or ```shell, ```bash) is a recipe: the tests run it as written.
Synopses, transcripts and output are fenced with plain ``` and never run. An HTML comment
right above a recipe (blank lines between are allowed) says what the test needs and checks,
one `key: value` a line; the page stays the one source of both the code and its result:

    <!-- recipe
    setup: refactor-wave
    exit: 0
    json: stdout[-1] status == merged
    -->

Keys (`Recipe.marks` keeps every line, in order):
- `name: NAME`: the recipe's name in its id (default: the bold words that open its paragraph).
- `skip: WHY`: the recipe cannot run in CI (a server that runs until stopped, a bench of
  minutes); the test is skipped with WHY.
- `setup: NAME`: run the setup NAME of tests/docs/test_recipes.py first, in the same folder
  and on the same bus (a wave the page's text presumes, a git repository).
- `host: claude`: the recipe runs `claude` (itself, or as flights of the `claude` preset):
  the real Claude Code CLI of the host suite against its scripted model (marked `hosts`).
- `bus: own`: the recipe names its own bus (`WAVEWAIT_BUS=...`): it runs once, not on each bus.
- `shell: CMD`: what runs the block (default `bash -euo pipefail`), e.g. `bash -u` for a
  loop that reads each command's exit code itself.
- `sub: OLD => NEW`: replace OLD with NEW in the block before it runs (a placeholder).
- `timeout: S`: seconds the block may take (default 60).
- `exit: N`: the exit code of the block (default 0).
- `prints: TEXT`: what the block printed (its stdout) contains TEXT.
- `json: SOURCE PATH OP VALUE`: SOURCE is `stdout[I]` (the I-th JSON document the block
  printed, -1 the last) or a file the block wrote (`join.json`); PATH is dotted keys and list
  indexes (`results.0.status`), `*` for every item of a list, `[KEY=VALUE]` for the items of a
  list whose KEY is VALUE (`results.[name=reader].status`), `#` for a list's length; OP is `==` (VALUE is JSON, or a
  bare word taken as a string) or `~` (the value, as text, contains VALUE).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SHELLS = ("sh", "shell", "bash")
KEYS = ("name", "skip", "setup", "host", "bus", "shell", "sub", "timeout", "exit", "prints", "json")
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w+-]*)\s*$")
HEADING = re.compile(r"^#{1,6} +(?P<text>.+?)\s*$")
LEAD = re.compile(r"^\*\*(?P<text>[^*]+)\*\*")
MARK = re.compile(r"<!--\s*recipe\b:?(?P<body>.*?)-->", re.S)
CHECK = re.compile(r"^(?P<source>stdout\[-?\d+\]|[\w./-]+) +(?P<path>\S+) +(?P<op>==|~) +(?P<value>.+)$")


class PageError(ValueError):
    """A recipe's comment the reader cannot take: the page and line say where."""


@dataclass(frozen=True)
class Check:
    """One `json:` line: where to look, and what the page says is there."""

    source: str
    path: str
    op: str
    value: str

    def expected(self) -> Any:
        if self.op == "~":
            return self.value
        try:
            return json.loads(self.value)
        except json.JSONDecodeError:
            return self.value

    def __str__(self) -> str:
        return f"{self.source} {self.path} {self.op} {self.value}"


@dataclass(frozen=True)
class Recipe:
    page: str
    heading: str
    lead: str
    line: int
    code: str
    marks: tuple[tuple[str, str], ...] = field(default=())
    index: int = 1

    @property
    def id(self) -> str:
        """The page, its heading and the recipe's name (its `name:`, or the bold words that open
        its paragraph); without either, its number under the heading after the first."""
        rid = f"{self.page} > {self.heading}"
        if name := self.one("name") or self.lead:
            return f"{rid} > {name}"
        return rid if self.index == 1 else f"{rid} ({self.index})"

    def all(self, key: str) -> list[str]:
        return [v for k, v in self.marks if k == key]

    def one(self, key: str, default: str | None = None) -> str | None:
        values = self.all(key)
        return values[-1] if values else default

    @property
    def shell(self) -> list[str]:
        return shlex.split(self.one("shell", "bash -euo pipefail") or "")

    @property
    def exit_code(self) -> int:
        return int(self.one("exit", "0") or 0)

    @property
    def timeout(self) -> float:
        return float(self.one("timeout", "60") or 60)

    @property
    def checks(self) -> list[Check]:
        return [Check(**m.groupdict()) for m in (CHECK.match(v) for v in self.all("json")) if m]

    def script(self) -> str:
        """The block as it runs: the page's text with its `sub:` placeholders filled in."""
        code = self.code
        for sub in self.all("sub"):
            old, new = (s.strip() for s in sub.split("=>", 1))
            code = code.replace(old, new)
        return code


def read_page(root: Path, page: str) -> list[Recipe]:
    """Every shell block of one page, with its heading, its lead line and its marks."""
    lines = (root / page).read_text().split("\n")
    found: list[Recipe] = []
    heading, lead, i = page, "", 0
    counts: dict[str, int] = {}
    while i < len(lines):
        text = lines[i]
        opens_paragraph = i == 0 or not lines[i - 1].strip()
        if h := HEADING.match(text):
            heading, lead = h.group("text").strip("`"), ""
        elif opens_paragraph and text.strip() and not text.lstrip().startswith(("<!--", "```")):
            m = LEAD.match(text.strip())
            lead = m.group("text").strip().rstrip(".") if m else ""
        fence = FENCE.match(text)
        if not fence:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise PageError(f"{page}:{i + 1}: a fenced block that is never closed")
        if fence.group("lang") in SHELLS:
            indent = len(fence.group("indent"))
            code = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
            counts[heading] = counts.get(heading, 0) + 1
            marks = _marks(page, lines, i)
            found.append(Recipe(page, heading, lead, i + 1, code, marks, counts[heading]))
        elif _marks(page, lines, i):
            raise PageError(f"{page}:{i + 1}: a recipe comment above a block not fenced as ```sh: it would never run")
        i = end + 1
    return found


def _marks(page: str, lines: list[str], fence: int) -> tuple[tuple[str, str], ...]:
    """The `<!-- recipe ... -->` comment right above the fence at `fence` (0-based), if any."""
    j = fence - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j < 0 or not lines[j].strip().endswith("-->"):
        return ()
    start = j
    while start >= 0 and "<!--" not in lines[start]:
        start -= 1
    m = MARK.search("\n".join(lines[start : j + 1]))
    if m is None:
        return ()
    marks: list[tuple[str, str]] = []
    for n, raw in enumerate(m.group("body").split("\n")):
        entry = raw.strip()
        if not entry:
            continue
        key, sep, value = entry.partition(":")
        key = key.strip()
        where = f"{page}:{start + n + 1}"
        if not sep or key not in KEYS:
            raise PageError(
                f"{where}: `{entry}` is not a recipe mark; the keys are {', '.join(KEYS)} (tests/docs/recipes.py)"
            )
        value = value.strip()
        if key == "json" and not CHECK.match(value):
            raise PageError(f"{where}: `json: {value}` is not `SOURCE PATH ==|~ VALUE` (tests/docs/recipes.py)")
        marks.append((key, value))
    return tuple(marks)


def read_all(root: Path) -> list[Recipe]:
    """The recipes of README.md and of every page in docs/, in page order."""
    pages = ["README.md", *sorted(str(p.relative_to(root)) for p in (root / "docs").glob("*.md"))]
    found = [r for page in pages for r in read_page(root, page)]
    seen: dict[str, Recipe] = {}
    for r in found:
        if r.id in seen:
            raise PageError(f"{r.page}:{r.line}: two recipes are both `{r.id}`; give one a bold lead line")
        seen[r.id] = r
    return found


def json_documents(text: str) -> list[Any]:
    """Every JSON document printed one after another (one a line, or indented), skipping any
    other text between them."""
    docs, decoder, i = [], json.JSONDecoder(), 0
    while i < len(text):
        if text[i] in "{[":
            try:
                doc, end = decoder.raw_decode(text, i)
            except json.JSONDecodeError:
                i += 1
                continue
            docs.append(doc)
            i = end
        else:
            i += 1
    return docs


def values_at(doc: Any, path: str) -> list[Any]:
    """The values at a dotted path; `*` and `[KEY=VALUE]` fan out over a list. A missing key
    is a KeyError naming the path, so a failing recipe says what it lacked."""
    values = [doc]
    for part in path.split("."):
        nxt = []
        for v in values:
            if part == "#":
                nxt.append(len(v))
            elif part == "*":
                nxt.extend(v)
            elif part.startswith("[") and part.endswith("]"):
                key, _, want = part[1:-1].partition("=")
                chosen = [item for item in v if isinstance(item, dict) and str(item.get(key)) == want]
                if not chosen:
                    raise KeyError(f"{path}: no item with {key} {want!r} in {json.dumps(v)[:300]}")
                nxt.extend(chosen)
            elif isinstance(v, list):
                nxt.append(v[int(part)])
            elif isinstance(v, dict):
                if part not in v:
                    raise KeyError(f"{path}: no `{part}` in {json.dumps(v)[:300]}")
                nxt.append(v[part])
            else:
                raise KeyError(f"{path}: `{part}` of a {type(v).__name__}")
        values = nxt
    return values
