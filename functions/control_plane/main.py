"""Cloud Function (HTTP): the control plane's API — v1alpha, the SDK's self-hosted /v1 routes, share links."""

import functools
import io

import flask
import functions_framework
from werkzeug.wrappers import Response


@functools.cache
def _app() -> flask.Flask:
    # Built on the first request, and its modules imported then (numpy among them): the function starts as
    # fast as the framework alone.
    from mldiag.entrypoints.http.app import create_app

    return create_app()


@functions_framework.http
def control_plane(request: flask.Request) -> Response:
    # The framework may have consumed the input stream already; the API gets the body from a fresh one.
    body = request.get_data()
    environ = {**request.environ, "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body))}
    return Response.from_app(_app(), environ, buffered=True)
