"""A conflict resolver run as a real agent flight (a preset's program) for the merge queue's
`--resolve-with`: in the branch's worktree it merges the target named in its prompt, keeps
both sides of each conflicting hunk (ours first), and commits the merge, with real git."""

from __future__ import annotations

import re
import subprocess
import sys

prompt = sys.argv[1]
target = re.search(r"git merge (refs/heads/\S+?)`", prompt)
if target is None:
    sys.exit(f"no `git merge REF` in the prompt: {prompt!r}")
merged = subprocess.run(["git", "merge", "--no-edit", target.group(1)], capture_output=True, text=True)
if merged.returncode != 0:
    out = subprocess.run(["git", "diff", "--name-only", "--diff-filter=U"], capture_output=True, text=True, check=True)
    for path in out.stdout.split():
        with open(path) as f:
            lines = [line for line in f if not line.startswith(("<<<<<<<", "=======", ">>>>>>>"))]
        with open(path, "w") as f:
            f.writelines(lines)
        subprocess.run(["git", "add", path], check=True)
    subprocess.run(["git", "commit", "--quiet", "--no-edit"], check=True)
print("resolved", flush=True)
