from django.urls import path

from . import views

urlpatterns = [
    path("", views.index),
    path("items/<int:n>/", views.item, name="item"),
    path("reverse/<int:n>/", views.reverse_item),
    path("echo/", views.echo),
    path("protected/", views.protected),
    path("stream/", views.stream),
    path("file/", views.file),
]
