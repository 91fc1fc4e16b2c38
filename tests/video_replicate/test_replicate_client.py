"""The Replicate API, driven by the official ``replicate`` client, unchanged, end to end:
real API, orchestration and GPU worker processes, a real dev server, a loopback receiver."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import av
import httpx
import pytest
from replicate.exceptions import ReplicateError
from replicate.helpers import FileOutput
from replicate.webhook import InvalidSignatureError, WebhookSigningSecret

from tests.video_replicate.conftest import FAST_STEPS, MODEL, OWNER, SIZE, SLOW_STEPS, Caller, ReplicateStack
from tests.video_webhooks.stack import Receiver, wait_until

REF = f"{OWNER}/{MODEL}"
INPUT = {"prompt": "a red kite over the sea", "seconds": 1, "size": SIZE, "num_inference_steps": FAST_STEPS}
# procedural-v1 makes 8 frames a second.
FRAMES = 8


def _decode(data: bytes) -> tuple[int, int, int]:
    """(width, height, frames) of an MP4 held in memory."""
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(stream))
        return stream.codec_context.width, stream.codec_context.height, frames


def _download(caller: Caller, url: str) -> bytes:
    # The client wraps https URLs in FileOutput itself; this stack serves plain http on
    # loopback, so the test wraps the URL it got in the client's own class.
    assert url.startswith("http"), url
    return FileOutput(url, caller.client).read()


def test_models_and_versions_come_from_the_catalogue(stack: ReplicateStack) -> None:
    client = stack.caller().client
    model = client.models.get(REF)
    assert (model.owner, model.name) == (OWNER, MODEL)
    version = model.latest_version
    assert version is not None and len(version.id) == 64
    schema = version.openapi_schema["components"]["schemas"]
    assert {"prompt", "num_frames", "resolution", "seed"} <= set(schema["Input"]["properties"])
    assert schema["Output"]["format"] == "uri"
    assert [v.id for v in model.versions.list().results] == [version.id]
    assert model.versions.get(version.id).id == version.id
    with pytest.raises(ReplicateError) as missing:
        client.models.get(f"{OWNER}/no-such-model")
    assert missing.value.status == 404 and missing.value.title == "Not found"


def test_run_waits_and_returns_a_video_the_client_downloads(stack: ReplicateStack) -> None:
    caller = stack.caller()
    started = time.monotonic()
    output = caller.client.run(REF, input=INPUT)
    # One call: Prefer: wait held the answer until the video existed.
    assert isinstance(output, str) and "/v1/files?" in output, output
    assert time.monotonic() - started < 60
    width, height, frames = _decode(_download(caller, output))
    assert (width, height, frames) == (180, 320, FRAMES)


def test_create_wait_get_and_a_signed_webhook(stack: ReplicateStack, receiver: Receiver) -> None:
    caller = stack.caller()
    client = caller.client
    version = client.models.get(REF).latest_version
    assert version is not None
    prediction = client.predictions.create(
        version=version.id,
        input={**INPUT, "seed": 7},
        webhook=receiver.url("/replicate/one"),
        webhook_events_filter=["start", "completed"],
    )
    assert prediction.status == "starting"
    assert prediction.model == REF and prediction.version == version.id
    assert prediction.urls is not None and set(prediction.urls) == {"get", "cancel", "stream"}
    prediction.wait()
    assert prediction.status == "succeeded", prediction.error
    assert prediction.metrics is not None and prediction.metrics["predict_time"] > 0
    assert prediction.input == {
        "prompt": INPUT["prompt"],
        "seconds": 1,
        "size": SIZE,
        "seed": 7,
        "num_inference_steps": 4,
    }
    assert prediction.started_at is not None and prediction.completed_at is not None
    assert prediction.started_at <= prediction.completed_at
    assert prediction.progress is not None and prediction.progress.percentage == 1.0
    assert _decode(_download(caller, prediction.output))[2] == FRAMES
    # The same job on the other surface.
    video = caller.http.get(f"/v1/videos/{prediction.id}").json()
    assert (video["status"], video["size"], video["prompt"]) == ("completed", SIZE, INPUT["prompt"])
    assert client.predictions.get(prediction.id).status == "succeeded"

    received = wait_until(
        lambda: [r for r in receiver.at("/replicate/one") if json.loads(r.body)["status"] == "succeeded"],
        30,
        "the completed webhook",
    )
    deliveries = receiver.at("/replicate/one")
    statuses = [json.loads(r.body)["status"] for r in deliveries]
    assert statuses[0] == "starting" and statuses[-1] == "succeeded", statuses
    assert len(received) == 1
    secret = client.webhooks.default.secret()
    for delivery in deliveries:
        client.webhooks.validate(headers=delivery.headers, body=delivery.body.decode(), secret=secret, tolerance=300)
    completed = received[0]
    assert json.loads(completed.body)["id"] == prediction.id
    with pytest.raises(InvalidSignatureError):
        client.webhooks.validate(headers=completed.headers, body=completed.body.decode() + " ", secret=secret)
    other = stack.caller().client.webhooks.default.secret()
    assert other.key != secret.key
    with pytest.raises(InvalidSignatureError):
        client.webhooks.validate(
            headers=completed.headers, body=completed.body.decode(), secret=WebhookSigningSecret(key=other.key)
        )


def test_stream_sends_logs_output_and_done(stack: ReplicateStack, receiver: Receiver) -> None:
    caller = stack.caller()
    # Every webhook event (no filter) beside the stream.
    events = list(caller.client.stream(REF, input=INPUT, webhook=receiver.url("/replicate/all")))
    kinds = [event.event.value for event in events]
    assert kinds[-1] == "done" and json.loads(events[-1].data) == {}
    logs = [event.data for event in events if event.event.value == "logs"]
    assert any(line.startswith("100%|") for line in logs), logs
    outputs = [event.data for event in events if event.event.value == "output"]
    assert len(outputs) == 1
    assert _decode(_download(caller, str(outputs[0])))[2] == FRAMES

    def delivered() -> list[dict[str, Any]]:
        return [json.loads(r.body) for r in receiver.at("/replicate/all")]

    # The output event, then the completed one.
    wait_until(lambda: sum(p["status"] == "succeeded" for p in delivered()) >= 2, 30, "output and completed")
    bodies = delivered()
    secret = caller.client.webhooks.default.secret()
    for delivery in receiver.at("/replicate/all"):
        caller.client.webhooks.validate(headers=delivery.headers, body=delivery.body.decode(), secret=secret)
    # start (starting), then output and completed (both succeeded, the output in each).
    assert bodies[0]["status"] == "starting" and bodies[0]["output"] is None
    assert [p["status"] for p in bodies[-2:]] == ["succeeded", "succeeded"]
    assert all(p["output"] for p in bodies[-2:])
    assert len({r.headers["webhook-id"] for r in receiver.at("/replicate/all")}) == len(bodies)


def test_list_pages_with_cursors(stack: ReplicateStack) -> None:
    caller = stack.caller()
    client = caller.client
    created = [client.predictions.create(model=REF, input={**INPUT, "seed": seed}).id for seed in range(3)]
    # A job made through /v1/videos is a prediction too.
    body = {"prompt": "a kite", "model": MODEL, "seconds": "1", "size": SIZE, "steps": FAST_STEPS}
    video = caller.http.post("/v1/videos", json=body).json()
    newest_first = [video["id"], *reversed(created)]
    assert [p.id for p in client.predictions.list().results] == newest_first
    first = client.predictions.list(cursor="/v1/predictions?limit=3")
    assert [p.id for p in first.results] == newest_first[:3]
    assert first.previous is None and first.next is not None
    second = client.predictions.list(cursor=first.next)
    assert [p.id for p in second.results] == newest_first[3:]
    assert second.next is None and second.previous is not None
    back = client.predictions.list(cursor=second.previous)
    assert [p.id for p in back.results] == newest_first[:3]
    for prediction_id in newest_first:
        client.predictions.get(prediction_id).wait()


def test_wait_runs_out_then_cancel_and_another_user_sees_nothing(stack: ReplicateStack) -> None:
    caller = stack.caller()
    client = caller.client
    started = time.monotonic()
    prediction = client.predictions.create(model=REF, input={**INPUT, "num_inference_steps": SLOW_STEPS}, wait=2)
    # The hold ran out: answered as Replicate does, "starting", within the wait.
    assert prediction.status == "starting"
    assert time.monotonic() - started < 6
    wait_until(lambda: client.predictions.get(prediction.id).status == "processing", 60, "the job runs")

    other = stack.caller().client
    for attempt in (lambda: other.predictions.get(prediction.id), lambda: other.predictions.cancel(prediction.id)):
        with pytest.raises(ReplicateError) as refused:
            attempt()
        assert refused.value.status == 404
    assert other.predictions.list().results == []

    client.predictions.cancel(prediction.id)
    prediction.wait()
    assert prediction.status == "canceled"
    assert prediction.output is None
    # Cancelling what already ended answers it as it is.
    assert client.predictions.cancel(prediction.id).status == "canceled"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"frames_per_second": 8}, "input.frames_per_second"),
        ({"size": "123x45"}, "input.size"),
        ({"num_inference_steps": 100_000}, "input.num_inference_steps"),
        ({"seconds": "many"}, "input.seconds"),
        ({"image": "https://example.com/a.png"}, "input.image"),
        ({"prompt": ""}, "input.prompt"),
    ],
)
def test_invalid_input_is_a_422_naming_the_field(stack: ReplicateStack, fields: dict[str, Any], named: str) -> None:
    client = stack.caller().client
    with pytest.raises(ReplicateError) as refused:
        client.predictions.create(model=REF, input={**INPUT, **fields})
    assert refused.value.status == 422, refused.value
    assert refused.value.title == "Input validation failed"
    assert named in (refused.value.detail or ""), refused.value.detail


def test_keys_errors_and_prefer_in_replicates_shape(stack: ReplicateStack) -> None:
    caller = stack.caller()
    with pytest.raises(ReplicateError) as unauthenticated:
        type(caller.client)(api_token="lh_not-a-key", base_url=stack.base_url).predictions.list()
    assert unauthenticated.value.status == 401 and unauthenticated.value.title == "Unauthenticated"
    # Replicate's documentation sends "Token <key>"; leasehold's keys work either way.
    with httpx.Client(base_url=stack.base_url, headers={"Authorization": f"Token {caller.key}"}) as token:
        assert token.get("/v1/predictions").status_code == 200
        response = token.post("/v1/predictions", json={"version": REF, "input": INPUT}, headers={"Prefer": "wait=61"})
        assert response.status_code == 400
        assert response.headers["content-type"].startswith("application/problem+json")
        assert set(response.json()) >= {"title", "detail", "status"}
        unknown = token.post("/v1/predictions", json={"version": REF, "input": INPUT, "colour": "red"})
        assert unknown.status_code == 422 and "colour" in unknown.json()["detail"]
        missing = token.get("/v1/predictions/not-a-prediction")
        assert missing.status_code == 404 and missing.json()["title"] == "Not found"


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/v1/predictions", b"{not json", 422),
        ("POST", "/v1/predictions", b"[]", 422),
        ("POST", "/v1/predictions", {"input": INPUT}, 422),
        ("POST", "/v1/predictions", {"version": "", "input": INPUT}, 422),
        ("POST", "/v1/predictions", {"version": "0" * 64, "input": INPUT}, 422),
        ("POST", "/v1/predictions", {"version": REF, "input": "a kite"}, 422),
        ("POST", "/v1/predictions", {"version": REF, "input": {**INPUT, "seed": -1}}, 422),
        ("POST", "/v1/predictions", {"version": REF, "input": {**INPUT, "seed": 1.5}}, 422),
        ("POST", "/v1/predictions", {"version": REF, "input": {**INPUT, "resolution": "999p"}}, 422),
        ("POST", "/v1/predictions", {"version": REF, "input": INPUT, "webhook": "file:///etc/passwd"}, 422),
        ("POST", "/v1/predictions", {"version": REF, "input": INPUT, "webhook": "http://10.0.0.1/hook"}, 422),
        ("POST", "/v1/predictions", {"version": REF, "input": INPUT, "webhook_events_filter": ["start"]}, 422),
        ("POST", f"/v1/models/{OWNER}/nope/predictions", {"input": INPUT}, 404),
        ("GET", "/v1/predictions?cursor=%%%", None, 400),
        ("GET", "/v1/predictions?limit=0", None, 422),
        ("POST", "/v1/predictions/vid_0/cancel", None, 404),
        ("GET", "/v1/predictions/vid_0/stream", None, 404),
        ("GET", f"/v1/models/{OWNER}/{MODEL}/versions/{'0' * 64}", None, 404),
    ],
)
def test_malformed_requests_answer_problems_never_500(
    stack: ReplicateStack, method: str, path: str, body: Any, status: int
) -> None:
    http = stack.caller().http
    content = body if isinstance(body, bytes) else None
    payload = None if isinstance(body, bytes) else body
    headers = {"content-type": "application/json"} if content is not None else {}
    response = http.request(method, path, content=content, json=payload, headers=headers)
    assert response.status_code == status, response.text
    problem = response.json()
    assert problem["status"] == status and problem["title"] and problem["detail"], problem
    assert "Traceback" not in response.text
