"""The control plane's HTTP API: Google-shaped ``v1alpha`` routes, the SDK's self-hosted ``/v1`` contract,
the operator's routes and embedded share links, as one Flask app (:func:`mldiag.entrypoints.http.app.create_app`)."""
