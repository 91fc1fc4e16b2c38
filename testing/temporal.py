"""A throwaway Temporal dev server set up like the embedded one, for tests and benchmarks."""

from __future__ import annotations

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from leasehold.devserver import DYNAMIC_CONFIG, find_temporal_binary
from workflows.search_attributes import ALL


async def start_local_environment() -> WorkflowEnvironment:
    """A throwaway in-memory dev server set up like the embedded one (fairness on, leasehold's
    search attributes, pydantic payloads): the one tests and benchmarks run against."""
    extra: list[str] = ["--log-level", "error"]
    for value in DYNAMIC_CONFIG:
        extra += ["--dynamic-config-value", value]
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=find_temporal_binary(),
        search_attributes=ALL,
        data_converter=pydantic_data_converter,
        dev_server_extra_args=extra,
        ui=False,
    )
