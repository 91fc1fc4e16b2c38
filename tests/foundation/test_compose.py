"""docker-compose.yml, the Dockerfile and deploy/ scripts, checked without a Docker engine.

The compose file is parsed and its services, images, commands, environment, dependency graph
and GPU reservation are checked against the code (Settings fields, CLI parser, search
attributes). The deploy scripts run for real where they can: namespace and search-attribute
setup against a dev server, the Postgres init script against the local Postgres.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.main import build_parser, cmd_api, cmd_worker
from leasehold.devserver import DYNAMIC_CONFIG, TRANSFER_POLL_RPS, find_temporal_binary, free_port
from leasehold.records.ci.secrets import Keyring, KeyringError
from leasehold.settings import Settings
from testing.harness import REPO_ROOT
from tests.conftest import in_ci
from workflows import search_attributes

COMPOSE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
APP_SERVICES = {
    "api": ["api", "--host", "0.0.0.0"],
    "orchestration": ["worker", "orchestration"],
    "worker-gpu": ["worker", "gpu", "--model", "procedural-v1"],
    "worker-ci": ["worker", "ci", "--labels", "linux"],
}
INFRA = {
    "postgres": "postgres",
    "temporal-schema": "temporalio/admin-tools",
    "temporal": "temporalio/server",
    "temporal-init": "temporalio/admin-tools",
    "temporal-ui": "temporalio/ui",
    "minio": "minio/minio",
    "minio-init": "minio/mc",
}
ONE_SHOTS = {"temporal-schema", "temporal-init", "minio-init", "secrets-init"}
# One-shots from the app image: a leasehold command of their own.
APP_ONE_SHOTS = {"secrets-init": ["secrets", "init-keys", "/run/leasehold-keys/keys"]}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def interpolate(value: str) -> str:
    """Compose's ${VAR:-default} with no variables set, and $$ for a literal $."""
    return _VAR.sub(lambda m: m.group(2) or "", value).replace("$$", "$")


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: interpolate(str(v)) for k, v in env.items()}


def image_name(service: dict[str, Any]) -> str:
    return interpolate(service["image"]).rsplit(":", 1)[0]


def test_services_and_images(services: dict[str, Any]) -> None:
    assert set(services) == set(INFRA) | set(APP_SERVICES) | set(APP_ONE_SHOTS)
    for name, command in APP_ONE_SHOTS.items():
        assert services[name]["image"] == "leasehold:latest" and services[name]["command"] == command
    for name, image in INFRA.items():
        assert image_name(services[name]) == image, name
    # Two images from the one Dockerfile, each built once: the GPU worker's with the gpu extra
    # (torch, PyAV, numpy), the other app services' without it.
    images = {name: services[name]["image"] for name in APP_SERVICES}
    assert images == {
        "api": "leasehold:latest",
        "orchestration": "leasehold:latest",
        "worker-ci": "leasehold:latest",
        "worker-gpu": "leasehold-gpu:latest",
    }
    builders = [name for name in APP_SERVICES if "build" in services[name]]
    assert builders == ["api", "worker-gpu"]
    for name in builders:
        build = services[name]["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        assert (COMPOSE.parent / context / "Dockerfile").resolve() == DOCKERFILE
    extras = {name: services[name]["build"]["args"]["EXTRAS"].split(",") for name in builders}
    assert "gpu" not in extras["api"]
    assert "gpu" in extras["worker-gpu"]


def test_app_commands_are_valid_leasehold_invocations(services: dict[str, Any]) -> None:
    parser = build_parser()
    for name, expected in APP_SERVICES.items():
        command = services[name]["command"]
        assert isinstance(command, list), f"{name}: exec form keeps signals going to leasehold"
        assert command[: len(expected)] == expected, name
        args = parser.parse_args(command)
        assert args.func is (cmd_api if name == "api" else cmd_worker)


def test_leasehold_env_names_real_settings(services: dict[str, Any]) -> None:
    fields = set(Settings.model_fields)
    for name, service in services.items():
        for var in env_of(service):
            if var.startswith("LEASEHOLD_") and name in APP_SERVICES:
                assert var.removeprefix("LEASEHOLD_").lower() in fields, f"{name}: {var} is not a setting"


def test_app_env_points_at_the_stack(services: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LEASEHOLD_"):
            monkeypatch.delenv(name)
    keyrings: set[str] = set()
    for name in APP_SERVICES:
        env = env_of(services[name])
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        settings = Settings()
        assert settings.temporal_address == "temporal:7233"
        assert settings.store_backend == "s3"
        assert settings.s3_endpoint_url == "http://minio:9000"
        assert settings.s3_access_key_id and settings.s3_secret_access_key
        assert settings.database_url is not None
        assert settings.database_url.startswith("postgresql+psycopg2://")
        assert "@postgres:5432/" in settings.database_url
        # Workers expose /metrics to scrapers outside their container.
        assert settings.metrics_host == "0.0.0.0"
        # One keyring everywhere: what the API seals (webhook signing secrets) the
        # orchestration worker opens; a key per container would also die with the container.
        assert settings.secrets_keys is not None
        keyrings.add(settings.secrets_keys.get_secret_value())
        for var in env:
            monkeypatch.delenv(var)
    assert len(keyrings) == 1, keyrings
    # MinIO's credentials and bucket are the ones the app uses.
    minio_env, init_env = env_of(services["minio"]), env_of(services["minio-init"])
    app_env = env_of(services["api"])
    assert app_env["LEASEHOLD_S3_ACCESS_KEY_ID"] == minio_env["MINIO_ROOT_USER"] == init_env["MINIO_ROOT_USER"]
    assert app_env["LEASEHOLD_S3_SECRET_ACCESS_KEY"] == minio_env["MINIO_ROOT_PASSWORD"]
    assert app_env["LEASEHOLD_S3_BUCKET"] == init_env["BUCKET"]
    assert "mc mb --ignore-existing" in " ".join(services["minio-init"]["entrypoint"])


def _depends(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on", {})
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in deps.items()}


def test_dependency_graph(services: dict[str, Any]) -> None:
    graph = {name: _depends(service) for name, service in services.items()}
    for name, deps in graph.items():
        for dep, condition in deps.items():
            assert dep in services, f"{name} depends on unknown {dep}"
            if dep in ONE_SHOTS:
                assert condition == "service_completed_successfully", (name, dep)
            else:
                assert condition == "service_healthy", (name, dep)
                assert "healthcheck" in services[dep], f"{dep} has no healthcheck for {name} to wait on"

    def closure(name: str, seen: tuple[str, ...] = ()) -> set[str]:
        assert name not in seen, f"dependency cycle: {' -> '.join((*seen, name))}"
        out: set[str] = set()
        for dep in graph[name]:
            out |= {dep, *closure(dep, (*seen, name))}
        return out

    for name in services:
        closure(name)
    for name in APP_SERVICES:
        assert {"temporal", "temporal-init", "postgres", "minio", "minio-init"} <= closure(name), name
        assert "healthcheck" in services[name], name
    assert "temporal-schema" in closure("temporal")
    assert "postgres" in closure("temporal")
    for name in ONE_SHOTS:
        assert str(services[name]["restart"]).startswith("on-failure"), name


def test_gpu_reservation(services: dict[str, Any]) -> None:
    devices = services["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    for name in set(services) - {"worker-gpu"}:
        assert "deploy" not in services[name], f"only the GPU worker reserves devices ({name})"


def test_search_attributes_match_the_code(services: dict[str, Any]) -> None:
    spec = env_of(services["temporal-init"])["SEARCH_ATTRIBUTES"].split()
    registered = dict(item.split("=") for item in spec)
    expected = {key.name: key.indexed_value_type.name.title() for key in search_attributes.ALL}
    assert registered == expected


def _mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Bind mounts (container path -> host path) of a service."""
    out = {}
    for volume in service.get("volumes", []):
        host, container = str(volume).split(":")[:2]
        if host.startswith("."):
            out[container] = (COMPOSE.parent / host).resolve()
    return out


def test_fairness_is_enabled_in_dynamic_config(services: dict[str, Any]) -> None:
    temporal = services["temporal"]
    path = env_of(temporal)["DYNAMIC_CONFIG_FILE_PATH"]
    mounts = _mounts(temporal)
    host_dir = mounts["/etc/temporal/config/dynamicconfig"]
    # The server resolves the path relative to /etc/temporal.
    config = yaml.safe_load((host_dir / Path(path).name).read_text())
    assert path.startswith("config/dynamicconfig/")
    assert config["matching.enableFairness"] == [{"value": True}]
    # The transfer-task poll rate the embedded dev server gets too (leasehold/devserver.py).
    assert config["history.transferProcessorMaxPollRPS"] == [{"value": TRANSFER_POLL_RPS}]
    assert f"history.transferProcessorMaxPollRPS={TRANSFER_POLL_RPS}" in DYNAMIC_CONFIG


def test_bind_mounted_files_exist_and_scripts_parse(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for host in _mounts(service).values():
            assert host.exists(), f"{name} mounts missing {host}"
            if host.suffix == ".sh":
                result = subprocess.run(["sh", "-n", str(host)], capture_output=True, text=True)
                assert result.returncode == 0, f"{host}: {result.stderr}"
    # Each one-shot runs a script that is mounted into it.
    for name in ("temporal-schema", "temporal-init"):
        script = services[name]["entrypoint"][-1]
        assert script in _mounts(services[name]), name


def test_dockerfile() -> None:
    text = DOCKERFILE.read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert lines[0] == "FROM python:3.11-slim"
    apt = re.search(r"apt-get install ([^&]*)", text)
    assert apt is not None
    assert {"bubblewrap", "git"} <= set(apt.group(1).replace("\\", " ").split())
    assert re.search(r"^ARG EXTRAS=gpu$", text, re.MULTILINE)
    assert re.search(r'pip install "\.\$\{EXTRAS:\+\[\$EXTRAS\]\}"', text)
    entrypoints = [line for line in lines if line.startswith("ENTRYPOINT")]
    assert entrypoints == ['ENTRYPOINT ["leasehold"]']
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["leasehold"] == "cli.main:run"
    cmd = [line for line in lines if line.startswith("CMD")]
    assert len(cmd) == 1
    args = yaml.safe_load(cmd[0].removeprefix("CMD").strip())  # exec form is a JSON list
    assert build_parser().parse_args(args).func is cmd_api
    # The build context keeps what `pip install .` needs.
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    for needed in ("pyproject.toml", "README.md", "leasehold", "api", "cli", "workflows"):
        assert needed not in ignored


def test_docker_compose_config_validates() -> None:
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("the docker compose plugin is not installed")
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_init_namespace_script_against_a_dev_server(tmp_path: Path, services: dict[str, Any]) -> None:
    """deploy/temporal/init-namespace.sh creates the namespace and search attributes, twice safely."""
    temporal = find_temporal_binary()
    port = free_port()
    log = (tmp_path / "temporal.log").open("wb")
    server = subprocess.Popen(
        [temporal, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    init = services["temporal-init"]
    script = _mounts(init)[init["entrypoint"][-1]]
    env = {
        **env_of(init),
        "PATH": f"{Path(temporal).parent}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "TEMPORAL_ADDRESS": f"127.0.0.1:{port}",
        "NAMESPACE": "lh",
    }
    try:
        for _ in range(2):
            result = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, result.stdout + result.stderr
        listed = subprocess.run(
            [temporal, "operator", "search-attribute", "list", "--address", env["TEMPORAL_ADDRESS"], "-n", "lh"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert listed.returncode == 0, listed.stderr
        for key in search_attributes.ALL:
            assert re.search(rf"\b{key.name}\s+{key.indexed_value_type.name.title()}\b", listed.stdout), listed.stdout
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()


def test_postgres_init_script(postgres_url: str) -> None:
    """deploy/postgres/init-leasehold.sh creates a role and database leasehold can use."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from leasehold.database import init_database
    from leasehold.records.api_keys import create_key, lookup

    if shutil.which("psql") is None:
        if in_ci():
            pytest.fail("psql is required under CI=true")
        pytest.skip("psql is not installed")
    admin_url = make_url(postgres_url).set(query={})
    role = f"lh_init_{uuid.uuid4().hex[:8]}"
    script = REPO_ROOT / "deploy" / "postgres" / "init-leasehold.sh"
    env = {
        **os.environ,
        "PGHOST": admin_url.host or "127.0.0.1",
        "PGPORT": str(admin_url.port or 5432),
        "POSTGRES_USER": admin_url.username or "postgres",
        "LEASEHOLD_DB_USER": role,
        "LEASEHOLD_DB_PASSWORD": "pw",
    }
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        result = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        factory = init_database(f"postgresql+psycopg2://{role}:pw@{env['PGHOST']}:{env['PGPORT']}/{role}")
        key = create_key(factory, "acme", "alice", "free")
        assert lookup(factory, key) is not None
        factory.kw["bind"].dispose()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{role}" WITH (FORCE)'))
            conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))
        admin.dispose()


def test_no_key_ships_and_every_service_reads_the_generated_one(services: dict[str, Any], tmp_path: Path) -> None:
    """Issue 32: no deploy file carries a secrets key; an unchanged deployment seals with a key
    generated once for it, which every app service reads from the shared volume."""
    text = COMPOSE.read_text()
    # No "id:<44 base64 characters>" key anywhere in the file, default or not.
    assert not re.search(r"[A-Za-z0-9_.-]+:[A-Za-z0-9+/]{43}=", text)
    for name in APP_SERVICES:
        env = env_of(services[name])
        assert interpolate(env["LEASEHOLD_SECRETS_KEYS"]) == "", name
        assert env["LEASEHOLD_SECRETS_KEYS_FILE"] == "/run/leasehold-keys/keys", name
        assert "leasehold-keys:/run/leasehold-keys:ro" in services[name]["volumes"], name
        assert services[name]["depends_on"]["secrets-init"]["condition"] == "service_completed_successfully"
    assert services["secrets-init"]["volumes"] == ["leasehold-keys:/run/leasehold-keys"]
    # GPU-only hosts opt in to the GPU worker.
    assert services["worker-gpu"]["profiles"] == ["gpu"]
    # What the init step runs: a key once, kept on the next start; a service without it refuses.
    keys = tmp_path / "keys"
    parser = build_parser()
    for said in ("created", "kept"):
        args = parser.parse_args(["secrets", "init-keys", str(keys)])
        assert args.func(args) == 0, said
    assert oct(keys.stat().st_mode & 0o777) == "0o600"
    first = keys.read_text()
    assert Keyring.parse(first) and keys.read_text() == first
    settings = Settings(data_dir=tmp_path / "data", secrets_keys="", secrets_keys_file=keys)
    assert Keyring.from_settings(settings).active == "k1"
    missing = Settings(data_dir=tmp_path / "data", secrets_keys_file=tmp_path / "absent")
    with pytest.raises(KeyringError, match="LEASEHOLD_SECRETS_KEYS_FILE"):
        Keyring.from_settings(missing)
    assert not (tmp_path / "data" / "secrets-keys").exists()
