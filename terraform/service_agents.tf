# The Google-managed service agents this deployment grants roles to.
#
# Pub/Sub, Cloud Scheduler, Cloud Monitoring's notifications and Eventarc create their
# agents just in time, on first use, not when their API is enabled, and IAM refuses a
# binding whose member does not exist yet. Each agent is therefore provisioned here first,
# and its email is read through the provisioned identity, so every grant that names an
# agent waits for it. An agent created on request gets none of the roles Google would
# have granted it automatically, so its service agent role is granted here too.
# The Cloud Storage agent is not listed: reading it (google_storage_project_service_account
# in modules/bucket) creates it.

locals {
  just_in_time_agents = {
    pubsub     = { service = "pubsub.googleapis.com", domain = "gcp-sa-pubsub", role = "roles/pubsub.serviceAgent" }
    scheduler  = { service = "cloudscheduler.googleapis.com", domain = "gcp-sa-cloudscheduler", role = "roles/cloudscheduler.serviceAgent" }
    monitoring = { service = "monitoring.googleapis.com", domain = "gcp-sa-monitoring-notification", role = "roles/monitoring.notificationServiceAgent" }
    eventarc   = { service = "eventarc.googleapis.com", domain = "gcp-sa-eventarc", role = "roles/eventarc.serviceAgent" }
  }

  service_agents = {
    for name, identity in google_project_service_identity.agents :
    name => "service-${local.project_number}@${local.just_in_time_agents[name].domain}.iam.gserviceaccount.com"
  }
}

resource "google_project_service_identity" "agents" {
  provider   = google-beta
  for_each   = local.just_in_time_agents
  project    = var.project_id
  service    = each.value.service
  depends_on = [google_project_service.enabled]
}

# A service agent role is granted on the project: it is what the service acts with there.
resource "google_project_iam_member" "service_agents" {
  # checkov:skip=CKV_GCP_49:Each is the role Google itself grants that agent when it creates it unasked (Pub/Sub and Eventarc mint push tokens, Scheduler acts for its jobs); agents created on request get none, so it is granted here.
  for_each = local.just_in_time_agents
  project  = var.project_id
  role     = each.value.role
  member   = "serviceAccount:${local.service_agents[each.key]}"
}
