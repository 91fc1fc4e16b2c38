"""Artifacts end to end on real processes, through the official client: a JavaScript action
bundled from ``@actions/artifact`` (npm) uploads a file in one job, lists and downloads it in a
``needs`` job, in bubblewrap sandboxes that have no network (the results service is reached
through the attempt's socket); the API lists the run's artifacts and serves the zip; another
tenant gets 404; a second upload of the same name in the run is refused."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile

from tests.artifact_action import files as action_files
from tests.ci_api.conftest import CIStack
from tests.ci_api.flows import job, log_text, push_workflow, wait_run

WORKFLOW = """
on: push
jobs:
  make:
    runs-on: linux
    steps:
      - run: mkdir -p out && echo "hello from make" > out/greeting.txt
      - uses: ./.github/actions/artifact
        with: {mode: upload, name: greeting, file: out/greeting.txt}
  use:
    needs: make
    runs-on: linux
    steps:
      - uses: ./.github/actions/artifact
        with: {mode: download, name: greeting, path: got}
      - run: cat got/out/greeting.txt
  again:
    needs: make
    runs-on: linux
    steps:
      - run: mkdir -p out && echo other > out/greeting.txt
      - uses: ./.github/actions/artifact
        with: {mode: upload, name: greeting, file: out/greeting.txt}
"""


def test_an_artifact_goes_from_one_job_to_the_next(ci_engine: CIStack) -> None:
    pushed = push_workflow(ci_engine, WORKFLOW, binary_files=action_files())
    client = pushed.client
    run = wait_run(client, pushed.run_id, timeout=240)
    assert job(run, "make")["status"] == "success", log_text(client, pushed.run_id, "make")
    assert job(run, "use")["status"] == "success", log_text(client, pushed.run_id, "use")
    make_log = log_text(client, pushed.run_id, "make")
    assert "uploaded greeting id=" in make_log, make_log
    use_log = log_text(client, pushed.run_id, "use")
    assert "listed greeting" in use_log and "hello from make" in use_log, use_log
    # Names are unique in a run: the other job's upload of the same name fails.
    assert job(run, "again")["status"] == "failure"
    assert "already exists" in log_text(client, pushed.run_id, "again")

    listed = client.get(f"/v1/runs/{pushed.run_id}/artifacts")
    assert listed.status_code == 200, listed.text
    (artifact,) = listed.json()["data"]
    assert (artifact["name"], artifact["job_id"]) == ("greeting", "make")
    assert artifact["digest"].startswith("sha256:") and artifact["size"] > 0
    zipped = client.get(artifact["download_url"])
    assert zipped.status_code == 200 and zipped.headers["content-type"] == "application/zip"
    assert len(zipped.content) == artifact["size"]
    with zipfile.ZipFile(io.BytesIO(zipped.content)) as archive:
        assert archive.read("out/greeting.txt") == b"hello from make\n"

    # The CLI lists them and writes the zip.
    key = client.headers["Authorization"].removeprefix("Bearer ")
    cli = [sys.executable, "-m", "cli.main", "runs", "artifacts", pushed.run_id, "--api-url", ci_engine.base_url]
    listed_cli = subprocess.run([*cli, "--api-key", key, "--json"], capture_output=True, text=True, timeout=60)
    assert listed_cli.returncode == 0, listed_cli.stderr
    assert [a["name"] for a in json.loads(listed_cli.stdout)["data"]] == ["greeting"]
    target = ci_engine.root / f"{pushed.run_id}-greeting.zip"
    fetched = subprocess.run(
        [*cli, "--api-key", key, "--download", "greeting", "-o", str(target)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert fetched.returncode == 0, fetched.stderr
    assert target.read_bytes() == zipped.content
    missing = subprocess.run([*cli, "--api-key", key, "--download", "nope"], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 3 and "no artifact named 'nope'" in missing.stderr

    other = ci_engine.new_tenant()
    assert other.get(f"/v1/runs/{pushed.run_id}/artifacts").status_code == 404
    assert other.get(artifact["download_url"]).status_code == 404
    assert client.get(f"/v1/runs/{pushed.run_id}/artifacts/999999/zip").status_code == 404
