"""Production: every secret comes from the environment; HTTPS everywhere."""

from .base import *  # noqa: F403
from .base import env

DEBUG = env.bool("DEBUG", False)
SECRET_KEY = env.required("SECRET_KEY")
if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("SECRET_KEY must be at least 50 characters of real randomness")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", [])
if not ALLOWED_HOSTS:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("ALLOWED_HOSTS must name the hosts Lattice answers to")

METRICS_PUBLIC = env.bool("METRICS_PUBLIC", False)  # set METRICS_TOKEN_SHA256 for the scraper instead

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", True)
# Probes are answered before SecurityMiddleware (lattice_site/probes.py); this keeps them plain
# HTTP should that order ever change.
SECURE_REDIRECT_EXEMPT = [r"^healthz(/|$)"]
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
