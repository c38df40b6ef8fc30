"""``/viewer/?session_path=gs://...``: where a session's ``dashboardUri`` leads when no XProf viewer URL is set.

That is the embedded default: ``mldiag up --viewer`` runs XProf over the local
bucket folder (:mod:`mldiag.local.xprof_viewer`), and this route sends the
browser there with the session's folder on this machine, the path XProf
opens (``?session_path=`` names a folder XProf can read; it cannot read
``gs://`` URIs of a local bucket). The stored ``dashboardUri`` thus stays the
same whichever port the viewer gets. Without a viewer the page says how to
start one.
"""

from __future__ import annotations

from urllib.parse import quote

from flask import Blueprint, Response, current_app, redirect, render_template, request

from mldiag.domain.errors import InvalidArgument, MldiagError, NotFound
from mldiag.entrypoints.http.rest import services
from mldiag.ports import LocalBuckets

blueprint = Blueprint("viewer", __name__, url_prefix="/viewer")
VIEWER_URL = "mldiag.xprof_viewer_url"  # app.config key: the running viewer's URL, set by ``mldiag up --viewer``


@blueprint.get("/")
def open_session() -> Response | tuple[str, int]:
    viewer = current_app.config.get(VIEWER_URL, "")
    blobs = services().blobs
    if not viewer or not isinstance(blobs, LocalBuckets):
        return render_template("console/viewer_missing.html", bucket_folder=_bucket_folder(blobs)), 503
    folder_uri = request.args.get("session_path", "")
    if not folder_uri.startswith("gs://"):
        raise InvalidArgument("session_path must be the gs:// folder of a session", field="session_path")
    folder = blobs.path_for(folder_uri)
    if not folder.is_dir():
        raise NotFound(f"{folder_uri} holds no profile on this machine")
    return redirect(f"{viewer}/?session_path={quote(str(folder), safe='')}", 302)


def _bucket_folder(blobs: object) -> str:
    if isinstance(blobs, LocalBuckets):
        return str(blobs.buckets / services().settings.bucket)
    return ""


@blueprint.errorhandler(MldiagError)
def show_error(error: MldiagError) -> tuple[str, int]:
    return render_template("console/error.html", problem=error, code=error.http_code), error.http_code
