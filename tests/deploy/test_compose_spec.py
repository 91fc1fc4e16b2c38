"""docker-compose.yml against the Compose Specification: by ``docker compose config`` where a
Compose v2 is installed, and always against the specification's JSON schema (the copy Compose
itself validates with, tests/deploy/schemas/), so machines without Docker check it too."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from testing.harness import REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
SCHEMA = Path(__file__).resolve().parent / "schemas" / "compose-spec.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@pytest.fixture
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _errors(validator: jsonschema.Draft7Validator, document: dict[str, Any]) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def test_compose_file_follows_the_compose_specification(
    validator: jsonschema.Draft7Validator, compose: dict[str, Any]
) -> None:
    assert _errors(validator, compose) == []


def test_the_schema_catches_mistakes(validator: jsonschema.Draft7Validator, compose: dict[str, Any]) -> None:
    typo = copy.deepcopy(compose)
    typo["services"]["api"]["enviroment"] = typo["services"]["api"].pop("environment")
    assert any("enviroment" in error for error in _errors(validator, typo))
    wrong_type = copy.deepcopy(compose)
    wrong_type["services"]["worker-gpu"]["stop_grace_period"] = {"seconds": 60}
    assert _errors(validator, wrong_type)
    unknown_top = copy.deepcopy(compose)
    unknown_top["service"] = unknown_top.pop("services")
    assert _errors(validator, unknown_top)
    bad_condition = copy.deepcopy(compose)
    bad_condition["services"]["api"]["depends_on"]["postgres"]["condition"] = "service_ready"
    assert _errors(validator, bad_condition)


def _compose_cli() -> list[str] | None:
    """``docker compose`` (the plugin), else a standalone Compose v2 ``docker-compose``."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    if standalone:
        version = subprocess.run([standalone, "version", "--short"], capture_output=True, text=True)
        if version.returncode == 0 and version.stdout.strip().lstrip("v").startswith("2"):
            return [standalone]
    return None


def test_docker_compose_config_where_installed(tmp_path: Path, compose: dict[str, Any]) -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no Compose v2 installed (the schema test above still runs)")
    result = subprocess.run([*cli, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    # The same check refuses a broken copy (its relative paths resolved from the repository).
    broken = copy.deepcopy(compose)
    broken["services"]["api"]["enviroment"] = broken["services"]["api"].pop("environment")
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken))
    command = [*cli, "--project-directory", str(REPO_ROOT), "-f", str(path), "config", "-q"]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "enviroment" in refused.stderr
