"""The viewer image's entry point: XProf's web server over a log directory that may not exist yet.

``xprof --logdir=gs://BUCKET/profiles`` refuses to start while nothing has been written under
that prefix (Cloud Storage has no empty folders, so a new deployment's logdir "does not
exist"), and Cloud Run would restart it until the first profile lands. XProf lists the
log directory on every request, so started without that check it serves an empty list at
first and each run as it arrives. Takes the ``xprof`` flags the service passes.
"""

from __future__ import annotations

import argparse
import sys

from xprof import server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="serve.py", description="XProf over a log directory that may be empty.")
    parser.add_argument("--logdir", required=True, help="Directory (or gs:// prefix) holding the runs.")
    parser.add_argument("--port", type=int, default=8080, help="Port of the web server.")
    parser.add_argument("--grpc_port", type=int, default=50051, help="Port of XProf's conversion worker.")
    parser.add_argument("--hide_capture_profile_button", action="store_true", help="Hide the capture button.")
    args = parser.parse_args(argv)
    if args.port == args.grpc_port:
        parser.error("--port and --grpc_port must differ")
    server._launch_server(server.ServerConfig(  # noqa: SLF001 - start_server() is this plus the existence check
        logdir=server.get_abs_path(args.logdir),
        port=args.port,
        grpc_port=args.grpc_port,
        worker_service_address=f"0.0.0.0:{args.grpc_port}",
        hide_capture_profile_button=args.hide_capture_profile_button,
        src_prefix=None,
        max_concurrent_worker_requests=1,
    ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
