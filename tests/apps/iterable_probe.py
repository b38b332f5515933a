"""Wraps a WSGI app and remembers the type of the last response iterable it returned, so
a test can tell that a framework handed the server `wsgi.file_wrapper` (send_file,
FileResponse): GET /_last_iterable answers `module.QualName` of that type."""

_last = {"type": "none"}


def wrap(app):
    def probed(environ, start_response):
        if environ.get("PATH_INFO") == "/_last_iterable":
            body = _last["type"].encode()
            start_response(
                "200 OK",
                [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))],
            )
            return [body]
        iterable = app(environ, start_response)
        t = type(iterable)
        _last["type"] = "%s.%s" % (t.__module__, t.__qualname__)
        return iterable

    return probed
