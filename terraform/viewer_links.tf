# Where the dashboard links (a session's dashboardUri, `<viewer>/?session_path=...`) send a
# browser. The viewer sits behind IAM's invoker role and a browser sends no ID token, so a
# click on its run.app URL gets 403. Unless a front that signs people in (an IAP-protected
# load balancer) is named in xprof_viewer.browser_url, the links point at the local port of
# `gcloud run services proxy` (output xprof_viewer_proxy_command), which forwards each request
# with the person's own credentials.

locals {
  xprof_viewer_proxy_port = 8081
  xprof_viewer_links = var.xprof_viewer == null ? "" : coalesce(
    var.xprof_viewer.browser_url, "http://localhost:${local.xprof_viewer_proxy_port}",
  )
}
