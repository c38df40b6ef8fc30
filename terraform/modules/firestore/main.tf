# The Firestore database (native mode), the composite indexes the queries need, TTL
# policies, and database-scoped access for the accounts that use it.

resource "google_firestore_database" "this" {
  project                           = var.project_id
  name                              = var.name
  location_id                       = var.location_id
  type                              = "FIRESTORE_NATIVE"
  point_in_time_recovery_enablement = var.point_in_time_recovery ? "POINT_IN_TIME_RECOVERY_ENABLED" : "POINT_IN_TIME_RECOVERY_DISABLED"
  delete_protection_state           = var.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  # With protection on, `terraform destroy` leaves the database in place instead of failing.
  deletion_policy = var.deletion_protection ? "ABANDON" : "DELETE"

  dynamic "cmek_config" {
    for_each = var.kms_key_name == null ? [] : [var.kms_key_name]
    content {
      kms_key_name = cmek_config.value
    }
  }
}

# Index metadata writes on a database that has just been created contend with each other
# (409 "cross-transaction contention" or "underlying data changed"). The TTL fields, one
# write, go first and bootstrap that metadata; the indexes follow (the provider retries a
# 409 among them; `terraform apply -parallelism=1` creates them one at a time if one persists).
resource "google_firestore_index" "this" {
  for_each    = var.composite_indexes
  project     = var.project_id
  database    = google_firestore_database.this.name
  collection  = each.value.collection
  query_scope = "COLLECTION"

  dynamic "fields" {
    for_each = each.value.fields
    content {
      field_path = fields.value.field_path
      order      = fields.value.order
    }
  }

  depends_on = [google_firestore_field.ttl]
}

# TTL fields are also exempted from single-field indexing, as Firestore advises: an index
# on an ever-growing timestamp only adds write hot-spotting (nothing queries the field).
resource "google_firestore_field" "ttl" {
  for_each   = var.ttl_fields
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = each.value.collection
  field      = each.value.field

  ttl_config {}
  index_config {}
}

# Firestore has no per-database IAM resource; a condition on the database name scopes the
# project-level grant to this database.
resource "google_project_iam_member" "users" {
  for_each = var.users
  project  = var.project_id
  role     = "roles/datastore.user"
  member   = each.value

  condition {
    title       = "only-${var.name}"
    description = "Read and write the ${var.name} Firestore database only."
    expression  = "resource.name == \"${google_firestore_database.this.id}\""
  }
}
