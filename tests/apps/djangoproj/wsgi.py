"""The project's WSGI entry point: `m0serve djangoproj.wsgi:application`.
`probed` also answers GET /_last_iterable (tests/apps/iterable_probe.py)."""

import os

from django.core.wsgi import get_wsgi_application

import iterable_probe  # tests/apps, on sys.path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djangoproj.settings")

application = get_wsgi_application()

probed = iterable_probe.wrap(application)
