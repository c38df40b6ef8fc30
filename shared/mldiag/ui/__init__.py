"""The web console (``/ui``) and the way into the XProf viewer (``/viewer``).

:func:`register` adds both to the control plane's Flask app. The console checks
its own credentials (:mod:`mldiag.ui.security`), so its blueprint is exempt
from the API's bearer-token check; ``/viewer`` is an ordinary read.
"""

from __future__ import annotations

from flask import Flask

from mldiag.ui import console, viewer_links

blueprint = console.blueprint


def register(app: Flask) -> None:
    app.register_blueprint(console.blueprint)
    app.register_blueprint(viewer_links.blueprint)
