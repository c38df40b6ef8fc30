# mldiag on Google Cloud: one project-wide instance for all runs.
#
# Profiles land in the profiles bucket; object finalize (Eventarc) registers them; queues
# on Pub/Sub carry analysis, capture and alert work to the functions, with retries and
# dead-letter topics; Firestore holds the state; the XProf viewer serves dashboard links.
# Grants go on the narrowest resource the API offers; the few project-level ones are
# listed in README.md with the reason each has no narrower home.

# Read once Cloud Resource Manager is enabled: on a fresh project a read at plan time
# fails. On the first plan the number is therefore unknown until apply; afterwards, with
# the APIs unchanged, it is read at plan time as usual.
data "google_project" "this" {
  project_id = var.project_id
  depends_on = [google_project_service.enabled]
}

locals {
  source_root     = "${path.module}/.."
  bucket_name     = coalesce(var.bucket_name, "${var.project_id}-${var.prefix}-profiles")
  bucket_location = coalesce(var.bucket_location, var.region)
  profiles_path   = "gs://${local.bucket_name}/${var.profiles_prefix}"
  labels          = merge({ app = "mldiag" }, var.labels)

  project_number = data.google_project.this.number

  # Cloud Run's deterministic URL of the control plane, known before it exists, so the
  # function can be told the audience its callers' ID tokens must carry.
  control_plane_url = "https://${var.prefix}-control-plane-${local.project_number}.${var.region}.run.app"

  # What the node agent (mldiag agent) needs to reach this deployment: output agent_configmap.
  agent_settings = {
    MLDIAG_API_URL       = local.control_plane_url
    MLDIAG_AUTH_AUDIENCE = local.control_plane_url
    MLDIAG_BACKEND       = "gcp"
    MLDIAG_PROJECT       = var.project_id
    MLDIAG_LOCATION      = var.region
  }

  # mldiag.config: DEAD_LETTER_SUFFIX; the last stop for dead letters the recorder refused.
  dead_letter_suffix      = "-dead-letter"
  unrecorded_dead_letters = "unrecorded-dead-letters"

  services = [
    "aiplatform.googleapis.com",
    "artifactregistry.googleapis.com",
    "bigquery.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "eventarc.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
  ]

  environment = merge({
    MLDIAG_BACKEND               = "gcp"
    MLDIAG_PROJECT               = var.project_id
    MLDIAG_LOCATION              = var.region
    MLDIAG_BUCKET                = local.bucket_name
    MLDIAG_FIRESTORE_DATABASE    = module.firestore.name
    MLDIAG_XPROF_VIEWER_URL      = local.xprof_viewer_links
    MLDIAG_LOG_FORMAT            = "json"
    MLDIAG_MAX_DELIVERY_ATTEMPTS = tostring(var.delivery.max_delivery_attempts)
    MLDIAG_EVENT_RETENTION_DAYS  = tostring(var.event_retention_days)
    MLDIAG_TOPIC_PREFIX          = local.name_prefix
  }, local.fleet_environment)
  # The control plane's only: kept out of local.functions, where a sensitive value would taint its for_each.
  sdk_environment = { MLDIAG_SDK_SECRET = var.sdk_secret, MLDIAG_ALERT_TOKEN = var.alert_token }

  api_invokers = distinct(concat(
    var.control_plane.invoker_members,
    var.workload_members,
    var.control_plane.allow_unauthenticated ? ["allUsers"] : [],
  ))

  workload_bucket_roles = ["roles/storage.objectCreator", "roles/storage.objectViewer"]
  # Workloads write and read their runs under the profiles prefix and nothing else (not the
  # event archive's raw events under `_mldiag/`). Listing is checked on the bucket itself, so
  # the bucket is named too: workloads may list object names, not read their contents.
  workload_objects = {
    title      = "${var.profiles_prefix}/ only"
    expression = "resource.name == \"projects/_/buckets/${local.bucket_name}\" || resource.name.startsWith(\"projects/_/buckets/${local.bucket_name}/objects/${var.profiles_prefix}/\")"
  }
  bucket_grants = merge(
    merge([
      for name, function in local.functions : {
        for role in function.bucket_roles : "${name} ${role}" => {
          role = role, member = module.function[name].service_account_member
        }
      }
    ]...),
    merge([
      for member in var.workload_members : {
        for role in local.workload_bucket_roles : "workload ${member} ${role}" => {
          role = role, member = member, condition = local.workload_objects
        }
      }
    ]...),
  )
}

resource "google_project_service" "enabled" {
  for_each           = toset(local.services)
  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

module "profiles" {
  source                     = "./modules/bucket"
  project_id                 = var.project_id
  name                       = local.bucket_name
  location                   = local.bucket_location
  force_destroy              = var.force_destroy
  versioning                 = var.bucket_versioning
  kms_key_name               = var.kms_key_name
  access_log_bucket          = var.access_log_bucket
  soft_delete_retention_days = var.soft_delete_retention_days
  eventarc_source            = true
  lifecycle_rules            = var.bucket_lifecycle_rules
  iam                        = local.bucket_grants
  labels                     = local.labels
  depends_on                 = [google_project_service.enabled]
}

module "firestore" {
  source                 = "./modules/firestore"
  project_id             = var.project_id
  name                   = local.firestore_database
  location_id            = coalesce(var.firestore.location_id, var.region)
  deletion_protection    = var.firestore.deletion_protection
  point_in_time_recovery = var.firestore.point_in_time_recovery
  composite_indexes      = local.firestore_indexes
  ttl_fields             = local.firestore_ttl_fields
  users                  = { for name in keys(local.functions) : name => module.function[name].service_account_member }
  depends_on             = [google_project_service.enabled]
}

module "build" {
  source              = "./modules/build"
  project_id          = var.project_id
  region              = var.region
  project_number      = local.project_number
  prefix              = var.prefix
  sources_bucket_name = "${var.project_id}-${var.prefix}-sources"
  labels              = local.labels
  depends_on          = [google_project_service.enabled]
}

# The agents exist and hold their roles (service_agents.tf) before anything below starts, but
# a new grant takes a while to be seen everywhere, and no API says when it has: on a fresh
# project a build started at once cannot read its sources, and an Eventarc trigger created at
# once is refused because the storage or Eventarc agent cannot yet act. The functions (their
# builds and triggers) wait after exactly these grants, and again whenever one is replaced.
resource "time_sleep" "iam_propagation" {
  create_duration = "${var.iam_propagation_seconds}s"
  triggers = {
    build_account = module.build.service_account_id
    event_source  = module.profiles.event_source
    agent_roles   = join(" ", [for grant in google_project_iam_member.service_agents : grant.id])
  }
  depends_on = [google_project_service.enabled]
}

module "function" {
  source             = "./modules/function"
  for_each           = local.functions
  project_id         = var.project_id
  region             = var.region
  prefix             = var.prefix
  name               = each.key
  description        = each.value.description
  service_account_id = each.value.service_account_id
  source_root        = local.source_root
  requirements       = concat(local.runtime_requirements, each.value.extra_requirements)
  build = {
    sources_bucket     = module.build.sources_bucket
    service_account_id = module.build.service_account_id
    docker_repository  = module.build.docker_repository
  }
  resources        = local.function_resources[each.key]
  environment      = merge(local.environment, each.value.extra_environment, each.key == "control_plane" ? local.sdk_environment : {})
  ingress_settings = each.value.trigger == "http" ? var.control_plane.ingress : "ALLOW_INTERNAL_ONLY"
  invoker_members  = each.value.trigger == "http" ? local.api_invokers : []
  storage_trigger = each.value.trigger == "storage" ? {
    bucket = module.profiles.event_source
    region = lower(local.bucket_location)
  } : null
  pubsub_push          = each.value.trigger == "pubsub"
  pubsub_service_agent = local.service_agents.pubsub
  project_roles        = each.value.project_roles
  sign_as_self         = each.value.sign_as_self
  secret_environment   = local.secret_environments[each.key]
  vpc_connector        = each.value.reaches_workloads ? var.workload_vpc_connector : null
  propagation_seconds  = var.iam_propagation_seconds
  labels               = local.labels
  depends_on           = [time_sleep.iam_propagation]
}

module "queue" {
  source      = "./modules/queue"
  for_each    = local.queue_consumers
  project_id  = var.project_id
  topic       = each.key
  name_prefix = local.name_prefix
  consumer = {
    name                 = each.value
    url                  = module.function[each.value].url
    invoker_email        = module.function[each.value].push_invoker_email
    ack_deadline_seconds = module.function[each.value].timeout_seconds
  }
  dead_letter_consumer = {
    name                 = local.dead_letter_recorder
    url                  = module.function[local.dead_letter_recorder].url
    invoker_email        = module.function[local.dead_letter_recorder].push_invoker_email
    ack_deadline_seconds = module.function[local.dead_letter_recorder].timeout_seconds
  }
  dead_letter_suffix   = local.dead_letter_suffix
  unrecorded_topic_id  = google_pubsub_topic.unrecorded_dead_letters.id
  pubsub_service_agent = local.service_agents.pubsub
  publishers = merge(
    {
      for name, function in local.functions : name => module.function[name].service_account_member
      if contains(function.publishes_to, each.key)
    },
    each.key == local.maintenance_ticks ? { scheduler = "serviceAccount:${local.service_agents.scheduler}" } : {},
  )
  delivery   = merge(var.delivery, { max_delivery_attempts = local.delivery_attempts[each.key] })
  labels     = local.labels
  depends_on = [google_project_service.enabled]
}

# A tick a minute drives the maintenance function (settling sessions, a stuck outbox).
resource "google_cloud_scheduler_job" "maintenance" {
  project     = var.project_id
  region      = var.region
  name        = "${var.prefix}-maintenance"
  description = "Ticks the mldiag maintenance function."
  schedule    = var.maintenance_schedule
  time_zone   = "Etc/UTC"

  pubsub_target {
    topic_name = module.queue[local.maintenance_ticks].topic_id
    data       = base64encode("{}")
  }

  depends_on = [google_project_service.enabled]
}

# Dead letters the recorder itself could not take (it failed max_delivery_attempts times)
# wait here, for the longest retention Pub/Sub offers, for an operator:
#   gcloud pubsub subscriptions pull unrecorded-dead-letters-hold --limit 10
resource "google_pubsub_topic" "unrecorded_dead_letters" {
  # checkov:skip=CKV_GCP_83:Queue messages are work items (ids and object paths), not profile data; Google-managed encryption applies. CMEK covers the profiles bucket.
  project                    = var.project_id
  name                       = "${local.name_prefix}${local.unrecorded_dead_letters}"
  message_retention_duration = "2678400s"
  labels                     = local.labels
  depends_on                 = [google_project_service.enabled]
}

resource "google_pubsub_subscription" "unrecorded_dead_letters" {
  project                    = var.project_id
  name                       = "${local.name_prefix}${local.unrecorded_dead_letters}-hold"
  topic                      = google_pubsub_topic.unrecorded_dead_letters.id
  message_retention_duration = "2678400s"
  ack_deadline_seconds       = 600
  labels                     = local.labels

  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_topic_iam_member" "unrecorded_dead_letters" {
  project = var.project_id
  topic   = google_pubsub_topic.unrecorded_dead_letters.name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${local.service_agents.pubsub}"
}

module "xprof_viewer" {
  source          = "./modules/xprof-viewer"
  count           = var.xprof_viewer == null ? 0 : 1
  project_id      = var.project_id
  region          = var.region
  prefix          = var.prefix
  image           = var.xprof_viewer.image
  bucket          = module.profiles.name
  logdir          = local.profiles_path
  ingress         = var.xprof_viewer.ingress
  invoker_members = var.xprof_viewer.invoker_members
  cpu             = var.xprof_viewer.cpu
  memory          = var.xprof_viewer.memory
  max_instances   = var.xprof_viewer.max_instances
  labels          = local.labels
  depends_on      = [google_project_service.enabled]
}
