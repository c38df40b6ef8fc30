variable "project_id" {
  description = "Project to deploy mldiag into (one instance serves every run in the project)."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a project id: 6-30 lowercase letters, digits or '-', starting with a letter."
  }
}

variable "region" {
  description = "Region of the functions, queues' consumers, image repository and (by default) the bucket and Firestore."
  type        = string
  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]+$", var.region))
    error_message = "region must be a Google Cloud region such as us-central1."
  }
}

variable "prefix" {
  description = "Prefix of function, service account, bucket and scheduler job names, of the Firestore database's default id, and (`<prefix>-`, unless it is the default) of the Pub/Sub topics and subscriptions, so several deployments can share a project."
  type        = string
  default     = "mldiag"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,10}[a-z0-9]$", var.prefix))
    error_message = "prefix is 2-12 lowercase letters, digits or '-' (service account ids are limited to 30 characters)."
  }
}

variable "labels" {
  description = "Labels added to every resource that takes labels (`app = mldiag` is always set)."
  type        = map(string)
  default     = {}
  validation {
    condition     = alltrue([for key, value in var.labels : can(regex("^[a-z][a-z0-9_-]{0,62}$", key)) && can(regex("^[a-z0-9_-]{0,63}$", value))])
    error_message = "Label keys start with a lowercase letter; keys and values use lowercase letters, digits, '_' and '-' (63 characters at most)."
  }
}

# --- profiles bucket --------------------------------------------------------------------------

variable "bucket_name" {
  description = "Profiles bucket name; null for `<project_id>-<prefix>-profiles`."
  type        = string
  default     = null
  validation {
    condition     = var.bucket_name == null || can(regex("^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be a valid bucket name: 3-63 lowercase letters, digits, '-', '_' or '.'."
  }
}

variable "bucket_location" {
  description = "Profiles bucket location; null for the region. A multi-region also works (the finalize trigger follows it)."
  type        = string
  default     = null
}

variable "profiles_prefix" {
  description = "Folder in the bucket under which workloads write runs (their `gcs_path`), and which the XProf viewer lists."
  type        = string
  default     = "profiles"
  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$", var.profiles_prefix))
    error_message = "profiles_prefix is a relative folder path without leading or trailing '/'."
  }
}

variable "bucket_lifecycle_rules" {
  description = "Lifecycle rules of the profiles bucket. The default moves objects to Nearline after 30 days, deletes them after a year, and deletes noncurrent versions after 7 days."
  type = list(object({
    action = object({
      type          = string
      storage_class = optional(string)
    })
    condition = object({
      age                        = optional(number)
      matches_prefix             = optional(list(string))
      matches_storage_class      = optional(list(string))
      with_state                 = optional(string)
      num_newer_versions         = optional(number)
      days_since_noncurrent_time = optional(number)
    })
  }))
  default = [
    {
      action    = { type = "SetStorageClass", storage_class = "NEARLINE" }
      condition = { age = 30, matches_storage_class = ["STANDARD"] }
    },
    {
      action    = { type = "Delete" }
      condition = { age = 365 }
    },
    {
      action    = { type = "Delete" }
      condition = { days_since_noncurrent_time = 7, with_state = "ARCHIVED" }
    },
    {
      action    = { type = "AbortIncompleteMultipartUpload" }
      condition = { age = 1 }
    },
  ]
}

variable "bucket_versioning" {
  description = "Keep overwritten and deleted profiles as noncurrent versions (the default lifecycle deletes them after 7 days)."
  type        = bool
  default     = false
}

variable "kms_key_name" {
  description = "Cloud KMS key that encrypts the profiles bucket (CMEK), `projects/P/locations/L/keyRings/R/cryptoKeys/K`, in the bucket's location; null for Google-managed keys."
  type        = string
  default     = null
  validation {
    condition     = var.kms_key_name == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.kms_key_name))
    error_message = "kms_key_name must look like projects/P/locations/L/keyRings/R/cryptoKeys/K."
  }
}

variable "access_log_bucket" {
  description = "Bucket that receives usage logs of the profiles bucket; null for none."
  type        = string
  default     = null
}

variable "soft_delete_retention_days" {
  description = "Days deleted profiles stay restorable (0 turns soft delete off; otherwise 7 to 90)."
  type        = number
  default     = 7
  validation {
    condition     = var.soft_delete_retention_days == 0 || (var.soft_delete_retention_days >= 7 && var.soft_delete_retention_days <= 90)
    error_message = "soft_delete_retention_days must be 0 or between 7 and 90."
  }
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete the profiles bucket with everything in it."
  type        = bool
  default     = false
}

# --- state and queues ------------------------------------------------------------------------

variable "firestore" {
  description = "The Firestore database: id (`MLDIAG_FIRESTORE_DATABASE`; null for `prefix`), location (null for the region; nam5/eur3 for multi-region), deletion protection and point-in-time recovery."
  type = object({
    name                   = optional(string)
    location_id            = optional(string)
    deletion_protection    = optional(bool, true)
    point_in_time_recovery = optional(bool, false)
  })
  default = {}
}

variable "fleet" {
  description = "The fleet view's BigQuery table (docs/fleet.md): on by default; the dataset id (`MLDIAG_FLEET_DATASET`; null for `<prefix>_fleet`, '-' as '_'), its location (null for the region; US or EU for multi-region), a CMEK key in that location, how many days a day's partition is kept (null: kept) and deletion protection (on: destroy leaves the table and its rows)."
  type = object({
    enabled                   = optional(bool, true)
    dataset_id                = optional(string)
    location                  = optional(string)
    kms_key_name              = optional(string)
    partition_expiration_days = optional(number)
    deletion_protection       = optional(bool, true)
  })
  default  = {}
  nullable = false
  validation {
    condition     = var.fleet.dataset_id == null || try(length(var.fleet.dataset_id) <= 1024 && can(regex("^[A-Za-z_][A-Za-z0-9_]*$", var.fleet.dataset_id)), false)
    error_message = "fleet.dataset_id is letters, digits and '_', starting with a letter or '_' (at most 1024)."
  }
  validation {
    condition     = var.fleet.partition_expiration_days == null || try(var.fleet.partition_expiration_days >= 1 && floor(var.fleet.partition_expiration_days) == var.fleet.partition_expiration_days, false)
    error_message = "fleet.partition_expiration_days is a whole number of days, at least 1, or null to keep every partition."
  }
  validation {
    condition     = var.fleet.kms_key_name == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.fleet.kms_key_name))
    error_message = "fleet.kms_key_name must look like projects/P/locations/L/keyRings/R/cryptoKeys/K."
  }
}

variable "delivery" {
  description = "Queue delivery: attempts before a message goes to its dead-letter topic (5-100; also MLDIAG_MAX_DELIVERY_ATTEMPTS), exponential backoff bounds and message retention."
  type = object({
    max_delivery_attempts = optional(number, 5)
    minimum_backoff       = optional(string, "10s")
    maximum_backoff       = optional(string, "600s")
    message_retention     = optional(string, "604800s")
  })
  default = {}
  validation {
    condition     = var.delivery.max_delivery_attempts >= 5 && var.delivery.max_delivery_attempts <= 100
    error_message = "Pub/Sub accepts max_delivery_attempts between 5 and 100."
  }
}

variable "event_retention_days" {
  description = "Days the event archive keeps each handled event (MLDIAG_EVENT_RETENTION_DAYS; Firestore's TTL on `expireAt` deletes it after)."
  type        = number
  default     = 30
  validation {
    condition     = var.event_retention_days > 0
    error_message = "event_retention_days must be positive."
  }
}

variable "iam_propagation_seconds" {
  description = "How long the first builds and the storage trigger wait after the grants they need, which nothing can observe taking effect. Raise it if a first apply is refused with a permission error that a second apply does not see."
  type        = number
  default     = 60
  validation {
    condition     = var.iam_propagation_seconds >= 30 && var.iam_propagation_seconds <= 600
    error_message = "iam_propagation_seconds must be between 30 and 600."
  }
}

variable "maintenance_schedule" {
  description = "Cron schedule (UTC) of the maintenance ticks; settling sessions waits for the next tick."
  type        = string
  default     = "* * * * *"
  validation {
    condition     = length(split(" ", trimspace(var.maintenance_schedule))) == 5
    error_message = "maintenance_schedule is a five-field cron expression, such as \"* * * * *\"."
  }
}

# --- functions -------------------------------------------------------------------------------

variable "function_resources" {
  description = "Per-function overrides of the sizes in functions.tf, `{function = {memory, cpu, timeout_seconds, concurrency, max_instances}}`; unset fields keep their default."
  type = map(object({
    memory          = optional(string)
    cpu             = optional(string)
    timeout_seconds = optional(number)
    concurrency     = optional(number)
    max_instances   = optional(number)
  }))
  default = {}
  validation {
    condition     = alltrue([for name in keys(var.function_resources) : contains(keys(local.functions), name)])
    error_message = "function_resources keys must be mldiag functions: control_plane, register_session, analyze_session, analyze_host, dispatch_capture, on_alert, maintenance, record_dead_letter."
  }
  validation {
    condition = alltrue([
      for name, resources in var.function_resources :
      coalesce(resources.timeout_seconds, 1) >= 1 &&
      coalesce(resources.timeout_seconds, 1) <= (try(local.functions[name].trigger, "") == "http" ? 3600 : 540)
    ])
    error_message = "function_resources timeout_seconds: event-triggered functions run at most 540 s (the API at most 3600 s)."
  }
}

variable "analysis_cpu" {
  description = "vCPUs of each analyze_session and analyze_host instance: 1, 2, 4, 6 or 8 (Cloud Run's sizes). A large profile's time slices are converted by one process per vCPU, so more vCPUs finish it sooner; the raw-event read and the analyst run on one. Cloud Run asks for 2Gi of memory with 4 vCPUs and 4Gi with 6 or 8. `function_resources` still sizes either function on its own."
  type        = number
  default     = 4
  validation {
    condition     = contains([1, 2, 4, 6, 8], var.analysis_cpu)
    error_message = "analysis_cpu must be 1, 2, 4, 6 or 8 (the vCPUs a Cloud Run function may have)."
  }
}

variable "control_plane" {
  description = "Who reaches the API: ingress (ALLOW_ALL, ALLOW_INTERNAL_ONLY, ALLOW_INTERNAL_AND_GCLB), members granted roles/run.invoker, whether to admit unauthenticated callers (the official SDK sends no credentials; allowed only with ALLOW_INTERNAL_ONLY or a secret), and the ID token audiences accepted besides the API's URL while Cloud Run checks the invoker role (by default the gcloud CLI's OAuth client: a person's own `gcloud auth print-identity-token`; ignored with allow_unauthenticated)."
  type = object({
    ingress               = optional(string, "ALLOW_ALL")
    invoker_members       = optional(list(string), [])
    allow_unauthenticated = optional(bool, false)
    other_audiences       = optional(list(string), ["32555940559.apps.googleusercontent.com"])
  })
  default = {}
  validation {
    condition     = contains(["ALLOW_ALL", "ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB"], var.control_plane.ingress)
    error_message = "control_plane.ingress must be ALLOW_ALL, ALLOW_INTERNAL_ONLY or ALLOW_INTERNAL_AND_GCLB."
  }
  validation {
    condition     = !var.control_plane.allow_unauthenticated || var.control_plane.ingress == "ALLOW_INTERNAL_ONLY" || var.sdk_secret != "" || var.alert_token != ""
    error_message = "control_plane.allow_unauthenticated needs ingress ALLOW_INTERNAL_ONLY (a load balancer would put it on the internet), or sdk_secret or alert_token (callers without an ID token then reach the SDK's routes through /sdk/<secret>, and the alert webhooks with the alert token, only): an open API must not face the internet."
  }
}

variable "notifications" {
  description = "The deployment's default destinations for notifications (a run may set its own: `mldiag machine-learning-run set-notifications`): a webhook URL and its mode (`binary` or `structured` CloudEvents), and the Secret Manager secret ids (in this project) holding the webhook's signing secret, the Slack incoming-webhook URL and the PagerDuty routing key, and the secret id of the key runs' own notification secrets are stored encrypted under (any random string of 32 bytes or more; without it a run cannot be given a secret). Empty: none."
  type = object({
    webhook_url                     = optional(string, "")
    webhook_mode                    = optional(string, "binary")
    webhook_secret_id               = optional(string, "")
    slack_url_secret_id             = optional(string, "")
    pagerduty_routing_key_secret_id = optional(string, "")
    encryption_key_secret_id        = optional(string, "")
  })
  default = {}
  validation {
    condition     = contains(["binary", "structured"], var.notifications.webhook_mode)
    error_message = "notifications.webhook_mode must be binary or structured."
  }
  validation {
    condition     = var.notifications.webhook_url == "" || var.notifications.webhook_secret_id != ""
    error_message = "notifications.webhook_url needs notifications.webhook_secret_id: every webhook request is signed."
  }
}

variable "sdk_secret" {
  description = "MLDIAG_SDK_SECRET: workloads without an ID token call the API at `<control_plane_url>/sdk/<secret>` (output `sdk_base_url`); needs `control_plane.allow_unauthenticated`. Empty: no capability URL, workloads go through the node agent (`mldiag agent --sdk-port`). 32 or more of A-Z a-z 0-9 _ -, e.g. `openssl rand -hex 32`."
  type        = string
  default     = ""
  sensitive   = true
  validation {
    condition     = can(regex("^([A-Za-z0-9_-]{32,})?$", var.sdk_secret))
    error_message = "sdk_secret must be empty or 32 or more of A-Z a-z 0-9 _ - (e.g. openssl rand -hex 32)."
  }
}

variable "alert_token" {
  description = "MLDIAG_ALERT_TOKEN: what Alertmanager, Grafana and Cloud Monitoring webhooks send to `<control_plane_url>/v1alpha/alerts:*` (bearer token, or basic-auth password); they carry no ID token, so it needs `control_plane.allow_unauthenticated`. Empty: the alert webhooks are closed. 32 or more of A-Z a-z 0-9 _ -, e.g. `openssl rand -hex 32`."
  type        = string
  default     = ""
  sensitive   = true
  validation {
    condition     = can(regex("^([A-Za-z0-9_-]{32,})?$", var.alert_token))
    error_message = "alert_token must be empty or 32 or more of A-Z a-z 0-9 _ - (e.g. openssl rand -hex 32)."
  }
}

variable "workload_members" {
  description = "Identities of the ML workloads (e.g. `serviceAccount:trainer@P.iam.gserviceaccount.com`): they may call the API and create and read objects under `profiles_prefix` in the profiles bucket."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for member in var.workload_members : can(regex("^(serviceAccount|user|group|domain|principal|principalSet):", member))])
    error_message = "workload_members are IAM members such as serviceAccount:EMAIL or principalSet://...; allUsers and allAuthenticatedUsers are not allowed."
  }
}

variable "workload_vpc_connector" {
  description = "Serverless VPC Access connector through which dispatch_capture reaches the workloads' profiler servers (port 9999); null when targets are reachable without one or a node agent captures."
  type = object({
    name            = string
    egress_settings = optional(string, "PRIVATE_RANGES_ONLY")
  })
  default = null
  validation {
    condition     = var.workload_vpc_connector == null || can(regex("^projects/[^/]+/locations/[^/]+/connectors/[^/]+$", try(var.workload_vpc_connector.name, "")))
    error_message = "workload_vpc_connector.name must be projects/P/locations/L/connectors/C."
  }
}

variable "vertex_model" {
  description = "Gemini model the analysis reasons with (MLDIAG_VERTEX_MODEL). Vertex AI retires each stable model on a published date, after which calls 404 and every analysis falls back to the offline reasoner: pick one the \"Model versions and lifecycle\" page lists as current in vertex_location, and move on before its retirement date."
  type        = string
  default     = "gemini-2.5-flash"
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.@-]*$", var.vertex_model))
    error_message = "vertex_model is a Vertex AI model id such as gemini-2.5-flash."
  }
}

variable "vertex_location" {
  description = "Vertex AI location of the Gemini model the analysis uses (`global` or a region)."
  type        = string
  default     = "global"
  validation {
    condition     = var.vertex_location == "global" || can(regex("^[a-z]+-[a-z]+[0-9]+$", var.vertex_location))
    error_message = "vertex_location is \"global\" or a region such as us-central1."
  }
}

# --- viewer ----------------------------------------------------------------------------------

variable "xprof_viewer" {
  description = "The XProf viewer service: its image (built from modules/xprof-viewer/image), who may open it, ingress and size, and the URL browsers reach it at when a front signs people in (an IAP-protected load balancer; empty: the dashboard links go to `gcloud run services proxy` on localhost, see output xprof_viewer_proxy_command). Null deploys no viewer (dashboard links are then left empty)."
  type = object({
    image           = string
    invoker_members = optional(list(string), [])
    browser_url     = optional(string, "")
    ingress         = optional(string, "INGRESS_TRAFFIC_ALL")
    cpu             = optional(string, "2")
    memory          = optional(string, "4Gi")
    max_instances   = optional(number, 3)
  })
  default = null
  validation {
    condition     = var.xprof_viewer == null || contains(["INGRESS_TRAFFIC_ALL", "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"], try(var.xprof_viewer.ingress, ""))
    error_message = "xprof_viewer.ingress must be INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  }
  validation {
    condition     = var.xprof_viewer == null || can(regex("^(https?://[^/?#]+)?$", try(var.xprof_viewer.browser_url, "")))
    error_message = "xprof_viewer.browser_url is empty or a URL's scheme and host (https://viewer.example.com), with no path."
  }
}
