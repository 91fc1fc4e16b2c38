"""The console's sign-in: an API key kept in an HttpOnly cookie, CSRF tokens and the Origin check.

The key is the session. It lives only in an ``HttpOnly; SameSite=Strict`` cookie (``Secure``
when the console is served over https), so page scripts never see it, and every request
resolves it through the API's own ``get_principal`` (same throttle, same cache, same revocation
rule as a Bearer header). No session table: revoking the key ends every console session at
once, and nothing new is stored.

Every state-changing form carries a synchronizer token derived from the key
(HMAC-SHA256 keyed with it), which another site cannot compute, and a POST whose ``Origin``
(or, without one, ``Referer``) is another origin is refused before the token is looked at.
Sign-in itself has no key yet: it uses a double-submit token (a random cookie echoed by the
form) plus the same Origin check, so another site cannot sign a victim into its own key.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials

from api.deps import get_principal
from api.errors import ApiError
from leasehold.records.api_keys import Principal

SESSION_COOKIE = "lh_console"
SIGN_IN_COOKIE = "lh_console_signin"
CSRF_FIELD = "csrf"
# API keys are short; a longer cookie is not one.
MAX_KEY_CHARS = 256
SESSION_MAX_AGE_SECONDS = 12 * 3600
SIGN_IN_MAX_AGE_SECONDS = 3600
_CSRF_CONTEXT = b"leasehold-console-csrf-v1"


class SignInRequired(Exception):
    """No valid session cookie: pages redirect to the sign-in form, other routes answer 401."""


def is_secure(request: Request) -> bool:
    """Whether cookies get ``Secure``: the request came over https, or the public URL is https."""
    public = request.app.state.settings.public_base_url or ""
    return request.url.scheme == "https" or public.startswith("https://")


def _cookie_flags(request: Request) -> dict[str, Any]:
    """How every console cookie is set and cleared: the console's path only, out of scripts'
    reach, never sent cross-site."""
    return {"path": "/console", "httponly": True, "samesite": "strict", "secure": is_secure(request)}


def set_session(response: Response, request: Request, key: str) -> None:
    response.set_cookie(SESSION_COOKIE, key, max_age=SESSION_MAX_AGE_SECONDS, **_cookie_flags(request))


def clear_session(response: Response, request: Request) -> None:
    response.delete_cookie(SESSION_COOKIE, **_cookie_flags(request))


def new_sign_in_token() -> str:
    """A random double-submit token for one sign-in form."""
    return secrets.token_urlsafe(24)


def set_sign_in_cookie(response: Response, request: Request, token: str) -> None:
    """The sign-in form's token, also as a short-lived cookie the form must match."""
    response.set_cookie(SIGN_IN_COOKIE, token, max_age=SIGN_IN_MAX_AGE_SECONDS, **_cookie_flags(request))


def csrf_token(key: str) -> str:
    """The session's synchronizer token: only someone holding the key can compute it."""
    return hmac.new(key.encode(), _CSRF_CONTEXT, hashlib.sha256).hexdigest()


def session_key(request: Request) -> str | None:
    key = request.cookies.get(SESSION_COOKIE, "").strip()
    return key if 0 < len(key) <= MAX_KEY_CHARS else None


async def principal_for_key(request: Request, key: str) -> Principal:
    """The API's own key check (throttle, cache, revocation); ``ApiError`` 401/429 otherwise."""
    return await get_principal(request, HTTPAuthorizationCredentials(scheme="Bearer", credentials=key))


async def console_principal(request: Request) -> Principal:
    """The signed-in caller; ``SignInRequired`` without a valid session cookie."""
    key = session_key(request)
    if key is None:
        raise SignInRequired
    try:
        return await principal_for_key(request, key)
    except ApiError as exc:
        if exc.status == 401:
            raise SignInRequired from None
        raise


ConsolePrincipal = Annotated[Principal, Depends(console_principal)]


def check_origin(request: Request) -> None:
    """403 when a state-changing request names another origin (``Origin``, else ``Referer``)."""
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if claimed is None:
        return  # a non-browser client or a privacy setting; the token still has to match
    parts = urlsplit(claimed)
    own = urlsplit(str(request.base_url))
    if (parts.scheme, parts.netloc) != (own.scheme, own.netloc):
        raise ApiError(403, "csrf_failed", "the request came from another origin", param="Origin")


def check_csrf(request: Request, submitted: str | None) -> None:
    """403 unless the form's token is the session's (and the origin is ours)."""
    check_origin(request)
    key = session_key(request)
    if key is None or not submitted or not hmac.compare_digest(submitted, csrf_token(key)):
        raise ApiError(403, "csrf_failed", "missing or wrong CSRF token; reload the page and try again", CSRF_FIELD)


def check_sign_in_token(request: Request, submitted: str | None) -> None:
    check_origin(request)
    cookie = request.cookies.get(SIGN_IN_COOKIE)
    if not cookie or not submitted or not hmac.compare_digest(cookie, submitted):
        raise ApiError(403, "csrf_failed", "the sign-in form expired; reload the page and try again", CSRF_FIELD)


def safe_next(target: str | None) -> str:
    """Where to go after sign-in: a console path on this site only (no open redirect)."""
    default = "/console/videos"
    if not target or not target.startswith("/console/") or target.startswith("//"):
        return default
    if any(c in target for c in ("\\", "\r", "\n", "\t")) or "/../" in target or "@" in target.split("?")[0]:
        return default
    return target
