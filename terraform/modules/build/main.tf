# What Cloud Build needs to turn function sources into images, and nothing more: a bucket
# for the source archives, an Artifact Registry repository for the images, and a build
# service account that can read the one, write the other and write build logs.
#
# The sources bucket is separate from the profiles bucket on purpose: workloads may write
# profiles, and nothing they can write must ever become code that runs.

locals {
  function_sources_bucket = "gcf-v2-sources-${var.project_number}-${var.region}"
}

resource "google_service_account" "build" {
  project      = var.project_id
  account_id   = "${var.prefix}-build"
  display_name = "mldiag function builds"
  description  = "Builds the mldiag function images from their source archives."
}

module "sources" {
  source        = "../bucket"
  project_id    = var.project_id
  name          = var.sources_bucket_name
  location      = var.region
  force_destroy = true # it only ever holds archives Terraform itself uploads
  labels        = var.labels
  # No age-based deletion: a function's archive is named by its content, so Terraform
  # deletes the previous one when it uploads the next, and the one deployed must stay
  # (its absence would make every plan upload it again and redeploy the function).
  lifecycle_rules = []
  iam = {
    build_reader = { role = "roles/storage.objectViewer", member = google_service_account.build.member }
  }
}

resource "google_artifact_registry_repository" "images" {
  # checkov:skip=CKV_GCP_84:The images hold mldiag's open-source code and public packages only; Google-managed encryption applies.
  project       = var.project_id
  location      = var.region
  repository_id = "${var.prefix}-functions"
  format        = "DOCKER"
  description   = "Images of the mldiag functions, built by Cloud Build."
  labels        = var.labels

  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = var.images_kept
    }
  }

  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      older_than = "${var.source_retention_days * 86400}s"
    }
  }
}

resource "google_artifact_registry_repository_iam_member" "build_writer" {
  project    = var.project_id
  location   = google_artifact_registry_repository.images.location
  repository = google_artifact_registry_repository.images.name
  role       = "roles/artifactregistry.writer"
  member     = google_service_account.build.member
}

# Cloud Functions (gen2) copies each source archive into a bucket of its own,
# gcf-v2-sources-<project number>-<region>, created on the first deploy, and Cloud Build
# reads it there as this account. That bucket does not exist to be granted on beforehand, so
# the grant is made on the project, limited by its condition to that one bucket.
resource "google_project_iam_member" "build_function_sources" {
  project = var.project_id
  role    = "roles/storage.objectViewer"
  member  = google_service_account.build.member

  condition {
    title       = "gcf-v2-sources bucket only"
    description = "Cloud Functions' copy of the source archives in ${var.region}."
    expression  = "resource.name.startsWith(\"projects/_/buckets/${local.function_sources_bucket}\")"
  }
}

# Build logs are written per project: Cloud Logging has no narrower resource for writers.
resource "google_project_iam_member" "build_logs" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = google_service_account.build.member
}
