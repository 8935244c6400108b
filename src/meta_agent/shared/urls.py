"""URLs as a log line or an error message may show them: scheme, host, port and path, none of what may carry a secret.

A query is where a client puts a token it should have sent in a header (`?access_token=`), where an OAuth callback
carries its authorization code, and where a URL in servers.json or a setting may hold a key (`?token=`, libpq's
`?password=`); user info (`user:password@`) is a password; a fragment can hold a token too. None of them is needed to
say which server or which route a line is about, so they are cut whole, whoever's they are (records/logs.py `hide`
hides values known beforehand; these are not).
"""

from __future__ import annotations

import re

# An absolute URL inside a longer text: a scheme, `://`, then everything up to white space or a double quote, which
# no URL holds as it is. The scheme is looked at for 32 characters at most: a long word costs linear time.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s\"]*")
# Punctuation that ends such a match as the text's, not the URL's (a quote, a bracket, a full stop): kept after a cut.
_CLOSING = ")]}>'.,;:!"


def loggable_url(url: str) -> str:
    """`url` without its user info, query and fragment: `https://u:pw@host:8443/mcp?token=x#y` is
    `https://host:8443/mcp`, and a request target `/mcp?access_token=x` is `/mcp`. The parts are found as URL parsers
    find them (the authority ends at the first `/`, `?` or `#`; the user info at its last `@`), nothing else is
    parsed, and a URL that no parser would take is cut the same way."""
    end = min((at for at in (url.find("?"), url.find("#")) if at >= 0), default=len(url))
    url = url[:end]
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


def loggable_urls(text: str) -> str:
    """`text` with each absolute URL in it (`scheme://...`) made a `loggable_url`, and the rest as it was."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(_cut, text)


def _cut(found: re.Match[str]) -> str:
    url = found[0]
    body = url.rstrip(_CLOSING)
    return loggable_url(body) + url[len(body) :]
