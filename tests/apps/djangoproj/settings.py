"""The single settings module of a minimal Django project (tests/frameworks.rs,
tests/wheel.rs): production-like (DEBUG off, hosts checked, CSRF on), no database."""

SECRET_KEY = "m0serve-tests-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "djangoproj.urls"
WSGI_APPLICATION = "djangoproj.wsgi.application"
INSTALLED_APPS = []
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
]
# No view touches a database.
DATABASES = {}
USE_TZ = True
TIME_ZONE = "UTC"
