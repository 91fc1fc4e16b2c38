"""Settings: LEASEHOLD_* variables, CSV lists, a TOML config file, and the round trip to child processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from leasehold.settings import Settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("LEASEHOLD_"):
            monkeypatch.delenv(name)


def test_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = Settings()
    assert s.store_backend == "local"
    assert s.data_dir == (tmp_path / ".leasehold").resolve()
    assert s.resolved_database_url == f"sqlite:///{(tmp_path / '.leasehold' / 'leasehold.db').resolve()}"
    assert s.resolved_store_dir == (tmp_path / ".leasehold" / "objects").resolve()
    assert s.models == ["procedural-v1"]
    assert s.ci_labels == ["linux"]


def test_env_vars(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LEASEHOLD_TEMPORAL_ADDRESS", "temporal:7233")
    monkeypatch.setenv("LEASEHOLD_TEMPORAL_NAMESPACE", "prod")
    monkeypatch.setenv("LEASEHOLD_TEMPORAL_API_KEY", "secret-key")
    monkeypatch.setenv("LEASEHOLD_TEMPORAL_TLS", "true")
    monkeypatch.setenv("LEASEHOLD_STORE_BACKEND", "s3")
    monkeypatch.setenv("LEASEHOLD_S3_ENDPOINT_URL", "http://minio:9000")
    monkeypatch.setenv("LEASEHOLD_S3_SECRET_ACCESS_KEY", "minio-secret")
    monkeypatch.setenv("LEASEHOLD_API_PORT", "9001")
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path / "d"))
    s = Settings()
    assert s.temporal_address == "temporal:7233"
    assert s.temporal_namespace == "prod"
    assert s.temporal_tls is True
    assert isinstance(s.temporal_api_key, SecretStr)
    assert s.temporal_api_key.get_secret_value() == "secret-key"
    assert "secret-key" not in repr(s)
    assert s.store_backend == "s3"
    assert s.s3_endpoint_url == "http://minio:9000"
    assert s.api_port == 9001
    assert s.data_dir == (tmp_path / "d").resolve()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("procedural-v1", ["procedural-v1"]),
        ("a, b ,c", ["a", "b", "c"]),
        ('["a", "b"]', ["a", "b"]),
        ("a,,b,", ["a", "b"]),
    ],
)
def test_csv_and_json_lists(monkeypatch: pytest.MonkeyPatch, raw: str, expected: list[str]) -> None:
    monkeypatch.setenv("LEASEHOLD_MODELS", raw)
    monkeypatch.setenv("LEASEHOLD_CI_LABELS", raw)
    s = Settings()
    assert s.models == expected
    assert s.ci_labels == expected


def test_invalid_value_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASEHOLD_STORE_BACKEND", "ftp")
    with pytest.raises(ValidationError):
        Settings()


def test_toml_config_file_and_env_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "leasehold.toml"
    config.write_text(
        'temporal_address = "file-host:7233"\n'
        'temporal_namespace = "from-file"\n'
        'models = ["m1", "m2"]\n'
        "api_port = 8100\n"
        f'data_dir = "{tmp_path / "from-file"}"\n'
    )
    monkeypatch.setenv("LEASEHOLD_CONFIG_FILE", str(config))
    monkeypatch.setenv("LEASEHOLD_TEMPORAL_NAMESPACE", "from-env")
    s = Settings()
    assert s.temporal_address == "file-host:7233"
    assert s.models == ["m1", "m2"]
    assert s.api_port == 8100
    assert s.data_dir == (tmp_path / "from-file").resolve()
    # The environment beats the file; explicit arguments beat both.
    assert s.temporal_namespace == "from-env"
    assert Settings(temporal_namespace="from-arg").temporal_namespace == "from-arg"


def test_to_env_round_trip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    original = Settings(
        data_dir=tmp_path / "data",
        temporal_address="127.0.0.1:7999",
        temporal_api_key=SecretStr("tk"),
        queue_prefix="t1.",
        store_backend="s3",
        s3_secret_access_key=SecretStr("s3-secret"),
        models=["a", "b"],
        ci_labels=["linux", "gpu"],
        metrics_port=0,
        checkpoint_interval_seconds=1.5,
    )
    env = original.to_env()
    assert env["LEASEHOLD_MODELS"] == "a,b"
    assert env["LEASEHOLD_TEMPORAL_API_KEY"] == "tk"
    assert all(name.startswith("LEASEHOLD_") for name in env)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    rebuilt = Settings()
    assert rebuilt.model_dump() == original.model_dump()
    assert rebuilt.temporal_api_key is not None
    assert rebuilt.temporal_api_key.get_secret_value() == "tk"


def test_signing_key_is_created_once_and_private(tmp_path: Path) -> None:
    s = Settings(data_dir=tmp_path / "data")
    key = s.signing_key()
    assert len(key) >= 32
    assert Settings(data_dir=tmp_path / "data").signing_key() == key
    assert (tmp_path / "data" / "url-signing-key").stat().st_mode & 0o777 == 0o600


_RACE = """
import sys
import time
from pathlib import Path
from leasehold.records.ci.secrets import Keyring
from leasehold.settings import Settings
start = float(sys.argv[2])
while time.time() < start:
    pass
s = Settings(data_dir=Path(sys.argv[1]))
print(s.signing_key().decode(), Keyring.from_settings(s).active, flush=True)
"""


def test_processes_starting_together_share_one_signing_key(tmp_path: Path) -> None:
    """`make up` starts the API and the workers at once on a fresh data dir: every process
    must read the one key that won, none may crash on the other's file or read it half-written."""
    for round_ in range(3):
        data = tmp_path / f"data{round_}"
        start = time.time() + 2.0
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _RACE, str(data), str(start)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(6)
        ]
        outputs = [p.communicate(timeout=60) for p in procs]
        assert [p.returncode for p in procs] == [0] * 6, [err for _, err in outputs]
        keys = {out.split()[0] for out, _ in outputs}
        assert keys == {(data / "url-signing-key").read_text().strip()}
        assert len(next(iter(keys))) == 64
        assert (data / "url-signing-key").stat().st_mode & 0o777 == 0o600
        assert (data / "secrets-keys").stat().st_mode & 0o777 == 0o600
        assert sorted(p.name for p in data.iterdir()) == ["secrets-keys", "url-signing-key"]


def test_the_suite_runs_each_package_whole_on_one_worker(request: pytest.FixtureRequest) -> None:
    """`make test` runs packages in parallel, each whole on one xdist worker (its stacks start
    once, its tests keep their order): xdist names a grouped test ``<id>@<group>``. Without
    xdist (``TEST_WORKERS=0``) there are no groups to check."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        pytest.skip("not running under pytest-xdist")
    assert request.node.nodeid.endswith("::test_the_suite_runs_each_package_whole_on_one_worker@foundation")


def test_ci_job_slots_fit_the_memory_the_worker_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 slots of 4 GiB on a 24 GiB host would let jobs hold 32 GiB: slots are cut to what
    fits in ``ci_memory_share`` of the memory, and the CPUs still bound them."""
    from leasehold import settings as settings_module

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    monkeypatch.setattr(settings_module, "usable_memory_bytes", lambda: 24 << 30)
    assert Settings(ci_job_memory_bytes=4 << 30).ci_job_slots == 5
    assert Settings(ci_job_memory_bytes=4 << 30, ci_memory_share=1.0).ci_job_slots == 6
    assert Settings(ci_job_memory_bytes=256 << 20).ci_job_slots == 8
    assert Settings(ci_job_memory_bytes=64 << 30).ci_job_slots == 1
    assert Settings(ci_job_memory_bytes=64 << 30, ci_max_concurrent_jobs=3).ci_job_slots == 3
    monkeypatch.setattr(settings_module, "usable_memory_bytes", lambda: None)
    assert Settings(ci_job_memory_bytes=64 << 30).ci_job_slots == 8


def test_usable_memory_is_the_hosts_or_less() -> None:
    from leasehold.settings import usable_memory_bytes

    with open("/proc/meminfo") as f:
        total = int(next(line for line in f if line.startswith("MemTotal:")).split()[1]) * 1024
    found = usable_memory_bytes()
    assert found is not None and 0 < found <= total
