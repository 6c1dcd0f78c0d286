"""The reader of the pages' recipes (recipes.py): what it takes from a page, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
import recipes

PAGE = """# A page

Some text.

```
wavewait wait TIMEOUT [ID ...]
```

## Recipes

**The first one.** It waits.

<!-- recipe
setup: a-setup
exit: 6
json: stdout[-1] results.[name=a].status == received
json: stdout[0] stopped.# == 1
prints: done
-->
```sh
wavewait wait 60 --wave w
```

1. A step:

   <!-- recipe
   name: a step
   sub: ID => "$id"
   -->
   ```bash
   wavewait reply ID yes
   ```
"""


def page(tmp_path: Path, text: str) -> list[recipes.Recipe]:
    (tmp_path / "page.md").write_text(text)
    return recipes.read_page(tmp_path, "page.md")


def test_only_shell_blocks_are_recipes_each_with_its_page_heading_and_marks(tmp_path: Path) -> None:
    first, step = page(tmp_path, PAGE)
    assert first.id == "page.md > Recipes > The first one" and first.line == 20
    assert first.code == "wavewait wait 60 --wave w\n"
    assert (first.one("setup"), first.exit_code, first.all("prints")) == ("a-setup", 6, ["done"])
    assert [str(c) for c in first.checks] == [
        "stdout[-1] results.[name=a].status == received",
        "stdout[0] stopped.# == 1",
    ]
    assert step.id == "page.md > Recipes > a step"
    assert step.script() == 'wavewait reply "$id" yes\n'  # indented under its list item, placeholder filled


def test_a_mark_the_reader_does_not_know_names_the_page_and_line(tmp_path: Path) -> None:
    with pytest.raises(recipes.PageError, match=r"page.md:4: `expect: 0` is not a recipe mark"):
        page(tmp_path, "# P\n\n<!-- recipe\nexpect: 0\n-->\n```sh\ntrue\n```\n")
    with pytest.raises(recipes.PageError, match=r"page.md:4: `json: status complete` is not"):
        page(tmp_path, "# P\n\n<!-- recipe\njson: status complete\n-->\n```sh\ntrue\n```\n")


def test_a_mark_above_a_block_that_is_not_shell_is_refused(tmp_path: Path) -> None:
    with pytest.raises(recipes.PageError, match="not fenced as ```sh: it would never run"):
        page(tmp_path, "# P\n\n<!-- recipe: exit: 0 -->\n```\ntrue\n```\n")


def test_paths_select_fan_out_and_count() -> None:
    doc = {"results": [{"name": "a", "status": "received"}, {"name": "b", "status": "dead"}], "stopped": ["x"]}
    assert recipes.values_at(doc, "results.[name=b].status") == ["dead"]
    assert recipes.values_at(doc, "results.*.name") == ["a", "b"]
    assert recipes.values_at(doc, "stopped.#") == [1]
    with pytest.raises(KeyError, match="no item with name"):
        recipes.values_at(doc, "results.[name=c].status")
    with pytest.raises(KeyError, match="no `met`"):
        recipes.values_at(doc, "met")


def test_every_json_document_printed_is_read_in_order_whatever_is_between() -> None:
    text = 'f00d\n{"status": "complete"}\nsome words\n{\n  "status": "merged"\n}\n'
    assert recipes.json_documents(text) == [{"status": "complete"}, {"status": "merged"}]
