"""For tests/parity.rs: an app factory that takes arguments, as
`m0serve 'factory_args:create_app("prod", debug=True)'` calls it."""


def create_app(env, debug=False, n=None):
    body = f"{env} {debug} {n}".encode()

    def app(environ, start_response):
        start_response("200 OK", [("Content-Length", str(len(body)))])
        return [body]

    return app


def make():
    """Granian's `--factory`: called without arguments."""
    return create_app("made")
