"""Development and the embedded demo: a generated secret kept under var/."""

import secrets

from .base import *  # noqa: F403
from .base import VAR_DIR, env

DEBUG = env.bool("DEBUG", True)


def _dev_secret() -> str:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    path = VAR_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = env.str("SECRET_KEY") or _dev_secret()
