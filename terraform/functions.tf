# The mldiag functions: what each one is, how it is triggered, what it may touch, and how
# big it runs by default (override with var.function_resources).
#
# trigger: "http" (the API, behind IAM), "storage" (Eventarc, object finalize on the
# profiles bucket) or "pubsub" (push subscriptions from the topics in queue_consumers, and
# for the recorder every dead-letter topic). The code's side of the same contract is
# mldiag.config.TOPIC_SUBSCRIBERS and mldiag.config.BUCKET_TRIGGERED.
# Every function also reads and writes the Firestore database and archives the events it
# handles in the profiles bucket.

locals {
  # The runtime dependencies of `mldiag` (pyproject.toml [project].dependencies, kept equal
  # by tests/unit/terraform); the build installs them from the generated requirements.txt.
  runtime_requirements = [
    "pydantic>=2.6",
    "pydantic-core>=2.16",
    "typer>=0.12",
    "rich>=13.7",
    "pyyaml>=6.0",
    "structlog>=24.1",
    "jinja2>=3.1",
    "cloudevents>=1.10",
    "functions-framework>=3.5",
    "flask>=3.0",
    "werkzeug>=3.0",
    "cheroot>=10.0",
    "waitress>=3.0",
    "watchdog>=4.0",
    "google-auth>=2.30",
    "cachecontrol>=0.14",
    "requests>=2.31",
    "urllib3>=2.0",
    "grpcio>=1.51",
    "google-api-core>=2.15",
    "google-cloud-firestore>=2.16",
    "google-cloud-pubsub>=2.21",
    "google-cloud-bigquery>=3.20",
    "google-cloud-storage>=2.16",
    "xprof>=2.24",
    "protobuf>=4.25",
    "opentelemetry-proto>=1.24",
    "numpy>=1.26",
    "cryptography>=42",
  ]

  functions = {
    control_plane = {
      description        = "mldiag API: runs, targets, sessions, captures and share links (the SDK's DIAGON_BASE_URL)."
      service_account_id = "api"
      trigger            = "http"
      resources          = { memory = "1Gi", cpu = "1", timeout_seconds = 60, concurrency = 80, max_instances = 20 }
      # Deletes runs with their profiles; signs share links to reports.
      bucket_roles       = ["roles/storage.objectUser"]
      publishes_to       = ["analysis-requests", "capture-requests", "monitoring-alerts"]
      project_roles      = []
      sign_as_self       = true
      reaches_workloads  = false
      extra_requirements = []
      extra_environment = {
        # ID tokens are minted for this URL (Cloud Run's deterministic one, see main.tf), or carry
        # an audience Cloud Run also admits when it checks the invoker role in front of the code.
        MLDIAG_AUTH_AUDIENCE        = local.control_plane_url
        MLDIAG_AUTH_OTHER_AUDIENCES = join(",", var.control_plane.allow_unauthenticated ? [] : var.control_plane.other_audiences)
      }
    }
    register_session = {
      description        = "Registers profile files as they land in the bucket and queues each settled session for analysis."
      service_account_id = "register"
      trigger            = "storage"
      resources          = { memory = "512Mi", cpu = "1", timeout_seconds = 120, concurrency = 20, max_instances = 50 }
      bucket_roles       = ["roles/storage.objectViewer", "roles/storage.objectCreator"]
      publishes_to       = ["analysis-requests"]
      project_roles      = []
      sign_as_self       = false
      reaches_workloads  = false
      extra_requirements = []
      extra_environment  = {}
    }
    analyze_session = {
      description        = "Runs the XProf tools over a session and writes summary.html and analysis.json next to it."
      service_account_id = "analyze"
      trigger            = "pubsub"
      # Profiles are converted in memory: size for the largest session expected (up to
      # 32Gi with 8 vCPUs); beyond that or beyond 10 minutes, see "Huge profiles" in README.md.
      # A large profile's time slices are converted on every vCPU (var.analysis_cpu).
      # The timeout stays under the 600 s push ack deadline so a slow run is not redelivered.
      resources          = { memory = "8Gi", cpu = tostring(var.analysis_cpu), timeout_seconds = 540, concurrency = 1, max_instances = 10 }
      bucket_roles       = ["roles/storage.objectUser"]
      publishes_to       = ["analysis-events", "host-analysis-requests"]
      project_roles      = ["roles/aiplatform.user"]
      sign_as_self       = true # the report's share link in the analysis.v1.completed notification
      reaches_workloads  = false
      extra_requirements = ["google-genai>=1.0"]
      # google-genai reads these to reach Gemini on Vertex AI in this project.
      extra_environment = {
        GOOGLE_GENAI_USE_VERTEXAI = "true"
        GOOGLE_CLOUD_PROJECT      = var.project_id
        GOOGLE_CLOUD_LOCATION     = var.vertex_location
        MLDIAG_VERTEX_MODEL       = var.vertex_model
      }
    }
    analyze_host = {
      description        = "Analyses one host file of a multi-host session and writes its evidence next to the session; the last host asks for the merge."
      service_account_id = "analyze-host"
      trigger            = "pubsub"
      # One host file (100 MB - 1 GB on TPU pods) per instance: size for the largest host file, as
      # analyze_session is sized for the largest session it analyses whole. max_instances is how many
      # hosts of a session run at once: a session of more hosts takes rounds.
      resources          = { memory = "8Gi", cpu = tostring(var.analysis_cpu), timeout_seconds = 540, concurrency = 1, max_instances = 64 }
      bucket_roles       = ["roles/storage.objectUser"]
      publishes_to       = ["analysis-requests"] # the merge, from the last host to finish
      project_roles      = []
      sign_as_self       = false
      reaches_workloads  = false
      extra_requirements = []
      extra_environment  = {}
    }
    dispatch_capture = {
      description        = "Asks a workload's profiler server (:9999) for an on-demand trace or a continuous-profiling snapshot."
      service_account_id = "capture"
      trigger            = "pubsub"
      # A snapshot returns the profiler's whole buffer (about 2 GB on TPU hosts).
      resources    = { memory = "4Gi", cpu = "2", timeout_seconds = 300, concurrency = 1, max_instances = 20 }
      bucket_roles = ["roles/storage.objectViewer", "roles/storage.objectCreator"]
      # The last capture of a session requests its analysis.
      publishes_to       = ["analysis-requests"]
      project_roles      = []
      sign_as_self       = false
      reaches_workloads  = true
      extra_requirements = []
      extra_environment  = {}
    }
    on_alert = {
      description        = "Turns degradation alerts into captures, with per-run cooldown and storm control."
      service_account_id = "alert"
      trigger            = "pubsub"
      resources          = { memory = "512Mi", cpu = "1", timeout_seconds = 60, concurrency = 20, max_instances = 10 }
      bucket_roles       = ["roles/storage.objectCreator"]
      publishes_to       = ["analysis-events", "capture-requests"]
      project_roles      = []
      sign_as_self       = false
      reaches_workloads  = false
      extra_requirements = []
      extra_environment  = {}
    }
    record_dead_letter = {
      description        = "Records every message that exhausted its retries, with the reason, for `mldiag events dead-letters`."
      service_account_id = "deadletter"
      trigger            = "pubsub"
      resources          = { memory = "512Mi", cpu = "1", timeout_seconds = 60, concurrency = 20, max_instances = 5 }
      bucket_roles       = ["roles/storage.objectCreator"]
      publishes_to       = ["analysis-events", "analysis-requests"] # a dead analysis request ends its analysis; a dead host request may ask for the merge
      project_roles      = []
      sign_as_self       = false
      reaches_workloads  = false
      extra_requirements = []
      extra_environment  = {}
    }
    maintenance = {
      description        = "Housekeeping on every Cloud Scheduler tick: settles sessions, reconciles the bucket, republishes a stuck outbox."
      service_account_id = "maintenance"
      trigger            = "pubsub"
      # One tick at a time: overlapping runs would only contend for the same documents.
      resources          = { memory = "512Mi", cpu = "1", timeout_seconds = 120, concurrency = 1, max_instances = 1 }
      bucket_roles       = ["roles/storage.objectViewer", "roles/storage.objectCreator"] # viewer: reconciliation lists it
      publishes_to       = ["analysis-events", "analysis-requests", "capture-requests", "host-analysis-requests", "monitoring-alerts"]
      project_roles      = []
      sign_as_self       = false
      reaches_workloads  = false
      extra_requirements = []
      extra_environment  = {}
    }
    deliver_notifications = {
      description        = "Sends finished analyses and monitored events' changes to the webhook, Slack and PagerDuty."
      service_account_id = "notify"
      trigger            = "pubsub"
      resources          = { memory = "512Mi", cpu = "1", timeout_seconds = 60, concurrency = 20, max_instances = 5 }
      bucket_roles       = ["roles/storage.objectCreator"]
      publishes_to       = []
      project_roles      = []
      sign_as_self       = false
      reaches_workloads  = false
      extra_requirements = []
      extra_environment = {
        MLDIAG_NOTIFY_WEBHOOK_URL  = var.notifications.webhook_url
        MLDIAG_NOTIFY_WEBHOOK_MODE = var.notifications.webhook_mode
      }
    }
  }

  # The deployment's default notification secrets, read from Secret Manager by deliver_notifications.
  notification_secrets = {
    for name, secret in {
      MLDIAG_NOTIFY_WEBHOOK_SECRET        = var.notifications.webhook_secret_id
      MLDIAG_NOTIFY_SLACK_URL             = var.notifications.slack_url_secret_id
      MLDIAG_NOTIFY_PAGERDUTY_ROUTING_KEY = var.notifications.pagerduty_routing_key_secret_id
    } : name => secret if secret != ""
  }
  # The key runs' own notification secrets are stored encrypted under: set by the API, read by the delivery.
  notification_key_readers = ["control_plane", "deliver_notifications"]
  notification_key = var.notifications.encryption_key_secret_id == "" ? {} : {
    MLDIAG_NOTIFY_ENCRYPTION_KEY = var.notifications.encryption_key_secret_id
  }
  # The environment variables each function reads from Secret Manager.
  secret_environments = {
    for name in keys(local.functions) : name => merge(
      name == "deliver_notifications" ? local.notification_secrets : {},
      contains(local.notification_key_readers, name) ? local.notification_key : {},
    )
  }

  # The sizes each function deploys with: its defaults above, overridden field by field.
  function_resources = {
    for name, function in local.functions : name => merge(
      function.resources,
      { for field, value in try(var.function_resources[name], {}) : field => value if value != null },
    )
  }

  # Each work topic (mldiag.config.TOPICS) and the function that consumes it.
  queue_consumers = {
    "analysis-requests"      = "analyze_session"
    "host-analysis-requests" = "analyze_host"
    "capture-requests"       = "dispatch_capture"
    "monitoring-alerts"      = "on_alert"
    "maintenance-ticks"      = "maintenance"
    "analysis-events"        = "deliver_notifications"
  }
  # Pub/Sub counts a 429 (every instance of the consumer busy) as a delivery attempt, so a
  # burst of work for a consumer that takes one message per instance for minutes would
  # dead-letter what waits longest (the 11th analysis of a burst after about 2.5 minutes).
  # Each work topic's subscription therefore retries for at least as long as its consumer
  # takes to work through `burst_rounds` full rounds of its instances (analysis: 10 x 540 s), and
  # never fewer than var.delivery.max_delivery_attempts times. The functions' own count of
  # failures they ran into (MLDIAG_MAX_DELIVERY_ATTEMPTS) is not raised by this.
  burst_rounds    = 10
  minimum_backoff = tonumber(trimsuffix(var.delivery.minimum_backoff, "s"))
  maximum_backoff = tonumber(trimsuffix(var.delivery.maximum_backoff, "s"))
  delivery_attempts = {
    for topic, consumer in local.queue_consumers : topic => min(100, max(
      var.delivery.max_delivery_attempts,
      # retries whose backoffs so far add up to less than the burst window, plus the first delivery
      1 + length([
        for retry in range(99) : retry
        if sum(concat([0], [for step in range(retry) : min(local.minimum_backoff * pow(2, step), local.maximum_backoff)])) <
        local.burst_rounds * local.function_resources[consumer].timeout_seconds
      ]),
    ))
  }

  dead_letter_recorder = "record_dead_letter"
  maintenance_ticks    = "maintenance-ticks"
}
