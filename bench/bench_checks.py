"""What a check costs the process that asks for it (core/checks.py, core/check_runner.py).

    python bench/bench_checks.py [--seconds 10] [--rates 100,500,2000] [--runs 3]
    python bench/bench_checks.py --code /tmp/before   # the same against other code
    python bench/bench_checks.py --quick              # each path once: that it runs (CI)

A join with a check asks the process's check runner for one check per report, and reads its
verdict back (issue 41: a join with a check should cost what the plain fan-in costs per
report). Here a child process asks for `true` checks at a steady rate, as reports come, and
takes each verdict as a join does; its CPU (user + sys, its own: not the runner's, not the
checks') per check, less the same loop paced with no check (its timer wakes), is what the
checks cost the asking process: the request written, the verdict read and parsed, the
bookkeeping. Each cell is the median of `--runs` runs, the range beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def ask(n: int, rate: float, bare: bool) -> dict[str, float]:
    """Ask `n` checks at `rate` a second (`bare`: the pacing alone); this process's CPU."""
    from wavewait.core import checks

    folder = tempfile.mkdtemp(prefix="bench-checks-")
    runner = checks.runner()
    by_callback = "replied" in inspect.signature(runner.submit).parameters  # older code: a future
    left, done = [n], asyncio.Event()
    passed = [0]

    def got(reply: dict[str, object] | None) -> None:
        passed[0] += bare or checks.verdict(reply, 60).passed
        left[0] -= 1
        if not left[0]:
            done.set()

    c0, t0 = cpu(), time.monotonic()
    for i in range(n):
        ahead = t0 + i / rate - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)
        if bare:
            got(None)
        elif by_callback:
            runner.submit("true", folder, 60, got)
        else:
            _, reply = runner.submit("true", folder, 60)
            reply.add_done_callback(lambda f: got(f.result()))
    await done.wait()
    os.rmdir(folder)
    return {"cpu_us": 1e6 * (cpu() - c0) / n, "passed": passed[0], "seconds": time.monotonic() - t0}


def child(args: argparse.Namespace, n: int, rate: float, bare: bool) -> dict[str, float]:
    env = dict(os.environ)
    if args.code:
        env["PYTHONPATH"] = os.path.abspath(args.code)
    argv = [sys.executable, HERE, "--child", str(n), str(rate), *(["--bare"] if bare else [])]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["passed"] == n, f"{n - result['passed']} of {n} checks did not pass: {out.stderr[-2000:]}"
    return result


def cell(values: list[float]) -> str:
    mid = statistics.median(values)
    return f"{mid:.1f}" if len(values) == 1 else f"{mid:.1f} ({min(values):.1f}-{max(values):.1f})"


def main(args: argparse.Namespace) -> None:
    rows = []
    for rate in (float(r) for r in args.rates.split(",")):
        n = max(1, int(rate * args.seconds))
        bare, asked = [], []
        for _ in range(args.runs):  # interleaved: what else the machine does moves both alike
            bare.append(child(args, n, rate, True)["cpu_us"])
            asked.append(child(args, n, rate, False)["cpu_us"])
        own = [a - b for a, b in zip(asked, bare, strict=True)]
        rows.append((rate, n, cell(bare), cell(asked), cell(own)))
    code = args.code or "this checkout"
    print(
        f"\nbench_checks ({code}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; median (range) of {args.runs})"
    )
    print("| checks/s | checks | pacing alone, µs CPU each | with a check, µs each | the check's own, µs |")
    print("|---|---|---|---|---|")
    for rate, n, b, a, o in rows:
        print(f"| {rate:g} | {n:,} | {b} | {a} | {o} |")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=10.0, help="how long each run asks")
    p.add_argument("--rates", default="100,500,2000", help="checks a second, one row each")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--code", help="a folder with the wavewait package to measure instead")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", nargs=2, metavar=("N", "RATE"), help=argparse.SUPPRESS)
    p.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.seconds, args.rates, args.runs = 0.2, "100", 1
    return args


if __name__ == "__main__":
    a = parse()
    if a.child:
        print(json.dumps(asyncio.run(ask(int(a.child[0]), float(a.child[1]), a.bare))))
    else:
        main(a)
