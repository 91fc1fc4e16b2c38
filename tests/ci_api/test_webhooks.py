"""The GitHub-format webhook and the generic push trigger, short of running jobs."""

from __future__ import annotations

import hashlib
import hmac
import json

from tests.ci_api.conftest import CIStack
from tests.gitrepo import ZERO_SHA
from workflows.ci.ids import push_id


def _sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _post(stack: CIStack, event: str, body: bytes, signature: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", "X-GitHub-Event": event, "X-GitHub-Delivery": "d-1"}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    with stack.anonymous() as client:
        response = client.post("/v1/hooks/github", content=body, headers=headers)
    return response.status_code, response.json()


def test_signature_is_required_and_checked(ci_stack: CIStack) -> None:
    tenant = ci_stack.new_tenant()
    remote = ci_stack.git_remote()
    repo_id, name, secret = ci_stack.register(tenant, remote)
    body = json.dumps({"zen": "hi", "repository": {"full_name": name, "id": 1}}).encode()

    status, answer = _post(ci_stack, "ping", body, None)
    assert (status, answer["error"]["code"]) == (401, "missing_signature")
    status, answer = _post(ci_stack, "ping", body, _sign("not-the-secret", body))
    assert (status, answer["error"]["code"]) == (401, "invalid_signature")
    # The right secret over different bytes (the signature covers the raw body).
    status, _ = _post(ci_stack, "ping", body + b" ", _sign(secret, body))
    assert status == 401
    status, _ = _post(ci_stack, "ping", body, "sha256=" + "0" * 64)
    assert status == 401
    # An unregistered repository answers like a wrong signature (nothing is revealed).
    other = json.dumps({"repository": {"full_name": "nobody/nothing"}}).encode()
    status, _ = _post(ci_stack, "ping", other, _sign(secret, other))
    assert status == 401

    status, answer = _post(ci_stack, "ping", body, _sign(secret, body))
    assert (status, answer["status"]) == (200, "ok")
    # Matching by our repository id works too (no full name in the payload).
    by_id = json.dumps({"repository": {"id": repo_id}}).encode()
    assert _post(ci_stack, "ping", by_id, _sign(secret, by_id))[0] == 200


def test_other_events_and_deletions_create_nothing(ci_stack: CIStack) -> None:
    tenant = ci_stack.new_tenant()
    remote = ci_stack.git_remote()
    repo_id, name, secret = ci_stack.register(tenant, remote)

    issues = json.dumps({"action": "opened", "repository": {"full_name": name}}).encode()
    status, answer = _post(ci_stack, "issues", issues, _sign(secret, issues))
    assert (status, answer["status"], answer["pushes"]) == (202, "ignored", [])

    # A real branch deletion through git: the hook delivers after = 0000..., deleted = true.
    remote.write("README", "hello\n")
    remote.commit("first")
    remote.push("HEAD:refs/heads/doomed")
    remote.push(":refs/heads/doomed")
    deliveries = remote.deliveries()
    assert len(deliveries) == 2
    deletion = deliveries[1]
    assert json.loads(deletion.body)["after"] == ZERO_SHA and deletion.status == 200
    assert json.loads(deletion.answer)["status"] == "ignored"
    assert tenant.get(f"/v1/pushes/{push_id(repo_id, ZERO_SHA, 'refs/heads/doomed')}").status_code == 404
    # The created branch's push was accepted (a push workflow exists for it).
    created = json.loads(deliveries[0].answer)
    assert deliveries[0].status == 202 and created["status"] == "accepted"
    assert [p["repo_id"] for p in created["pushes"]] == [repo_id]


def test_generic_push_is_tenant_scoped_and_validated(ci_stack: CIStack) -> None:
    alice, bob = ci_stack.new_tenant(), ci_stack.new_tenant()
    repo_id, _, _ = ci_stack.register(alice, ci_stack.git_remote())
    body = {"repo_id": repo_id, "commit_sha": "a" * 40, "ref": "refs/heads/main"}

    assert ci_stack.anonymous().post("/v1/hooks/push", json=body).status_code == 401
    assert bob.post("/v1/hooks/push", json=body).status_code == 404
    bad = alice.post("/v1/hooks/push", json={**body, "commit_sha": "xyz"})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "commit_sha"
    bad = alice.post("/v1/hooks/push", json={**body, "ref": "main"})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "ref"

    first = alice.post("/v1/hooks/push", json=body)
    again = alice.post("/v1/hooks/push", json=body)
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"] == push_id(repo_id, "a" * 40, "refs/heads/main")
    # Another tenant cannot see the push.
    assert bob.get(f"/v1/pushes/{first.json()['id']}").status_code == 404


def test_matching_by_host_id_form_encoding_and_shared_names(ci_stack: CIStack) -> None:
    alice, bob = ci_stack.new_tenant(), ci_stack.new_tenant()
    remote = ci_stack.git_remote()
    alice_repo, name, alice_secret = ci_stack.register(alice, remote)
    # Bob registers the same full name with his own secret: a delivery reaches only the
    # repository whose secret verifies it.
    bob_repo = bob.post(
        "/v1/repos",
        json={"name": name, "clone_url": remote.clone_url, "webhook_secret": "bob-secret-1", "github_id": 987654},
    ).json()["id"]
    remote.write("README", "hi\n")
    sha = remote.commit("first")
    remote.push()
    (delivery,) = remote.deliveries()
    assert delivery.status == 202, delivery.answer
    assert [p["repo_id"] for p in json.loads(delivery.answer)["pushes"]] == [alice_repo]
    assert bob.get(f"/v1/pushes/{push_id(bob_repo, sha, 'refs/heads/main')}").status_code == 404

    # The host's numeric id matches too (Bob registered it).
    by_host_id = json.dumps({"repository": {"id": 987654}}).encode()
    assert _post(ci_stack, "ping", by_host_id, _sign("bob-secret-1", by_host_id))[0] == 200
    assert _post(ci_stack, "ping", by_host_id, _sign(alice_secret, by_host_id))[0] == 401

    # GitHub's form encoding: payload=<json>, signed over the raw form body.
    form = b"payload=" + json.dumps({"repository": {"full_name": name}}).encode().replace(b" ", b"+")
    with ci_stack.anonymous() as client:
        response = client.post(
            "/v1/hooks/github",
            content=form,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "X-GitHub-Event": "ping",
                "X-Hub-Signature-256": _sign(alice_secret, form),
            },
        )
    assert response.status_code == 200, response.text
