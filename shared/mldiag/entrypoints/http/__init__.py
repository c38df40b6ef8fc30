"""The control plane's HTTP API: Google-shaped ``v1alpha`` routes, the SDK's self-hosted
``/v1`` contract and embedded share links, as one Flask app (:func:`create_app`)."""

from mldiag.entrypoints.http.app import create_app

__all__ = ["create_app"]
