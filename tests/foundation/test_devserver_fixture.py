"""The session dev server is real and has leasehold's search attributes registered."""

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client


async def test_search_attributes_registered(temporal_client: Client) -> None:
    resp = await temporal_client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=temporal_client.namespace)
    )
    for name in ("JobState", "TenantId", "UserId", "ModelVersion", "Tier", "RepoId", "CommitSha", "RunState"):
        assert name in resp.custom_attributes
