"""The orchestration worker's workflow cache is the configured size, not the SDK's 1000: CI runs
stay open for days, and every cached one holds memory (bench/SOAK_RESULTS.md)."""

from __future__ import annotations

from temporalio.client import Client

from leasehold.settings import Settings
from orchestrator.main import build_worker


def test_the_workflow_cache_is_sized_by_the_setting(settings: Settings, temporal_client: Client) -> None:
    assert Settings.model_fields["orchestration_max_cached_workflows"].default == 300
    settings.data_dir.mkdir(parents=True, exist_ok=True)  # the worker's SQLite file lives there
    sized = settings.model_copy(update={"orchestration_max_cached_workflows": 7})
    assert build_worker(temporal_client, sized).config()["max_cached_workflows"] == 7
