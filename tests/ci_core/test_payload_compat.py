"""Payloads written before the push context was nested still decode, and new ones stay readable
by the previous code: running executions and recorded histories hold the flat shape."""

from __future__ import annotations

import json
from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter

from workflows.ci.types.job import JobActivityInput
from workflows.ci.types.push import CIPushInput, PushContext
from workflows.ci.types.run import CIRunInput

# The fields of the push context as the flat payloads carried them.
FLAT_CONTEXT: dict[str, Any] = {
    "tenant_id": "tenant-a",
    "repo_id": "repo-1",
    "repo_full_name": "acme/widgets",
    "clone_url": "https://git.example/acme/widgets.git",
    "commit_sha": "a" * 40,
    "ref": "refs/pull/7/head",
    "queue_prefix": "t1-",
    "heartbeat_timeout_seconds": 20.0,
    "cancel_grace_seconds": 3.0,
    "retry_window_seconds": 60.0,
    "event": "pull_request",
    "pull_request": {
        "number": 7,
        "head_ref": "feature",
        "base_ref": "main",
        "head_repo": "fork/widgets",
        "base_repo": "acme/widgets",
        "action": "synchronize",
    },
    "fairness_weight": 2.0,
    "max_concurrent_jobs": 3,
    "fair_share": False,
    "default_branch": "main",
}
OLD_PUSH_INPUT = {**FLAT_CONTEXT, "received_at": "2026-11-30T12:00:00Z", "delivery_id": "d-1"}
OLD_RUN_INPUT = {
    **FLAT_CONTEXT,
    "run_id": "run_0123456789abcdef",
    "workflow_path": ".github/workflows/ci.yml",
    "created_at": "2026-11-30T12:00:01Z",
    "spec": {"path": ".github/workflows/ci.yml", "name": "ci", "jobs": [{"id": "build", "name": "build"}]},
    "push_id": "push-1",
    "environments": {"prod": {"name": "prod", "required_approval": True}},
}
# The job activity's input carried only part of the context (the rest takes defaults).
JOB_FIELDS = ("tenant_id", "repo_id", "repo_full_name", "clone_url", "commit_sha", "ref")
OLD_JOB_INPUT = {
    **{k: FLAT_CONTEXT[k] for k in JOB_FIELDS},
    "run_id": "run_0123456789abcdef",
    "run_workflow_id": "ci-run:run_0123456789abcdef",
    "workflow_name": "ci",
    "workflow_path": ".github/workflows/ci.yml",
    "job": {"id": "build", "name": "build"},
    "round": 2,
    "cancel_grace_seconds": 3.0,
    "event": "pull_request",
    "secrets_allowed": False,
    "default_branch": "main",
}


def decode(data: dict[str, Any], type_: type) -> Any:
    """Decode the way a worker does: the Temporal payload converter, JSON bytes in."""
    [payload] = pydantic_data_converter.payload_converter.to_payloads([data])
    [value] = pydantic_data_converter.payload_converter.from_payloads([payload], [type_])
    return value


def test_an_old_flat_push_input_decodes_into_its_context() -> None:
    inp = decode(OLD_PUSH_INPUT, CIPushInput)
    assert inp.push == PushContext.model_validate(FLAT_CONTEXT)
    assert inp.delivery_id == "d-1"
    assert inp.push.pull_request is not None and inp.push.pull_request.from_fork


def test_an_old_flat_run_input_decodes_into_its_context() -> None:
    inp = decode(OLD_RUN_INPUT, CIRunInput)
    assert inp.push == PushContext.model_validate(FLAT_CONTEXT)
    assert inp.run_id == "run_0123456789abcdef"
    assert inp.spec is not None and inp.spec.jobs[0].id == "build"
    assert inp.environments["prod"].required_approval


def test_an_old_flat_job_input_decodes_into_its_context() -> None:
    inp = decode(OLD_JOB_INPUT, JobActivityInput)
    assert inp.push.tenant_id == "tenant-a"
    assert inp.push.commit_sha == "a" * 40
    assert inp.push.cancel_grace_seconds == 3.0
    assert inp.push.event == "pull_request"
    assert inp.push.default_branch == "main"
    # Fields the old job input did not carry take their defaults.
    assert inp.push.queue_prefix == "" and inp.push.pull_request is None
    assert (inp.round, inp.secrets_allowed) == (2, False)


def test_a_new_payload_round_trips_and_keeps_the_flat_fields_for_the_previous_code() -> None:
    for old, type_ in ((OLD_PUSH_INPUT, CIPushInput), (OLD_RUN_INPUT, CIRunInput), (OLD_JOB_INPUT, JobActivityInput)):
        inp = type_.model_validate(old)
        written = json.loads(inp.model_dump_json())
        assert written["push"] == inp.push.model_dump(mode="json")
        # Every flat field the previous code read is still there, with the same value.
        for key in old:
            if key in PushContext.model_fields:
                assert written[key] == written["push"][key], (type_.__name__, key)
        assert type_.model_validate(written) == inp


def test_a_flat_update_of_a_copy_lands_in_the_context() -> None:
    inp = CIPushInput.model_validate(OLD_PUSH_INPUT)
    forged = inp.model_copy(update={"tenant_id": "tenant-evil", "delivery_id": "d-2"})
    assert forged.push.tenant_id == "tenant-evil"
    assert forged.delivery_id == "d-2"
    # The original is untouched.
    assert inp.push.tenant_id == "tenant-a"
