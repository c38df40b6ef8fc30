# Stock XProf (`xprof --logdir gs://...`) as a Cloud Run service, for the dashboard links
# the control plane hands out (`<url>/?session_path=<session folder>`). It reads the
# profiles bucket and nothing else; only the listed members may open it.
#
# The image's entrypoint (image/serve.py) starts XProf even while the logdir is still
# empty, as it is in a new bucket; stock `xprof` would refuse to start.

resource "google_service_account" "viewer" {
  project      = var.project_id
  account_id   = "${var.prefix}-xprof"
  display_name = "mldiag XProf viewer"
  description  = "Reads profiles for the XProf viewer service."
}

# The service lists the bucket from its first start, so it is created after this grant.
resource "google_storage_bucket_iam_member" "viewer" {
  bucket = var.bucket
  role   = "roles/storage.objectViewer"
  member = google_service_account.viewer.member
}

resource "google_cloud_run_v2_service" "viewer" {
  project             = var.project_id
  location            = var.region
  name                = "${var.prefix}-xprof"
  description         = "XProf viewer over ${var.logdir}"
  ingress             = var.ingress
  deletion_protection = false
  labels              = var.labels

  template {
    service_account                  = google_service_account.viewer.email
    timeout                          = "300s"
    max_instance_request_concurrency = var.concurrency
    # XProf keeps converted profiles in memory; one instance serves a viewer's session.
    session_affinity = true

    scaling {
      min_instance_count = 0
      max_instance_count = var.max_instances
    }

    containers {
      image = var.image
      args  = ["--logdir=${var.logdir}", "--port=8080", "--hide_capture_profile_button"]
      ports {
        container_port = 8080
      }
      resources {
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
        cpu_idle = true
      }
      startup_probe {
        initial_delay_seconds = 5
        period_seconds        = 5
        failure_threshold     = 24
        tcp_socket {
          port = 8080
        }
      }
    }
  }

  depends_on = [google_storage_bucket_iam_member.viewer]
}

resource "google_cloud_run_v2_service_iam_member" "invokers" {
  for_each = toset(var.invoker_members)
  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.viewer.name
  role     = "roles/run.invoker"
  member   = each.value
}
