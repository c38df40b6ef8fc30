"""The web console (``/ui``) and the way into the XProf viewer (``/viewer``).

:func:`register` adds both to the control plane's Flask app, and sends ``/``
to the console. The console checks
its own credentials (:mod:`mldiag.entrypoints.console.security`), so the API's bearer-token
check skips its blueprint; ``/viewer`` is an
ordinary read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Flask

def register(app: Flask) -> None:
    # Imported here: the blueprints use mldiag.entrypoints.http, whose app module imports this package.
    from mldiag.entrypoints.console import pages, viewer_links
    from mldiag.entrypoints.http.rest import SELF_CHECKING_BLUEPRINTS

    app.register_blueprint(pages.blueprint)
    app.config[SELF_CHECKING_BLUEPRINTS].add(pages.blueprint.name)
    app.register_blueprint(viewer_links.blueprint)
    app.add_url_rule("/", "home", pages.home)
