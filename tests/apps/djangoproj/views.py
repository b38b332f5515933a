import os
import sys

import django
from django.http import FileResponse, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt


def index(request):
    return HttpResponse("django ok", content_type="text/plain")


def reverse_item(request, n):
    # Under --root-path Django's reverse() carries the prefix (SCRIPT_NAME).
    from django.urls import reverse

    return JsonResponse({"path": reverse("item", args=[n]), "full": request.build_absolute_uri(reverse("item", args=[n]))})


def item(request, n):
    return JsonResponse(
        {"n": n, "double": n * 2, "python": sys.prefix, "django_file": django.__file__}
    )


@csrf_exempt
def echo(request):
    body = request.body
    return JsonResponse(
        {
            "method": request.method,
            "length": len(body),
            "body": body.decode("latin-1"),
            "content_type": request.content_type,
        }
    )


def protected(request):
    # Not csrf_exempt: a POST without a CSRF token is refused (403) by the middleware.
    return HttpResponse("protected", content_type="text/plain")


def stream(request):
    n = int(request.GET.get("n", "5"))
    word = request.GET.get("word", "chunk")
    return StreamingHttpResponse(
        (f"{i}:{word}\n" for i in range(n)), content_type="text/plain"
    )


def file(request):
    return FileResponse(
        open(os.environ["M0S_SEND_FILE"], "rb"), content_type="application/octet-stream"
    )
