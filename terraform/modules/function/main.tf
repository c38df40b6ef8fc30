# One mldiag function as a Cloud Run function (gen2): its source archive, its own service
# account, its trigger and who may invoke it.
#
# The archive holds `functions/<name>/` at the root (main.py defines the entry point
# `<name>`), the `mldiag` package from `shared/mldiag/` less its host packages (sources.tf),
# and a requirements.txt written from `requirements`. Its object name carries the archive's
# MD5, so any change to the function, the library or the requirements uploads a new object
# and redeploys.

locals {
  function_name = "${var.prefix}-${replace(var.name, "_", "-")}"

  # run.invoker members keyed by names known at plan time (account emails are not).
  invokers = merge(
    { for member in var.invoker_members : member => member },
    var.storage_trigger == null ? {} : { eventarc = "serviceAccount:${google_service_account.trigger[0].email}" },
    var.pubsub_push ? { push = "serviceAccount:${google_service_account.push[0].email}" } : {},
  )
}

data "archive_file" "source" {
  type             = "zip"
  output_path      = "${path.root}/.terraform/mldiag-functions/${var.name}.zip"
  output_file_mode = "0644"

  dynamic "source" {
    for_each = merge(local.function_files, local.library_files)
    content {
      filename = source.key
      content  = file(source.value)
    }
  }

  source {
    filename = "requirements.txt"
    content  = join("\n", concat(var.requirements, [""]))
  }
}

resource "google_storage_bucket_object" "source" {
  name         = "functions/${var.name}/${data.archive_file.source.output_md5}.zip"
  bucket       = var.build.sources_bucket
  source       = data.archive_file.source.output_path
  content_type = "application/zip"
}

resource "google_service_account" "function" {
  project      = var.project_id
  account_id   = "${var.prefix}-${var.service_account_id}"
  display_name = "mldiag ${var.name} function"
  description  = "Runs the ${local.function_name} function; holds only the grants that function needs."
}

resource "google_cloudfunctions2_function" "this" {
  project     = var.project_id
  location    = var.region
  name        = local.function_name
  description = var.description
  labels      = var.labels

  build_config {
    runtime           = "python311"
    entry_point       = var.name
    service_account   = var.build.service_account_id
    docker_repository = var.build.docker_repository
    source {
      storage_source {
        bucket = var.build.sources_bucket
        object = google_storage_bucket_object.source.name
      }
    }
    automatic_update_policy {}
  }

  service_config {
    available_memory                 = var.resources.memory
    available_cpu                    = var.resources.cpu
    timeout_seconds                  = var.resources.timeout_seconds
    max_instance_request_concurrency = var.resources.concurrency
    min_instance_count               = 0
    max_instance_count               = var.resources.max_instances
    ingress_settings                 = var.ingress_settings
    all_traffic_on_latest_revision   = true
    service_account_email            = google_service_account.function.email
    # functions-framework serves with 4 threads per vCPU unless told: as many as the
    # concurrency Cloud Run sends each instance, so no request waits inside it.
    environment_variables         = merge(var.environment, { THREADS = tostring(var.resources.concurrency) })
    vpc_connector                 = try(var.vpc_connector.name, null)
    vpc_connector_egress_settings = try(var.vpc_connector.egress_settings, null)

    dynamic "secret_environment_variables" {
      for_each = var.secret_environment
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = secret_environment_variables.value
        version    = "latest"
      }
    }
  }

  dynamic "event_trigger" {
    for_each = var.storage_trigger == null ? [] : [var.storage_trigger]
    content {
      event_type            = "google.cloud.storage.object.v1.finalized"
      trigger_region        = event_trigger.value.region
      retry_policy          = "RETRY_POLICY_RETRY"
      service_account_email = google_service_account.trigger[0].email
      event_filters {
        attribute = "bucket"
        value     = event_trigger.value.bucket
      }
    }
  }

  # A revision that mounts a secret it cannot read fails to start.
  depends_on = [time_sleep.trigger_grants, google_secret_manager_secret_iam_member.function]
}

resource "google_project_iam_member" "function" {
  for_each = toset(var.project_roles)
  project  = var.project_id
  role     = each.value
  member   = google_service_account.function.member
}

resource "google_secret_manager_secret_iam_member" "function" {
  for_each  = toset(values(var.secret_environment))
  project   = var.project_id
  secret_id = each.value
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.function.member
}

# Lets the function sign blobs as itself (V4 signed URLs) without holding a key.
resource "google_service_account_iam_member" "self_signing" {
  count              = var.sign_as_self ? 1 : 0
  service_account_id = google_service_account.function.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = google_service_account.function.member
}

# Eventarc delivers the storage event with this account's identity.
resource "google_service_account" "trigger" {
  count        = var.storage_trigger == null ? 0 : 1
  project      = var.project_id
  account_id   = "${var.prefix}-${var.service_account_id}-trigger"
  display_name = "mldiag ${var.name} Eventarc trigger"
  description  = "Identity of the Eventarc trigger that invokes ${local.function_name}."
}

# Receiving events is granted per project only: Eventarc has no narrower resource for it.
resource "google_project_iam_member" "trigger_receiver" {
  count   = var.storage_trigger == null ? 0 : 1
  project = var.project_id
  role    = "roles/eventarc.eventReceiver"
  member  = google_service_account.trigger[0].member
}

# Eventarc delivers through a Pub/Sub push subscription of its own, authenticated as the
# trigger's account; see push_token below.
resource "google_service_account_iam_member" "trigger_token" {
  count              = var.storage_trigger == null ? 0 : 1
  service_account_id = google_service_account.trigger[0].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${var.pubsub_service_agent}"
}

# Eventarc refuses a trigger whose account it cannot yet see holding eventReceiver; no API
# says when the grant has propagated, so the trigger waits after these two grants.
resource "time_sleep" "trigger_grants" {
  count           = var.storage_trigger == null ? 0 : 1
  create_duration = "${var.propagation_seconds}s"
  triggers = {
    receiver = google_project_iam_member.trigger_receiver[0].id
    token    = google_service_account_iam_member.trigger_token[0].id
  }
}

# Pub/Sub push subscriptions authenticate with an OIDC token of this account.
resource "google_service_account" "push" {
  count        = var.pubsub_push ? 1 : 0
  project      = var.project_id
  account_id   = "${var.prefix}-${var.service_account_id}-push"
  display_name = "mldiag ${var.name} push invoker"
  description  = "Identity of the Pub/Sub push subscriptions that invoke ${local.function_name}."
}

# Projects whose Pub/Sub service agent predates April 2021 lack this by default.
resource "google_service_account_iam_member" "push_token" {
  count              = var.pubsub_push ? 1 : 0
  service_account_id = google_service_account.push[0].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${var.pubsub_service_agent}"
}

resource "google_cloud_run_v2_service_iam_member" "invokers" {
  for_each = local.invokers
  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.this.name
  role     = "roles/run.invoker"
  member   = each.value
}
