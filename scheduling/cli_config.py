"""Where the command line finds its server and token, and ``lattice login`` which saves them.

The server is ``--url``, else ``LATTICE_URL``, else the ``url`` of the config file, else
http://127.0.0.1:8000. A URL may be the site's root (``https://lattice.example``) or the API's
(``https://lattice.example/api/v1/``, or ``.../api/``): either way the client talks to
``<root>/api/v1``. The token is ``--token-file``, else ``LATTICE_TOKEN``, else the file the config
names. The config file is ``$LATTICE_CONFIG``, else ``$XDG_CONFIG_HOME/lattice/config.json``,
else ``~/.config/lattice/config.json``: ``{"url": ..., "token_file": ...}``, written by
``login``. Standard library only, like the rest of the command line.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import urllib.parse
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
SMALL_FILE = 64 * 1024  # a config or a token file is a few lines: more is the wrong file


class ConfigError(Exception):
    """A config file or a token file that cannot be used; nothing was sent."""


def read_text(path: str | Path, what: str, limit: int = SMALL_FILE) -> str:
    """A file's text (UTF-8) that is at most ``limit`` bytes; ConfigError saying why otherwise
    (so ``/dev/zero`` or a disk image named by mistake is refused, not read forever)."""
    try:
        with open(Path(path).expanduser(), "rb") as f:
            raw = f.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # a path with a NUL in it
        raise ConfigError(f"cannot read {what} {path!r}: {exc}") from None
    if len(raw) > limit:
        raise ConfigError(f"{what} {path} is over {limit // 1024} KiB: is it the right file?")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path} is not text (UTF-8): is it the right file?") from None


def stdin_line() -> str:
    """One line of standard input, at most SMALL_FILE bytes of it, whatever its encoding (a byte that
    is not UTF-8 becomes U+FFFD, which no token holds)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # already text
        return sys.stdin.readline(SMALL_FILE)
    return bytes(buffer.readline(SMALL_FILE)).decode(errors="replace")


def config_path() -> Path:
    if os.environ.get("LATTICE_CONFIG"):
        return Path(os.environ["LATTICE_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "lattice" / "config.json"


def read_config() -> dict[str, Any]:
    path = config_path()
    if not path.exists():
        return {}
    try:
        config = json.loads(read_text(path, "the config file"))
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc or 'nested too deeply'}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"the config file {path} must hold a JSON object")
    for key in ("url", "token_file"):
        if config.get(key) is not None and not isinstance(config[key], str):
            raise ConfigError(f"the config file {path}: {key} must be a string")
    return config


def site_root(url: str) -> str:
    """The site's root from a URL that may name the API's root instead."""
    root = url.strip().rstrip("/")
    for suffix in ("/api/v1", "/api"):
        if root.endswith(suffix):
            root = root[: -len(suffix)]
            break
    if not root.startswith(("http://", "https://")):
        raise ConfigError(f"{url!r} is not an http:// or https:// URL")
    try:
        parts = urllib.parse.urlsplit(root)
        parts.port  # noqa: B018  (a port that is not one raises here, not in the request)
    except ValueError as exc:
        raise ConfigError(f"{url!r} is not a usable URL: {exc}") from None
    if "@" in parts.netloc:  # (not echoed: it would print the password)
        raise ConfigError("a server URL naming a user or password (USER:PASSWORD@HOST) is not usable: the API "
                          "takes a token; give http(s)://HOST[:PORT]")
    if not parts.hostname or not root.isprintable() or any(c.isspace() for c in root):
        raise ConfigError(f"{url!r} is not a usable URL: it needs a host, and no spaces")
    if parts.query or parts.fragment or "?" in root or "#" in root:
        raise ConfigError(f"{url!r} is not a usable URL: the server's root has no ?query or #fragment")
    return root


def server_url(flag: str | None) -> str:
    return site_root(flag or os.environ.get("LATTICE_URL") or read_config().get("url") or DEFAULT_URL)


def token(flag_file: str | None) -> str:
    """The API token: ``--token-file``, ``LATTICE_TOKEN``, or the config's token file."""
    path = flag_file
    if not path and not os.environ.get("LATTICE_TOKEN", "").strip():
        path = read_config().get("token_file")
    if path:
        return checked_token(read_text(path, "the token file").strip(), f"the token file {path}")
    return checked_token(os.environ.get("LATTICE_TOKEN", "").strip(), "LATTICE_TOKEN")


def checked_token(secret: str, where: str) -> str:
    """A token goes in an HTTP header: one word of printable ASCII, nothing else."""
    if secret and not (secret.isascii() and secret.isprintable() and not any(c.isspace() for c in secret)):
        raise ConfigError(f"{where} does not hold one token (one line, no spaces, printable ASCII)")
    return secret


def save_login(url: str, secret: str | None, token_file: str | None) -> Path:
    """Write the config (the server's root and the token file). A token given itself is kept in
    ``token`` next to the config, readable by its owner only."""
    path = config_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if secret is not None:
            kept = path.parent / "token"
            kept.touch(mode=stat.S_IRUSR | stat.S_IWUSR, exist_ok=True)
            kept.chmod(stat.S_IRUSR | stat.S_IWUSR)
            kept.write_text(secret + "\n")
            token_file = str(kept)
        # Absolute: later commands run from any directory.
        saved = os.path.abspath(Path(token_file).expanduser()) if token_file else ""
        path.write_text(json.dumps({"url": site_root(url), "token_file": saved}, indent=2) + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write the config file {path}: {exc.strerror or exc}") from None
    return path
