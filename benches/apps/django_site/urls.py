from django.contrib import admin
from django.urls import path

from . import views

urlpatterns = [
    path("", views.index),
    path("pid", views.pid),
    path("admin/", admin.site.urls),
]
