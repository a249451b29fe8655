"""Passwords in storage URLs: the one place they are masked.

A database server's URL carries its password (``postgresql://user:PASSWORD@host/db``). Every
URL a user, a log, an error message or a stored document sees goes through :func:`redact`,
and every message that may quote one through :func:`redact_message`; nothing else in the
package prints a URL.
"""

from __future__ import annotations

import re

MASK = "***"
_SECRET_KEYS = ("password", "passwd", "pwd")
# scheme:[//]user:PASSWORD@ (the password may hold '@'; the host part ends at '/' or a blank)
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*:/{0,3}[^\s:/@'\"]*:)(?P<secret>[^\s/'\"]*)@")
# password=... in a query string or a libpq DSN, quoted or not
_KEYVALUE = re.compile(r"(?i)\b(?P<head>(?:%s)\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|[^\s&;'\"]*)"
                       % "|".join(_SECRET_KEYS))


def redact(url: str) -> str:
    """``url`` with its password masked (``***``): the only form of a storage URL that a user,
    a log, an error message or a stored document may see.

    Uses SQLAlchemy's own rendering of a URL with the password hidden, and also masks a
    ``password=`` in the query string. Never raises: a ``journal:`` path, a SQLite URL or a
    string that is no URL comes back unchanged except for whatever looks like a password.
    """
    text = str(url)
    if "@" not in text:  # no user part, so no password in it (and SQLAlchemy, slow to import, is not needed)
        return redact_message(text)
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(text)
        if parsed.password is not None:
            text = parsed.render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy can parse: patterns only
        pass
    return redact_message(text)


def redact_message(text: str, url: str | None = None) -> str:
    """``text`` (an exception's message, say) with passwords masked: those of ``url`` wherever
    they appear, and anything shaped like ``scheme://user:password@`` or ``password=...``."""
    for secret in _secrets(url) if url else ():
        text = text.replace(secret, MASK)
    text = _USERINFO.sub(lambda m: m["head"] + MASK + "@", text)
    return _KEYVALUE.sub(lambda m: m["head"] + MASK, text)


def _secrets(url: str) -> list[str]:
    """The password(s) in ``url``, as written and decoded; too short to replace safely: left to the patterns."""
    from urllib.parse import unquote

    found = [m["secret"] for m in _USERINFO.finditer(url)] + [m["secret"].strip("'") for m in _KEYVALUE.finditer(url)]
    found += [unquote(s) for s in found]
    # a password written unencoded with '@' or ':' in it is split by whatever parses the URL, and an error message
    # may quote a piece of it (SQLAlchemy: "invalid literal for int(): 'w0rdSecret@127.0.0.1:1'"): mask the pieces too
    found += [piece for s in found for piece in re.split(r"[@:]", s)]
    try:
        from sqlalchemy.engine import make_url

        if "@" in url:
            found.append(make_url(url).password or "")
    except Exception:  # noqa: BLE001 - not a URL: the patterns found what there is
        pass
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)
