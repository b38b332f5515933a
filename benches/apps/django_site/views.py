import os

from django.http import HttpResponse
from django.template import engines

_PAGE = engines["django"].from_string(
    "<!doctype html><title>{{ title }}</title><ul>{% for i in items %}<li>{{ i }}</li>{% endfor %}</ul>"
)


def index(request):
    return HttpResponse(_PAGE.render({"title": "m0serve", "items": range(20)}))


def pid(request):
    return HttpResponse(str(os.getpid()), content_type="text/plain")
