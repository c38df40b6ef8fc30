# A private bucket: uniform access, public access prevention enforced, bucket-level IAM only.

locals {
  needs_storage_agent = var.kms_key_name != null || var.eventarc_source
}

data "google_storage_project_service_account" "this" {
  count   = local.needs_storage_agent ? 1 : 0
  project = var.project_id
}

# The Cloud Storage service agent encrypts with the key; granted on the key itself.
resource "google_kms_crypto_key_iam_member" "storage_agent" {
  count         = var.kms_key_name == null ? 0 : 1
  crypto_key_id = var.kms_key_name
  role          = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
  member        = "serviceAccount:${data.google_storage_project_service_account.this[0].email_address}"
}

resource "google_storage_bucket" "this" {
  # checkov:skip=CKV_GCP_78:Versioning is the caller's choice (var.versioning): profiles are written once per generation and source archives are content-addressed.
  project                     = var.project_id
  name                        = var.name
  location                    = var.location
  storage_class               = var.storage_class
  force_destroy               = var.force_destroy
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  labels                      = var.labels

  versioning {
    enabled = var.versioning
  }

  soft_delete_policy {
    retention_duration_seconds = var.soft_delete_retention_days * 86400
  }

  dynamic "encryption" {
    for_each = var.kms_key_name == null ? [] : [var.kms_key_name]
    content {
      default_kms_key_name = encryption.value
    }
  }

  dynamic "logging" {
    for_each = var.access_log_bucket == null ? [] : [var.access_log_bucket]
    content {
      log_bucket        = logging.value
      log_object_prefix = var.name
    }
  }

  dynamic "lifecycle_rule" {
    for_each = var.lifecycle_rules
    content {
      action {
        type          = lifecycle_rule.value.action.type
        storage_class = lifecycle_rule.value.action.storage_class
      }
      condition {
        age                        = lifecycle_rule.value.condition.age
        matches_prefix             = lifecycle_rule.value.condition.matches_prefix
        matches_storage_class      = lifecycle_rule.value.condition.matches_storage_class
        with_state                 = lifecycle_rule.value.condition.with_state
        num_newer_versions         = lifecycle_rule.value.condition.num_newer_versions
        days_since_noncurrent_time = lifecycle_rule.value.condition.days_since_noncurrent_time
      }
    }
  }

  depends_on = [google_kms_crypto_key_iam_member.storage_agent]
}

# One additive binding per grant: adding a grant never rewrites another.
resource "google_storage_bucket_iam_member" "this" {
  for_each = var.iam
  bucket   = google_storage_bucket.this.name
  role     = each.value.role
  member   = each.value.member

  dynamic "condition" {
    for_each = each.value.condition == null ? [] : [each.value.condition]
    content {
      title      = condition.value.title
      expression = condition.value.expression
    }
  }
}

# Eventarc storage triggers publish through a topic Eventarc creates and names itself, so the
# Cloud Storage service agent's publisher grant can only be made on the project.
resource "google_project_iam_member" "storage_agent_publisher" {
  count   = var.eventarc_source ? 1 : 0
  project = var.project_id
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${data.google_storage_project_service_account.this[0].email_address}"
}
