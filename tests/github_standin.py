"""A loopback stand-in for GitHub's REST API whose every request is checked against GitHub's
published description of it (the npm package ``@octokit/openapi``, fetched by ``npm pack``
from the registry into a cache once).

Each request is matched to an operation of the description (method + path template); its
path parameters, query parameters and JSON body are validated with the operation's schemas
(OpenAPI 3.0's ``nullable`` read as JSON Schema ``null``); a request the description does
not have, or one that does not validate, is recorded in ``violations`` and answered 422 as
GitHub would. Answers are the operation's response schemas filled in (a minimal instance of
the schema with the stand-in's values on top) and are validated too, so a client reading
them reads what GitHub sends.

What it serves: commit statuses (create, list for a ref), check runs (create, update, list for
a ref) and GitHub App installation tokens (the app's RS256 JWT verified with its public key).
Its error answers are GitHub's: 401 ``Bad credentials``, 404 ``Not Found`` for a repository
the token cannot see, 422 ``Validation Failed``, and rate limits (``rate_limit(n)``: the next
``n`` requests get 403 with ``Retry-After`` and ``x-ratelimit-remaining: 0``).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import jsonschema
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.npm_cache import CACHE, packed_file

OPENAPI_PACKAGE = "@octokit/openapi@23.0.2"
DESCRIPTION = "api.github.com.json"
DOCS = "https://docs.github.com/rest"


def description_path() -> Path:
    """The description file, fetched with ``npm pack`` on first use (then cached)."""
    return packed_file(OPENAPI_PACKAGE, f"generated/{DESCRIPTION}", CACHE / "octokit-openapi-23.0.2" / DESCRIPTION)


class Description:
    """The operations of the description, with ``$ref`` resolved on use."""

    def __init__(self, path: Path) -> None:
        self.doc = json.loads(path.read_text())
        self._routes: list[tuple[re.Pattern[str], str, dict[str, Any]]] = []
        for template, item in self.doc["paths"].items():
            parts = re.split(r"\{([^}]+)\}", template)
            # Literal text and parameter names alternate; a parameter is one path segment.
            pattern = "".join(
                re.escape(p) if i % 2 == 0 else f"(?P<{p.replace('-', '_')}>[^/]+)" for i, p in enumerate(parts)
            )
            self._routes.append((re.compile(f"^{pattern}$"), template, item))

    def resolve(self, node: Any, seen: frozenset[str] = frozenset()) -> Any:
        """``node`` with every ``$ref`` replaced (a cycle becomes ``{}``), ``nullable`` as JSON Schema."""
        if isinstance(node, list):
            return [self.resolve(v, seen) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref in seen:
                return {}
            target: Any = self.doc
            for part in ref.removeprefix("#/").split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            return self.resolve(target, seen | {ref})
        out = {k: self.resolve(v, seen) for k, v in node.items() if not k.startswith("x-") and k != "example"}
        if out.pop("nullable", False):
            if "type" in out:
                out["type"] = [out["type"], "null"]
            if "enum" in out:
                out["enum"] = [*out["enum"], None]
        return out

    def operation(self, method: str, path: str) -> tuple[str, dict[str, Any], dict[str, str]] | None:
        for pattern, template, item in self._routes:
            found = pattern.match(path)
            if found and method.lower() in item:
                params = {k: unquote(v) for k, v in found.groupdict().items()}
                return template, item[method.lower()], params
        return None


def instance(schema: dict[str, Any]) -> Any:
    """A minimal value valid under ``schema`` (required properties only)."""
    for key in ("allOf",):
        if key in schema:
            merged: dict[str, Any] = {}
            for part in schema[key]:
                value = instance(part)
                if isinstance(value, dict):
                    merged.update(value)
            return merged
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return instance(schema[key][0])
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: instance(props.get(name, {})) for name in schema.get("required", [])}
    if kind == "array":
        return []
    if kind == "string":
        fmt = str(schema.get("format", ""))
        return {"date-time": "2026-12-04T00:00:00Z", "uri": "https://github.invalid/x"}.get(fmt, "x")
    if kind in ("integer", "number"):
        return 1
    if kind == "boolean":
        return False
    return None


def _error(message: str, status: int, **extra: Any) -> dict[str, Any]:
    return {"message": message, "documentation_url": DOCS, "status": str(status), **extra}


@dataclass
class App:
    app_id: str
    installation_id: str
    private_key_pem: str
    public_key: rsa.RSAPublicKey


def new_app(app_id: str = "4242", installation_id: str = "77") -> App:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    return App(app_id, installation_id, pem, key.public_key())


@dataclass
class GitHubStandIn:
    """State and checks of the stand-in; ``serve()`` runs it on 127.0.0.1."""

    description: Description
    tokens: dict[str, set[str]] = field(default_factory=dict)  # token -> repositories it sees
    apps: dict[str, App] = field(default_factory=dict)  # installation id -> app
    app_repos: dict[str, set[str]] = field(default_factory=dict)  # installation id -> repositories
    statuses: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    check_runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    _limited: int = 0
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def rate_limit(self, requests: int) -> None:
        with self._lock:
            self._limited = requests

    def posted(self, repo: str, sha: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.statuses.get((repo.lower(), sha), []))

    # Request handling ------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], Any]:
        split = urlsplit(target)
        query = dict(parse_qsl(split.query))
        with self._lock:
            self.requests.append({"method": method, "path": split.path, "query": query, "headers": headers})
            if self._limited > 0:
                self._limited -= 1
                reset = str(int(time.time()) + 1)
                limit_headers = {"retry-after": "1", "x-ratelimit-remaining": "0", "x-ratelimit-reset": reset}
                return 403, limit_headers, _error("You have exceeded a secondary rate limit.", 403)
        found = self.description.operation(method, split.path)
        if found is None:
            self.violations.append(f"{method} {split.path}: no such operation in the description")
            return 404, {}, _error("Not Found", 404)
        template, op, params = found
        problems = self._validate_request(template, op, params, query, headers, raw)
        if problems:
            self.violations.extend(problems)
            return (
                422,
                {},
                _error(
                    "Validation Failed",
                    422,
                    errors=[{"resource": template, "code": "invalid", "message": p} for p in problems],
                ),
            )
        body = json.loads(raw) if raw else None
        status, answer = self._serve(op["operationId"], params, query, headers, body)
        self._validate_response(op, status, answer)
        return status, {}, answer

    def _validate_request(
        self,
        template: str,
        op: dict[str, Any],
        params: dict[str, str],
        query: dict[str, str],
        headers: dict[str, str],
        raw: bytes,
    ) -> list[str]:
        problems: list[str] = []
        where = f"{op['operationId']} ({template})"
        for param in self.description.resolve(op.get("parameters", [])):
            name, place = param["name"], param["in"]
            value = (
                params.get(name.replace("-", "_")) if place == "path" else query.get(name) if place == "query" else None
            )
            if value is None:
                if param.get("required") and place in ("path", "query"):
                    problems.append(f"{where}: missing {place} parameter {name}")
                continue
            schema = param.get("schema", {})
            typed: Any = int(value) if schema.get("type") == "integer" and value.isdigit() else value
            try:
                jsonschema.validate(typed, schema)
            except jsonschema.ValidationError as exc:
                problems.append(f"{where}: {place} parameter {name}: {exc.message}")
        if headers.get("accept") not in ("application/vnd.github+json", "application/json"):
            problems.append(f"{where}: Accept should be application/vnd.github+json, got {headers.get('accept')!r}")
        body_spec = self.description.resolve(op.get("requestBody"))
        if body_spec is None:
            return problems
        if not raw:
            if body_spec.get("required"):
                problems.append(f"{where}: the request body is required")
            return problems
        if "json" not in headers.get("content-type", ""):
            problems.append(f"{where}: the body must be JSON, content-type {headers.get('content-type')!r}")
            return problems
        try:
            body = json.loads(raw)
            jsonschema.validate(body, body_spec["content"]["application/json"]["schema"])
        except (ValueError, jsonschema.ValidationError) as exc:
            message = exc.message if isinstance(exc, jsonschema.ValidationError) else str(exc)
            problems.append(f"{where}: body: {message}")
        return problems

    def _validate_response(self, op: dict[str, Any], status: int, answer: Any) -> None:
        spec = self.description.resolve(op["responses"].get(str(status)))
        if spec is None:
            if status < 400:
                self.violations.append(f"{op['operationId']}: the stand-in answered {status}, not in the description")
            return
        schema = spec.get("content", {}).get("application/json", {}).get("schema")
        if schema is None:
            return
        try:
            jsonschema.validate(answer, schema)
        except jsonschema.ValidationError as exc:
            self.violations.append(f"{op['operationId']}: the stand-in's own {status} answer: {exc.message}")

    def _schema(self, name: str) -> dict[str, Any]:
        return self.description.resolve({"$ref": f"#/components/schemas/{name}"})  # type: ignore[no-any-return]

    def _auth(self, headers: dict[str, str], repo: str | None) -> tuple[int, Any] | None:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() not in ("bearer", "token") or not token:
            return 401, _error("Requires authentication", 401)
        with self._lock:
            seen = self.tokens.get(token)
        if seen is None:
            return 401, _error("Bad credentials", 401)
        if repo is not None and repo.lower() not in seen:
            return 404, _error("Not Found", 404)
        return None

    def _serve(
        self, operation: str, params: dict[str, str], query: dict[str, str], headers: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        if operation == "apps/create-installation-access-token":
            return self._installation_token(params["installation_id"], headers)
        repo = f"{params.get('owner', '')}/{params.get('repo', '')}"
        refused = self._auth(headers, repo)
        if refused is not None:
            return refused
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self._lock:
            if operation == "repos/create-commit-status":
                status = instance(self._schema("status"))
                status.update(
                    id=next(self._ids),
                    state=body["state"],
                    target_url=body.get("target_url"),
                    description=body.get("description"),
                    context=body.get("context", "default"),
                    created_at=now,
                    updated_at=now,
                    creator=None,
                )
                # Newest first, as GitHub lists them.
                self.statuses.setdefault((repo.lower(), params["sha"]), []).insert(0, status)
                return 201, status
            if operation == "repos/list-commit-statuses-for-ref":
                return 200, list(self.statuses.get((repo.lower(), params["ref"]), []))
            if operation == "checks/create":
                run = instance(self._schema("check-run"))
                run.update(
                    id=next(self._ids),
                    name=body["name"],
                    head_sha=body["head_sha"],
                    details_url=body.get("details_url"),
                    external_id=body.get("external_id"),
                    status=body.get("status", "queued"),
                    conclusion=body.get("conclusion"),
                    started_at=body.get("started_at"),
                    completed_at=body.get("completed_at"),
                )
                run["annotations"] = list((body.get("output") or {}).get("annotations", []))
                self._set_output(run, body.get("output"))
                run["_repo"] = repo.lower()
                self.check_runs[run["id"]] = run
                return 201, self._public(run)
            if operation == "checks/update":
                run = self.check_runs.get(int(params["check_run_id"]))
                if run is None or run["_repo"] != repo.lower():
                    return 404, _error("Not Found", 404)
                for key in ("name", "details_url", "external_id", "status", "conclusion", "started_at", "completed_at"):
                    if key in body:
                        run[key] = body[key]
                if body.get("output"):
                    run["annotations"].extend(body["output"].get("annotations", []))
                    self._set_output(run, body["output"])
                return 200, self._public(run)
            if operation == "checks/list-for-ref":
                runs = [
                    self._public(r)
                    for r in self.check_runs.values()
                    if r["_repo"] == repo.lower()
                    and r["head_sha"] == params["ref"]
                    and r["name"] == query.get("check_name", r["name"])
                ]
                return 200, {"total_count": len(runs), "check_runs": runs}
        return 404, _error("Not Found", 404)

    @staticmethod
    def _set_output(run: dict[str, Any], output: dict[str, Any] | None) -> None:
        output = output or {}
        run["output"] = {
            "title": output.get("title"),
            "summary": output.get("summary"),
            "text": output.get("text"),
            "annotations_count": len(run["annotations"]),
            "annotations_url": f"https://github.invalid/check-runs/{run['id']}/annotations",
        }

    @staticmethod
    def _public(run: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in run.items() if k not in ("annotations", "_repo")}

    def _installation_token(self, installation: str, headers: dict[str, str]) -> tuple[int, Any]:
        app = self.apps.get(installation)
        if app is None:
            return 404, _error("Not Found", 404)
        scheme, _, jwt = headers.get("authorization", "").partition(" ")
        problem = _check_jwt(jwt, app) if scheme.lower() == "bearer" else "not a Bearer JWT"
        if problem:
            return 401, _error(f"A JSON web token could not be decoded ({problem})", 401)
        token = f"ghs_{base64.b32encode(os.urandom(15)).decode()}"
        with self._lock:
            self.tokens[token] = set(self.app_repos.get(installation, set()))
        answer = instance(self._schema("installation-token"))
        answer.update(token=token, expires_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600)))
        return 201, answer

    # Serving ---------------------------------------------------------------------------------

    def serve(self) -> ThreadingHTTPServer:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, extra, answer = standin.handle(self.command, self.path, headers, raw)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json; charset=utf-8")
                self.send_header("content-length", str(len(data)))
                for key, value in extra.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

            def log_message(self, format: str, *args: Any) -> None:
                return

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        return server


def _check_jwt(jwt: str, app: App) -> str | None:
    """Why GitHub would refuse ``jwt`` for ``app``, or None."""
    try:
        header, payload, signature = jwt.split(".")

        def unb64(text: str) -> bytes:
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

        app.public_key.verify(unb64(signature), f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
        claims = json.loads(unb64(payload))
        if json.loads(unb64(header)).get("alg") != "RS256":
            return "alg must be RS256"
    except Exception as exc:  # any malformed token is GitHub's 401
        return f"{type(exc).__name__}"
    now = time.time()
    if str(claims.get("iss")) != app.app_id:
        return "iss is not the app's id"
    if not (claims.get("iat", now + 1) <= now + 60 and now < claims.get("exp", 0) <= now + 600 + 60):
        return "iat/exp out of range (exp at most 10 minutes ahead)"
    return None
