"""The command line's HTTP client: one request to the REST API, and whatever the server (or
something that is not one) answers turned into the API's JSON or ``Refused`` with one line saying
what went wrong. Standard library only, like the rest of the command line.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class Refused(Exception):
    """The server answered with an error (or not at all); the message says what."""


def loads(text: str | bytes, **kwargs: Any) -> Any:
    """``json.loads``, with a document nested past what the parser can follow a ValueError too."""
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def visible(text: str) -> str:
    """``text`` with every character a terminal could act on (escapes, carriage returns, line
    breaks, other controls and format characters) written as its Python escape: ``\\x1b``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def printable(value: Any) -> Any:
    """A decoded answer with every text in it, keys too, made ``visible``: what the server stores
    is other users' (a job's name, a reason), and printed as it is it could rewrite the reader's
    terminal or forge lines of the listing. Walked without recursion (an answer may nest deep)."""
    root = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        holder, key = stack.pop()
        item = holder[key]
        if isinstance(item, str):
            holder[key] = visible(item)
        elif isinstance(item, list):
            stack += [(item, i) for i in range(len(item))]
        elif isinstance(item, dict):
            holder[key] = shown = {visible(k): v for k, v in item.items()}
            stack += [(shown, k) for k in shown]
    return root[0]


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """The API never redirects. urllib would follow one with every header, the token's too, to any
    host the answer names (plain HTTP included): the redirect is an error instead (``HTTPError``)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


class Client:
    """``text``: answers are for the terminal (``printable``); else as the server sent them (the
    ``--json`` output, which escapes controls itself)."""

    def __init__(self, url: str, token: str, timeout: float = 30, text: bool = False) -> None:
        self.base, self.token, self.timeout, self.text = url.rstrip("/") + "/api/v1", token, timeout, text

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             query: dict[str, str] | None = None) -> Any:
        url = self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Token {self.token}", "Accept": "application/json",
            **({"Content-Type": "application/json"} if data is not None else {})})
        not_api = f"is {self.base} a Lattice server's API?"
        try:
            with _OPENER.open(request, timeout=self.timeout) as response:
                body = loads(response.read())
                return printable(body) if self.text else body
        except ValueError:  # an answer that is not JSON (a login portal, another site)
            raise Refused(f"{url} answered, but not JSON: {not_api}") from None
        except urllib.error.HTTPError as exc:
            if 300 <= exc.code < 400:
                raise Refused(f"{url} redirects to {exc.headers.get('Location') or 'nowhere'} ({exc.code}); the "
                              "token was not sent there: if the server moved, give its URL (--url)") from None
            raise Refused(f"{exc.code}: {error_text(_body(exc), not_api)}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Refused(f"cannot reach {self.base}: {reason}") from None
        except http.client.HTTPException as exc:  # not HTTP at all, or the answer cut short
            raise Refused(f"{url} answered, but not as HTTP does ({type(exc).__name__}): {not_api}") from None

    def pages(self, path: str, query: dict[str, str]) -> list[dict[str, Any]]:
        """Every page of a cursor-paginated list, following ``next`` (each page once)."""
        out: list[dict[str, Any]] = []
        followed: set[str] = set()
        body = self.call("GET", path, query=query)
        while True:
            out += body["results"]
            if not body.get("next"):
                return out
            if body["next"] in followed:
                raise Refused(f"the server's list {path} leads back to a page already read: {body['next']}")
            followed.add(body["next"])
            nxt = urllib.parse.urlsplit(body["next"])
            body = self.call("GET", nxt.path.removeprefix("/api/v1"),
                             query=dict(urllib.parse.parse_qsl(nxt.query)))


def _body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read()
    except (OSError, http.client.HTTPException):  # the error's own body cut short
        return b""


def error_text(raw: bytes, not_api: str = "") -> str:
    """A DRF error body as one readable line: ``detail``, or each field with its messages."""
    try:
        body = loads(raw)
    except ValueError:
        text = raw.decode(errors="replace").strip()
        if text.startswith("<"):  # a web server's or a proxy's error page, not the API's answer
            return f"an HTML page, not the API's JSON{': ' + not_api if not_api else ''}"
        return text[:500] or "no message"
    if isinstance(body, dict):
        if ("detail" in body and len(body) == 1) or "error" in body:
            return str(body.get("detail", body.get("error")))
        return "; ".join(f"{field}: {' '.join(map(str, msgs)) if isinstance(msgs, list) else msgs}"
                         for field, msgs in body.items())
    return json.dumps(body)


def one_line(message: str) -> str:
    """A message for the terminal: one line, nothing a terminal would act on (escapes, controls)."""
    return " ".join("".join(c if c.isprintable() else " " for c in message).split())
