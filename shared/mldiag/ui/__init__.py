"""The web console (``/ui``) and the way into the XProf viewer (``/viewer``).

:func:`register` adds both to the control plane's Flask app, and sends ``/``
to the console. The console checks
its own credentials (:mod:`mldiag.ui.security`), so the API's bearer-token
check skips its blueprint (:data:`CONSOLE_BLUEPRINT`); ``/viewer`` is an
ordinary read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Flask

CONSOLE_BLUEPRINT = "ui"


def register(app: Flask) -> None:
    # Imported here: the blueprints use mldiag.api, whose app module imports this package.
    from mldiag.ui import console, viewer_links

    app.register_blueprint(console.blueprint)
    app.register_blueprint(viewer_links.blueprint)
    app.add_url_rule("/", "home", console.home)
