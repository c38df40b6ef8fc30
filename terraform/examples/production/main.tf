# A production deployment: profiles encrypted with your key and access-logged, the API
# reachable only from inside the project's VPC networks and only with an ID token (the
# official SDK, which sends none, goes through the node agent on its node; README.md), captures
# through a VPC connector, the XProf viewer for an engineering group, larger analysis
# instances, and point-in-time recovery.
#
#   terraform init
#   terraform apply -var-file=production.tfvars

provider "google" {
  project = var.project_id
  region  = var.region
}

provider "google-beta" {
  project = var.project_id
  region  = var.region
}

module "mldiag" {
  source     = "../.."
  project_id = var.project_id
  region     = var.region
  labels     = { env = "prod", team = "ml-platform" }

  kms_key_name      = var.kms_key_name
  access_log_bucket = var.access_log_bucket
  bucket_versioning = true

  firestore = {
    location_id            = var.firestore_location
    point_in_time_recovery = true
  }

  delivery = {
    max_delivery_attempts = 10
  }
  event_retention_days = 90

  control_plane = {
    ingress = "ALLOW_INTERNAL_ONLY"
    # allUsers as invoker, which domain-restricted sharing refuses: only for the capability URL.
    allow_unauthenticated = var.sdk_secret != ""
    invoker_members       = var.operators
  }
  sdk_secret             = var.sdk_secret
  workload_members       = var.workload_members
  workload_vpc_connector = { name = var.vpc_connector }

  function_resources = {
    # Multi-host TPU profiles: more memory for the in-memory conversion.
    analyze_session = { memory = "32Gi", cpu = "8", max_instances = 20 }
  }

  xprof_viewer = {
    image           = var.xprof_image
    invoker_members = var.operators
    memory          = "8Gi"
  }
}

# A consumer of the notifications of your own, beside the webhook, Slack and PagerDuty
# deliveries mldiag makes: every analysis-events CloudEvent pushed to your endpoint with an
# OIDC token, retried with backoff, and dead-lettered to where `mldiag events dead-letters`
# shows it.
resource "google_pubsub_subscription" "analysis_events" {
  count                = var.analysis_events_endpoint == "" ? 0 : 1
  project              = var.project_id
  name                 = "analysis-events-to-my-service"
  topic                = module.mldiag.analysis_events.topic
  ack_deadline_seconds = 60

  push_config {
    push_endpoint = var.analysis_events_endpoint
    oidc_token {
      service_account_email = var.analysis_events_push_account
    }
  }
  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "600s"
  }
  dead_letter_policy {
    dead_letter_topic     = module.mldiag.analysis_events.dead_letter_topic
    max_delivery_attempts = 10
  }
  expiration_policy {
    ttl = ""
  }
}

# Pub/Sub acknowledges a dead-lettered message on the source subscription as its own agent.
resource "google_pubsub_subscription_iam_member" "analysis_events_dead_lettering" {
  count        = var.analysis_events_endpoint == "" ? 0 : 1
  project      = var.project_id
  subscription = google_pubsub_subscription.analysis_events[0].name
  role         = "roles/pubsub.subscriber"
  member       = "serviceAccount:${module.mldiag.service_agents.pubsub}"
}
