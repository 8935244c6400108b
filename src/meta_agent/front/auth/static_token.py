"""The static bearer token (META_AGENT_HTTP_TOKEN): whether a request gives it, and the key the web console signs its
session cookies with, which is derived from it (front/http/console_auth.py).
"""

from __future__ import annotations

import hashlib
import hmac

# What the console's session key is derived for: another use of the token would derive another key from it.
SESSION_KEY_PURPOSE = b"meta-agent console session v1"


def bearer_matches(authorization: bytes, token: str) -> bool:
    """Whether an Authorization header is `Bearer <token>`: the scheme in any case (RFC 6750), the token compared
    in constant time."""
    scheme, _, given = authorization.partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), token.encode())


def session_key(token: str) -> bytes:
    """The key of the console's session cookies under `token`: the same for every replica and restart with that
    token, another for another token, and none without it (HMAC-SHA256 keyed by the token)."""
    return hmac.new(token.encode("utf-8", "surrogatepass"), SESSION_KEY_PURPOSE, hashlib.sha256).digest()
