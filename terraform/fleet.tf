# The fleet view's table: one row per finished analysis (mldiag.domain.fleet.FleetRecord),
# written with no function in between by a BigQuery subscription on analysis-events.
#
# The analysis publishes each record on analysis-events as a binary-mode CloudEvent: the
# message data is the row's JSON object and the attribute `ce-type` says it is a record
# (mldiag.domain.fleet.FLEET_RECORD_TYPE). The subscription takes only those messages and
# writes the data into the table's columns (use_table_schema); fields the table does not
# have yet (a newer publisher) are dropped rather than failing the write. A message the table
# refuses goes, after the usual attempts, to analysis-events' dead-letter topic, where the
# recorder keeps it for `mldiag events dead-letters`.
#
# The schema is terraform/fleet_schema.json, generated from the record by
# scripts/fleet_schema.py; tests/contract holds it to the local table and the published row.

locals {
  fleet_enabled = var.fleet.enabled
  # BigQuery dataset ids take letters, digits and underscores; mldiag.config's default is mldiag_fleet.
  fleet_dataset_id  = coalesce(var.fleet.dataset_id, "${replace(var.prefix, "-", "_")}_fleet")
  fleet_record_type = "dev.mldiag.analysis.v1.record"
  fleet_events      = "analysis-events"
  fleet_reader      = "control_plane"
  fleet_environment = local.fleet_enabled ? { MLDIAG_FLEET_DATASET = local.fleet_dataset_id } : {}
}

resource "google_bigquery_dataset" "fleet" {
  count                      = local.fleet_enabled ? 1 : 0
  project                    = var.project_id
  dataset_id                 = local.fleet_dataset_id
  friendly_name              = "mldiag fleet records"
  description                = "One row per finished mldiag analysis (docs/fleet.md), written by the ${local.name_prefix}fleet-records subscription."
  location                   = coalesce(var.fleet.location, var.region)
  delete_contents_on_destroy = !var.fleet.deletion_protection
  labels                     = local.labels

  dynamic "default_encryption_configuration" {
    for_each = var.fleet.kms_key_name == null ? [] : [var.fleet.kms_key_name]
    content {
      kms_key_name = default_encryption_configuration.value
    }
  }

  depends_on = [google_project_service.enabled]
}

resource "google_bigquery_table" "fleet_records" {
  # checkov:skip=CKV_GCP_121:Deletion protection is var.fleet.deletion_protection, on by default.
  # checkov:skip=CKV_GCP_80:The rows are summaries (run names, timings, finding titles), not profile data; var.fleet.kms_key_name sets a CMEK key for the dataset.
  count               = local.fleet_enabled ? 1 : 0
  project             = var.project_id
  dataset_id          = google_bigquery_dataset.fleet[0].dataset_id
  table_id            = "fleet_records"
  description         = "mldiag fleet records, schema version 1 (docs/fleet.md)."
  schema              = file("${path.module}/fleet_schema.json")
  clustering          = ["run"]
  deletion_protection = var.fleet.deletion_protection
  labels              = local.labels

  # The named queries read a window of days: a query scans only the days it asks for.
  time_partitioning {
    type          = "DAY"
    field         = "analyzed_at"
    expiration_ms = var.fleet.partition_expiration_days == null ? null : var.fleet.partition_expiration_days * 86400000
  }
}

# The Pub/Sub agent writes the rows: on the dataset only, never the project.
resource "google_bigquery_dataset_iam_member" "fleet_writer" {
  count      = local.fleet_enabled ? 1 : 0
  project    = var.project_id
  dataset_id = google_bigquery_dataset.fleet[0].dataset_id
  role       = "roles/bigquery.dataEditor"
  member     = "serviceAccount:${local.service_agents.pubsub}"
}

# The API reads the rows (`mldiag query`, `mldiag fleet`): on the dataset only.
resource "google_bigquery_dataset_iam_member" "fleet_reader" {
  count      = local.fleet_enabled ? 1 : 0
  project    = var.project_id
  dataset_id = google_bigquery_dataset.fleet[0].dataset_id
  role       = "roles/bigquery.dataViewer"
  member     = module.function[local.fleet_reader].service_account_member
}

# ... and runs its queries as jobs, which BigQuery only grants per project; what a job may
# read is still only what the dataset grant above allows.
resource "google_project_iam_member" "fleet_query_jobs" {
  count   = local.fleet_enabled ? 1 : 0
  project = var.project_id
  role    = "roles/bigquery.jobUser"
  member  = module.function[local.fleet_reader].service_account_member
}

# Creating the subscription checks that the agent may write the table; a fresh grant takes a
# while to be seen, so the subscription waits for it (and again if the grant is replaced).
resource "time_sleep" "fleet_writer_propagation" {
  count           = local.fleet_enabled ? 1 : 0
  create_duration = "${var.iam_propagation_seconds}s"
  triggers = {
    writer_grant = google_bigquery_dataset_iam_member.fleet_writer[0].id
  }
}

resource "google_pubsub_subscription" "fleet_records" {
  count                      = local.fleet_enabled ? 1 : 0
  project                    = var.project_id
  name                       = "${local.name_prefix}fleet-records"
  topic                      = module.queue[local.fleet_events].topic_id
  filter                     = "attributes.\"ce-type\" = \"${local.fleet_record_type}\""
  ack_deadline_seconds       = 60
  message_retention_duration = var.delivery.message_retention
  labels                     = local.labels

  bigquery_config {
    table               = "${google_bigquery_table.fleet_records[0].project}.${google_bigquery_table.fleet_records[0].dataset_id}.${google_bigquery_table.fleet_records[0].table_id}"
    use_table_schema    = true
    drop_unknown_fields = true
    write_metadata      = false
  }

  retry_policy {
    minimum_backoff = var.delivery.minimum_backoff
    maximum_backoff = var.delivery.maximum_backoff
  }

  dead_letter_policy {
    dead_letter_topic     = module.queue[local.fleet_events].dead_letter_topic_id
    max_delivery_attempts = var.delivery.max_delivery_attempts
  }

  # Never delete the subscription for inactivity (the default is after 31 quiet days).
  expiration_policy {
    ttl = ""
  }

  depends_on = [time_sleep.fleet_writer_propagation]
}

# Dead-lettering is done by the Pub/Sub agent: it acknowledges on the source subscription
# (the queue module already lets it publish to the dead-letter topic).
resource "google_pubsub_subscription_iam_member" "fleet_dead_letter_forwarding" {
  count        = local.fleet_enabled ? 1 : 0
  project      = var.project_id
  subscription = google_pubsub_subscription.fleet_records[0].name
  role         = "roles/pubsub.subscriber"
  member       = "serviceAccount:${local.service_agents.pubsub}"
}
