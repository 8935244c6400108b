"""The HTTP front as an OAuth 2.1 resource server (the MCP authorization spec): `/mcp` takes a bearer JWT that an
authorization server (META_AGENT_AUTH_ISSUER) issued for this server (META_AGENT_AUTH_AUDIENCE), with the scopes
META_AGENT_AUTH_SCOPES asks for.

A token is checked, cheapest first: its length (MAX_TOKEN_CHARS), its header (an `alg` the named key's type signs with:
never `none`, never an HMAC), its key (front/auth/jwks.py), its signature, then `iss`, `aud`, `exp` (required), `nbf`
(where present; LEEWAY either way), `sub` (required) and the scopes. Without a token the answer is 401 with
`WWW-Authenticate: Bearer resource_metadata="…"` (and `scope="…"`, the scopes required, where any are), which sends an
MCP client to the protected resource metadata (RFC 9728) served here and from there to the authorization server; with
a token that fails, 401 `invalid_token`; with too few scopes, 403 `insufficient_scope`.

A token that passes makes the request the subject's: `scope["meta_agent.subject"]` is `<issuer>#<sub>` (what
front/auth/subjects.py turns into the owner of the caller's state), and `scope["user"]` the SDK's AuthenticatedUser, so
that a 2025-11-25 session is bound to the subject that opened it and the SDK's `get_access_token()` answers in a tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt
import structlog
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url, cors_middleware
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.authentication import AuthCredentials
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from meta_agent.config.settings import Settings
from meta_agent.errors import ConfigError
from meta_agent.front.auth.jwks import KeySet, checked_url

log = structlog.get_logger(__name__)

SUBJECT_KEY = "meta_agent.subject"  # the ASGI scope's key for the caller's subject (front/auth/subjects.py reads it)
# Longer than any access token an identity provider issues (Entra ID's, with group claims, reach about 8 KB), and
# checked before anything is parsed; h11 already refuses a request head over 16 KB.
MAX_TOKEN_CHARS = 12_000
MAX_SUBJECT_CHARS = 1024  # `sub` is at most 255 ASCII characters in OpenID Connect; opaque to us beyond that
LEEWAY = 30  # seconds of clock difference allowed on `exp` and `nbf`
METADATA_PATH = "/.well-known/oauth-protected-resource"
# The algorithms each key type signs with; a key's own `alg` narrows them to one. No HMAC: its key is a shared secret.
RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
EC_ALGORITHMS = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}


@dataclass(frozen=True, kw_only=True)
class ResourceServer:
    """Who issues the tokens `/mcp` takes, for which resource, with which scopes."""

    issuer: str
    audience: str
    jwks_url: str | None = None
    scopes: tuple[str, ...] = ()

    @property
    def metadata_url(self) -> str:
        """Where this resource's protected resource metadata is (RFC 9728, section 3.1)."""
        return str(build_resource_metadata_url(AnyHttpUrl(self.audience)))


def resource_server(settings: Settings, *, resource_url: str | None) -> ResourceServer | None:
    """The resource server META_AGENT_AUTH_* describe (None where META_AGENT_AUTH_ISSUER is unset); `resource_url` is
    the audience where META_AGENT_AUTH_AUDIENCE is unset: `http://HOST:PORT/mcp` of the listen address (None for a
    wildcard address or port 0, where the audience must be set).

    Raises:
        ConfigError: a setting that cannot be used, in one line naming it.
    """
    if not settings.auth_issuer:
        for name in ("auth_audience", "auth_jwks_url", "auth_scopes", "ui_client_id"):
            if getattr(settings, name):
                raise ConfigError(f"META_AGENT_{name.upper()} is set without META_AGENT_AUTH_ISSUER")
        return None
    if settings.http_token:
        raise ConfigError("META_AGENT_HTTP_TOKEN and META_AGENT_AUTH_ISSUER are both set: choose one of the two")
    try:
        issuer = checked_url(settings.auth_issuer, "META_AGENT_AUTH_ISSUER:")
        jwks_url = checked_url(settings.auth_jwks_url, "META_AGENT_AUTH_JWKS_URL:") if settings.auth_jwks_url else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    audience = settings.auth_audience or resource_url
    if not audience:
        raise ConfigError(
            "META_AGENT_AUTH_AUDIENCE: set it to this server's URL as its callers reach it (a wildcard"
            " --host or --port 0 names no resource)"
        )
    try:
        AnyHttpUrl(audience)
    except ValueError:
        raise ConfigError(f"META_AGENT_AUTH_AUDIENCE: {audience!r} is not an http(s) URL") from None
    scopes = tuple(s for s in (settings.auth_scopes or "").replace(",", " ").split() if s)
    return ResourceServer(issuer=issuer, audience=audience, jwks_url=jwks_url, scopes=scopes)


class TokenRefused(Exception):
    """A bearer token this server does not take; the message says why (it goes to the caller)."""


class JwtVerifier:
    """Checks bearer JWTs against a ResourceServer's issuer, audience and keys. Also the MCP SDK's TokenVerifier, for
    an embedder's own MCPServer."""

    def __init__(self, resource: ResourceServer, keys: KeySet | None = None) -> None:
        self.resource = resource
        self._keys = keys or KeySet(resource.issuer, resource.jwks_url)
        # Keys parsed once: by (id of the JWK, alg), the JWK held so that its id stays its own.
        self._prepared: dict[tuple[int, str], tuple[Mapping[str, Any], jwt.PyJWK]] = {}
        # RFC 8707 resource indicators are compared as written; a trailing slash is the one difference let pass.
        self._audiences = [resource.audience.rstrip("/"), resource.audience.rstrip("/") + "/"]

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            return await self.check(token)
        except TokenRefused:
            return None

    async def check(self, token: str) -> AccessToken:
        """The token's access, with its scopes (not yet compared with the scopes required).

        Raises:
            TokenRefused: the token is not one this server takes.
        """
        if len(token) > MAX_TOKEN_CHARS:
            raise TokenRefused(f"the token is longer than {MAX_TOKEN_CHARS:,} characters")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenRefused("the token is not a JWT") from None
        kid, alg = header.get("kid"), header.get("alg")
        if not (kid is None or isinstance(kid, str)) or not isinstance(alg, str):
            raise TokenRefused("the token's header is malformed")
        jwk = await self._keys.key(kid)
        if jwk is None:
            raise TokenRefused("the token is signed with a key the issuer does not publish")
        if alg not in algorithms_for(jwk):
            raise TokenRefused(f"the token's algorithm {alg[:20]!r} is not one its key signs with")
        claims = self._decode(token, self._prepared_key(jwk, alg))
        return _access(token, claims)

    def _prepared_key(self, jwk: Mapping[str, Any], alg: str) -> jwt.PyJWK:
        """The JWK as PyJWT's key bound to `alg` (so the token cannot pick another), parsed once per key set."""
        if len(self._prepared) > 64:  # keys of sets fetched before: let them go
            self._prepared.clear()
        held = self._prepared.get((id(jwk), alg))
        if held is not None:
            return held[1]
        try:
            key = jwt.PyJWK(dict(jwk), algorithm=alg)
        except jwt.PyJWTError:
            raise TokenRefused("the issuer's key for this token is unusable") from None
        self._prepared[(id(jwk), alg)] = (jwk, key)
        return key

    def _decode(self, token: str, key: jwt.PyJWK) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[key.algorithm_name],
                audience=self._audiences,
                issuer=self.resource.issuer,
                leeway=LEEWAY,
                options={"require": ["exp", "iss", "aud", "sub"], "enforce_minimum_key_length": True},
            )
        except jwt.ExpiredSignatureError:
            raise TokenRefused("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise TokenRefused("the token is not valid yet") from None
        except jwt.InvalidAudienceError:
            raise TokenRefused(f"the token is not for this resource ({self.resource.audience})") from None
        except jwt.InvalidIssuerError:
            raise TokenRefused("the token is not of this server's issuer") from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRefused(f"the token has no {exc.claim!r} claim") from None
        except jwt.PyJWTError:
            raise TokenRefused("the token's signature or claims are invalid") from None
        sub = claims["sub"]
        if not isinstance(sub, str) or not sub or len(sub) > MAX_SUBJECT_CHARS:
            raise TokenRefused("the token's subject is empty or too long")
        return claims


def algorithms_for(jwk: Mapping[str, Any]) -> frozenset[str]:
    """The JWS algorithms a JWK may verify: its key type's asymmetric ones, narrowed to its `alg` where it names one."""
    kty = jwk.get("kty")
    if kty == "RSA":
        family = RSA_ALGORITHMS
    elif kty == "EC" and jwk.get("crv") in EC_ALGORITHMS:
        family = frozenset({EC_ALGORITHMS[jwk["crv"]]})
    elif kty == "OKP" and jwk.get("crv") == "Ed25519":
        family = frozenset({"EdDSA"})
    else:
        return frozenset()
    named = jwk.get("alg")
    return family & {named} if isinstance(named, str) else family


def _access(token: str, claims: dict[str, Any]) -> AccessToken:
    """The SDK's AccessToken of verified claims: scopes from `scope` (space-separated, RFC 9068) or `scp` (a list as
    Okta writes it, or space-separated as Entra ID does)."""
    raw = claims.get("scope", claims.get("scp", ""))
    if isinstance(raw, str):
        scopes = raw.split()
    else:
        scopes = [s for s in raw if isinstance(s, str)] if isinstance(raw, list) else []
    aud = claims["aud"]
    client = claims.get("client_id", claims.get("azp"))
    return AccessToken(
        token=token,
        client_id=client if isinstance(client, str) else claims["sub"],
        scopes=scopes,
        expires_at=int(claims["exp"]),
        resource=aud if isinstance(aud, str) else None,
        subject=claims["sub"],
        claims={"iss": claims["iss"]},
    )


class RequireJwt:
    """An ASGI middleware: an HTTP request passes with a bearer JWT `verifier` takes and the scopes required, the
    caller's subject set in its scope; anything else is answered 401 or 403 as RFC 6750 and RFC 9728 say."""

    def __init__(self, app: ASGIApp, verifier: JwtVerifier) -> None:
        self._app = AuthContextMiddleware(app)  # the SDK's get_access_token() then answers in a tool
        self._verifier = verifier
        self._resource = verifier.resource
        self._metadata = f'resource_metadata="{self._resource.metadata_url}"'

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # /mcp speaks no WebSocket: closed before it is accepted (policy violation)
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        given = [value for name, value in scope["headers"] if name == b"authorization"]
        if not given:
            await self._refuse(scope, receive, send, 401, None, "a bearer token is required")
            return
        scheme, _, token = given[0].partition(b" ")
        if len(given) > 1 or scheme.lower() != b"bearer" or len(token) > MAX_TOKEN_CHARS:
            await self._refuse(scope, receive, send, 401, "invalid_token", "expected one bearer token")
            return
        try:
            access = await self._verifier.check(token.strip().decode("ascii"))
        except (TokenRefused, UnicodeDecodeError) as exc:
            reason = str(exc) if isinstance(exc, TokenRefused) else "the token is not ASCII"
            log.info("token_refused", reason=reason)
            await self._refuse(scope, receive, send, 401, "invalid_token", reason)
            return
        missing = [s for s in self._resource.scopes if s not in access.scopes]
        if missing:
            await self._refuse(scope, receive, send, 403, "insufficient_scope", f"missing scope: {' '.join(missing)}")
            return
        scope["user"] = AuthenticatedUser(access)
        scope["auth"] = AuthCredentials(access.scopes)
        scope[SUBJECT_KEY] = f"{self._resource.issuer}#{access.subject}"
        await self._app(scope, receive, send)

    async def passes(self, authorization: bytes) -> bool:
        """Whether an Authorization header would pass to /mcp (what /health asks before it shows more)."""
        scheme, _, token = authorization.partition(b" ")
        if scheme.lower() != b"bearer" or len(token) > MAX_TOKEN_CHARS or not token.strip().isascii():
            return False
        try:
            access = await self._verifier.check(token.strip().decode("ascii"))
        except TokenRefused:
            return False
        return all(s in access.scopes for s in self._resource.scopes)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, error: str | None, description: str
    ) -> None:
        """401 or 403 with the WWW-Authenticate RFC 6750 (section 3) asks for: no error code where no token was
        given; the scopes required, where any are, on the first 401 too (the MCP authorization spec: a client asks
        for them when it gets its token), not only where a token fell short of them."""
        params = [f'error="{error}"', f'error_description="{_quotable(description)}"'] if error else []
        if self._resource.scopes:
            params.append(f'scope="{_quotable(" ".join(self._resource.scopes))}"')
        params.append(self._metadata)
        body = {"error": error or "unauthorized", "error_description": description}
        headers = {"WWW-Authenticate": "Bearer " + ", ".join(params)}
        await JSONResponse(body, status_code=status, headers=headers)(scope, receive, send)


def _quotable(text: str) -> str:
    """`text` as an RFC 6750 error_description may hold it: printable ASCII without `"` or `\\`."""
    return "".join(c if " " <= c <= "~" and c not in '"\\' else "?" for c in text)


def metadata_routes(resource: ResourceServer) -> list[Route]:
    """The protected resource metadata (RFC 9728) at /.well-known/oauth-protected-resource, and with the resource's
    path appended (`/mcp`), where the SDK's clients look first: public, for any origin."""
    # Validated from strings, so that the model keeps each URL as written (`https://a.example`, no slash added):
    # clients compare the issuer with what its own metadata says, exactly.
    metadata = ProtectedResourceMetadata.model_validate(
        {
            "resource": resource.audience,
            "authorization_servers": [resource.issuer],
            "scopes_supported": list(resource.scopes) or None,
            "resource_name": "meta-agent",
        }
    )
    endpoint = cors_middleware(ProtectedResourceMetadataHandler(metadata).handle, ["GET", "OPTIONS"])
    suffixed = AnyHttpUrl(resource.metadata_url).path or METADATA_PATH
    paths = dict.fromkeys([METADATA_PATH, f"{METADATA_PATH}/mcp", suffixed])
    return [Route(path, endpoint=endpoint, methods=["GET", "OPTIONS"]) for path in paths]
