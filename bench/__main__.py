"""``python -m bench [--full]``: leasehold's benchmarks, each beside a baseline measured in the
same run; prints the tables and writes them to bench/RESULTS.md. Never asserts timings."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shlex
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import checkpoint_overhead, ci, goodput, lost_work, scheduling, submit_latency
from bench.report import Table, machine
from leasehold.temporal import connect
from testing.stack import start_embedded, stop_embedded

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--full", action="store_true", help="the full report (longer runs, more samples)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the preemption times (default: random)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the Markdown report")
    return parser.parse_args(argv)


async def _bench(args: argparse.Namespace, tables: list[Table]) -> None:
    full = args.full
    show = lambda table: print(table.text() + "\n", flush=True)  # noqa: E731

    overhead = await asyncio.to_thread(checkpoint_overhead.measure, 600 if full else 250)
    tables.append(overhead)
    show(overhead)
    # Goodput runs its own two stacks (checkpointing off and on), before the shared one starts.
    with tempfile.TemporaryDirectory(prefix="leasehold-goodput-") as tmp:
        table = await goodput.run(Path(tmp), args.seed, goodput.FULL if full else goodput.SHORT)
    tables.append(table)
    show(table)

    with tempfile.TemporaryDirectory(prefix="leasehold-bench-") as tmp:
        stack = start_embedded(
            Path(tmp),
            {"LEASEHOLD_CHECKPOINT_INTERVAL_SECONDS": "10", "LEASEHOLD_VIDEO_HEARTBEAT_TIMEOUT_SECONDS": "5"},
        )
        try:
            client = await connect(stack.settings())
            key = stack.new_key("bench")

            gpu = stack.child_pid("worker gpu")
            os.kill(gpu, signal.SIGSTOP)
            started: list[str] = []
            try:
                rates: list[float] = [10, 20, 40, 80, 160, 320] if full else [10, 20, 40, 80]
                table = await submit_latency.run(stack.api_url, key, client, rates, 15 if full else 4, started)
            finally:
                os.kill(gpu, signal.SIGCONT)
                for workflow_id in started:
                    try:
                        await client.get_workflow_handle(workflow_id).terminate("benchmark cleanup")
                    except Exception:  # already closed
                        pass
            tables.append(table)
            show(table)

            table = await scheduling.run(stack.api_url, key, client, 30 if full else 10)
            tables.append(table)
            show(table)

            table = await lost_work.run(stack, client, key, args.seed, 8 if full else 3, 10.0)
            tables.append(table)
            show(table)

            table = await asyncio.to_thread(ci.run, stack.api_url, key, Path(tmp), 10 if full else 4, 5 if full else 2)
            tables.append(table)
            show(table)
        finally:
            stop_embedded(stack)


def _markdown(args: argparse.Namespace, argv: list[str], tables: list[Table], seconds: float) -> str:
    info = machine()
    command = "python -m bench" + ("" if not argv else " " + shlex.join(argv))
    lines = [
        "# Benchmark results",
        "",
        f"Produced by `{command}` (seed {args.seed}) on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC in {seconds:.0f} s.",
        "`python -m bench` is the short mode; `python -m bench --full` the full report. Figures come from one run;",
        "every table has its baseline measured in the same run. Nothing here is asserted by tests.",
        "",
        "## Machine",
        "",
        f"- CPUs: {info['nproc']} x {info['cpu']}",
        f"- Memory: {info['memory']}",
        f"- OS: {info['os']}; Python {info['python']}",
        f"- Versions: {info['versions']}",
        "- Shared with other work while measured: treat absolute figures as indicative.",
        "",
        "## Figures",
        "",
    ]
    for table in tables:
        lines += [table.markdown(), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(2**31)
    tables: list[Table] = []
    began = time.monotonic()
    asyncio.run(_bench(args, tables))
    args.out.write_text(_markdown(args, argv, tables, time.monotonic() - began))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
