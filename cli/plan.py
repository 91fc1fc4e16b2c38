"""``leasehold plan``: the capacity and cost simulator (``planning``).

Not ``leasehold plans`` (``cli/plans.py``), which sets CI tenants' plans.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from cli.common import UsageError, command_settings

SCENARIO_HELP = "a built-in scenario (seed, gang, regions, small) or a YAML/JSON scenario file"


def cmd_plan(args: argparse.Namespace) -> int:
    from planning.plots import PlotsUnavailable, draw
    from planning.report import plan_report, seed_report
    from planning.scenario import ScenarioError, load_scenario, parse_scenario
    from planning.scenarios import BUILT_IN

    settings = command_settings(args)
    began = time.monotonic()
    cpu = time.process_time()
    try:
        if args.scenario in BUILT_IN:
            data = dict(BUILT_IN[args.scenario])
            source = args.scenario
        else:
            scenario = load_scenario(Path(args.scenario))
            data = scenario.model_dump()
            source = args.scenario
        if args.horizon is not None:
            data["horizon_seconds"] = args.horizon
            data["warmup_seconds"] = min(data.get("warmup_seconds", 600.0), args.horizon / 4)
        if args.seed is not None:
            data["seed"] = args.seed
        scenario = parse_scenario(data, source)
    except ScenarioError as exc:
        raise UsageError(str(exc)) from None

    def progress(line: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - began:5.1f} s] {line}", file=sys.stderr, flush=True)

    build = seed_report if scenario.name == "seed" and not args.generic else plan_report
    report = build(scenario, settings, progress)
    print("\n".join(report.lines))
    if args.plots is not None:
        try:
            for path in draw(report, args.plots):
                print(f"plot: {path}")
        except PlotsUnavailable as exc:
            print(f"leasehold: {exc}; the report above is complete without them", file=sys.stderr)
    print(f"(simulated in {time.monotonic() - began:.1f} s, {time.process_time() - cpu:.1f} s of CPU)")
    return 0


def add_commands(sub: Any) -> None:
    """Add ``plan`` to the top-level parser's subparsers."""
    plan = sub.add_parser(
        "plan",
        help="simulate the video scheduler: waits, goodput, cost and the fleet a target wait needs",
    )
    plan.add_argument("--scenario", required=True, help=SCENARIO_HELP)
    plan.add_argument("--plots", type=Path, default=None, help="directory to draw PNG figures into")
    plan.add_argument("--horizon", type=float, default=None, help="seconds of arrivals (overrides the scenario)")
    plan.add_argument("--seed", type=int, default=None, help="random seed (overrides the scenario)")
    plan.add_argument("--generic", action="store_true", help="the generic report even for the seed scenario")
    plan.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    plan.add_argument("--data-dir", type=Path, default=None, help=argparse.SUPPRESS)
    plan.set_defaults(func=cmd_plan)
