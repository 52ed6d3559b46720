"""Settings shared by every environment. The environment is read once, here."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from scheduling.version import version

from .environment import env

PACKAGE_DIR = Path(__file__).resolve().parent.parent
BASE_DIR = PACKAGE_DIR.parent
# A checkout keeps templates/ and static/ at its top, and var/ there; installed (pip install .),
# they are inside the lattice_site package (setup.py) and var/ is where the process starts.
CHECKOUT = (BASE_DIR / "manage.py").is_file() and (BASE_DIR / "templates").is_dir()
DATA_DIR = BASE_DIR if CHECKOUT else PACKAGE_DIR
HOME_DIR = BASE_DIR if CHECKOUT else Path.cwd()
VAR_DIR = Path(env.str("LATTICE_VAR_DIR") or HOME_DIR / "var")

DEBUG = env.bool("DEBUG", False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "lattice_site.admin_lists.LatticeAdminConfig",  # django.contrib.admin, lists vetted
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and ReDoc served from static files, never a CDN
    "django_htmx",
    "django_filters",
    "channels",
    "scheduling",
    "nodes",
    "axes",
]

MIDDLEWARE = [
    # Probes first: no HTTPS redirect, no ALLOWED_HOSTS for them (lattice_site/probes.py).
    "lattice_site.probes.ProbeMiddleware",
    "lattice_site.logs.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "lattice_site.middleware.RefuseNul",
    "lattice_site.middleware.ApiNotFoundInJson",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it answers a locked-out login with 429.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "lattice_site.urls"
ASGI_APPLICATION = "lattice_site.asgi.application"
WSGI_APPLICATION = "lattice_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [DATA_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# -- database --------------------------------------------------------------------
DATABASE_URL = env.str("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'lattice.sqlite3'}"
try:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
except Exception as exc:  # dj-database-url raises several types for a bad URL
    raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env.bool("DB_POOL", True):
    # Under ASGI every request runs in a fresh thread, so per-thread persistent
    # connections never get reused: each request would open a connection. A
    # process-wide pool hands one over in microseconds instead.
    # Every process holds up to DB_POOL_MAX connections: processes x DB_POOL_MAX must stay
    # below PostgreSQL's max_connections (see the README), or go through a pooler.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    _pool_max = env.int("DB_POOL_MAX", 20, minimum=1)
    DATABASES["default"]["OPTIONS"] = {"pool": {"min_size": min(2, _pool_max), "max_size": _pool_max,
                                                "timeout": 10}}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env.bool("DB_PREPARE", True):
    # Parameters bound on the server, and a statement prepared the second time a connection
    # runs it: the API's reads then skip planning, which cost more than executing them (the
    # token lookup: 0.17 ms to plan, 0.03 ms to run). DB_PREPARE=false for a pooler in
    # transaction mode that cannot keep prepared statements (PgBouncer before 1.21).
    DATABASES["default"].setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=1)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env.int("DB_STATEMENT_TIMEOUT_MS", 0, minimum=0):
    # For processes whose tasks cannot be killed from outside (a thread-pool worker): no
    # statement may wait or run longer than this.
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = (
        f"-c statement_timeout={env.int('DB_STATEMENT_TIMEOUT_MS', 0, minimum=0)}")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # Writers wait for each other instead of failing at once (the web process and
    # the in-process tasks share the file).
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# -- redis: channel layer and Celery broker, or the embedded default ---------------
REDIS_URL = env.str("REDIS_URL") or None

# /metrics: a scraper presents "Authorization: Bearer <token>" whose SHA-256 (hex) is
# METRICS_TOKEN_SHA256 (manage.py metrics_token makes a pair); operators' sessions may
# read it too. Without a digest it is open only where METRICS_PUBLIC (not in production).
METRICS_TOKEN_SHA256 = (env.str("METRICS_TOKEN_SHA256") or "").strip().lower()
if METRICS_TOKEN_SHA256 and (len(METRICS_TOKEN_SHA256) != 64
                             or any(c not in "0123456789abcdef" for c in METRICS_TOKEN_SHA256)):
    raise ImproperlyConfigured("METRICS_TOKEN_SHA256 must be a SHA-256 digest in hex (manage.py metrics_token)")
METRICS_PUBLIC = env.bool("METRICS_PUBLIC", True)
if REDIS_URL:
    from channels_redis.core import RedisChannelLayer

    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "lattice_site.channel_layer.RedisChannelLayer",
            # redis-py refuses past its pool size (100 by default) instead of waiting, and a
            # reconnect burst of agents needs one connection per concurrent group_add.
            # A channel holds 100 messages by default and drops the rest of a burst.
            # Each socket waits for its messages with a blocking read of brpop_timeout (5 s)
            # seconds, repeated; redis-py gives up on any reply after its socket timeout, by
            # default also 5 s. An empty blocking read's reply arriving a moment after 5 s
            # (any load) then raised in the consumer and closed the socket with 1011. The
            # client must wait comfortably longer than a blocking read can take.
            "CONFIG": {"hosts": [{"address": REDIS_URL,
                                  "max_connections": env.int("REDIS_MAX_CONNECTIONS", 1000, minimum=1),
                                  "socket_timeout": 3 * RedisChannelLayer.brpop_timeout}],
                       "capacity": 1000},
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://localhost/"  # (with a host: kombu warns of a missing one otherwise)
    # No broker: tasks run in the web process, right where they are sent.
    CELERY_TASK_ALWAYS_EAGER = True

# Django's cache: start estimates (scheduling/start_estimate.py), a minute per group. In Redis when
# there is one, so every web process shares them; else in each process's memory.
CACHES = ({"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                       "KEY_PREFIX": "lattice-cache"}} if REDIS_URL else
          {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}})
# Start estimates assume work without a walltime runs this long.
LATTICE_ESTIMATE_DEFAULT_WALLTIME_MINUTES = env.int("LATTICE_ESTIMATE_DEFAULT_WALLTIME_MINUTES", 240)
# How long a heartbeat that finds no write in flight waits for others to share its statement
# (nodes/heartbeats.py): server CPU per heartbeat against its ack's delay; 0: no wait.
LATTICE_HEARTBEAT_COLLECT_MS = env.int("LATTICE_HEARTBEAT_COLLECT_MS", 5, minimum=0, maximum=1000)
# How long a chart's answer is kept while no sample is written (scheduling/usage_series.py); 0: never.
LATTICE_USAGE_SERIES_CACHE_SECONDS = env.int("LATTICE_USAGE_SERIES_CACHE_SECONDS", 120, minimum=0)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 120
# Policy evaluations (a replay: minutes of CPU) have a queue of their own, served by the
# Procfile's `evaluator` worker: a forked child per task, which its time limit can stop, apart
# from the thread pool that runs the scheduler's passes (which they would otherwise delay).
CELERY_TASK_ROUTES = {"scheduling.evaluate_policy": {"queue": "evaluations"}}
LATTICE_EVALUATION_TIME_LIMIT_S = env.int("LATTICE_EVALUATION_TIME_LIMIT_S", 3600, minimum=60)
# The worker logs through LOGGING below (format, request ids), not a handler of Celery's own.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE = {
    # Re-derives deadlines, holds and pending work from the database: recovers any lost message.
    "sweep": {"task": "scheduling.sweep", "schedule": env.int("LATTICE_SWEEP_SECONDS", 5, minimum=1)},
    "node-liveness": {"task": "nodes.liveness", "schedule": env.int("LATTICE_SWEEP_SECONDS", 5, minimum=1)},
    # The usage series (scheduling/usage.py): it samples each complete minute once, whenever it runs.
    "usage": {"task": "scheduling.sample_usage", "schedule": 30},
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [DATA_DIR / "static"]
STATIC_ROOT = Path(env.str("STATIC_ROOT") or HOME_DIR / "staticfiles")

# Login throttling (django-axes): LOGIN_FAILURE_LIMIT failed logins for one username from one
# address lock that pair out for LOGIN_COOLOFF_MINUTES (429, even with the right password); a
# success resets the count. Other addresses and API tokens are unaffected. The address is the
# connection's (REMOTE_ADDR): a forwarded header is not trusted.
AUTHENTICATION_BACKENDS = ["lattice_site.login_throttle.LoginThrottle",
                           "django.contrib.auth.backends.ModelBackend"]
# Both at least 1: a limit of 0 would lock every login out at its first try, a cool-off under
# a minute would never hold.
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: it answers 401 with a challenge; the session serves the browser.
        "scheduling.api.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["scheduling.api.renderers.JSONRenderer",
                                 "rest_framework.renderers.BrowsableAPIRenderer"],
    # NUL refused anywhere in a body; forms for the browsable API and form posts.
    "DEFAULT_PARSER_CLASSES": ["scheduling.api.parsers.JSONParser", "scheduling.api.parsers.FormParser",
                               "scheduling.api.parsers.MultiPartParser"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "scheduling.api.schema.LatticeSchema",
    "EXCEPTION_HANDLER": "scheduling.api.errors.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "scheduling.api.pagination.Cursor",
    "PAGE_SIZE": 50,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Lattice API",
    "DESCRIPTION": "Allocations, decisions and policies of a Lattice control plane.",
    "VERSION": version(),
    # /api/docs/ and /api/redoc/ load their scripts from this project's static files, so they
    # render on a cluster with no internet access.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # ReDoc's bundle from the sidecar, with the one image it fetched from the internet taken
    # out (lattice_site/redoc.py serves it).
    "REDOC_DIST": "/api/redoc-dist",
    # Clients send JSON (the parsers also read forms, for the browsable API).
    "PARSER_WHITELIST": ["scheduling.api.parsers.JSONParser"],
    "COMPONENT_SPLIT_REQUEST": True,  # what a client sends, apart from what it reads back
    # Two lists of choices share the field name "status": each gets a name of its own.
    "ENUM_NAME_OVERRIDES": {"EvaluationStatusEnum": "scheduling.models.evaluations.EvaluationStatus"},
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "scheduling.api.schema.require_reason"],
}

# Everything goes to the root's one handler. Django's own "django" logger has a console handler
# of its own when DEBUG is on and passes its records on to the root as well, so every request
# line and warning was written twice; here it keeps no handler and passes everything on, at the
# level asked for (a record a logger lets through reaches the root's handler whatever the root's level).
# Each line has its time (UTC), level, logger and request id; LOG_FORMAT=json writes one JSON
# object a line instead (lattice_site/logs.py).
LOG_LEVEL = (env.str("LOG_LEVEL") or "INFO").strip().upper()
if LOG_LEVEL not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
    raise ImproperlyConfigured(f"LOG_LEVEL={env.str('LOG_LEVEL')!r} must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
LOG_FORMAT = (env.str("LOG_FORMAT") or "text").strip().lower()
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r} must be text or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "lattice_site.logs.RequestIdFilter"},
                "refusal": {"()": "lattice_site.logs.RefusalWithoutTraceback"}},
    "formatters": {
        "text": {"()": "lattice_site.logs.TextFormatter", "format": "%(asctime)s %(levelname)s %(name)s "
                                                                    "[%(request_id)s] %(message)s"},
        "json": {"()": "lattice_site.logs.JsonFormatter", "fmt": "%(asctime)s %(levelname)s %(name)s "
                                                                 "%(request_id)s %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT,
                             "filters": ["request_id", "refusal"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django": {"handlers": [], "level": LOG_LEVEL, "propagate": True}},
}
