variable "project_id" {
  description = "Project that runs the function."
  type        = string
}

variable "region" {
  description = "Region of the function."
  type        = string
}

variable "prefix" {
  description = "Prefix of the function and service account names."
  type        = string
}

variable "name" {
  description = "Directory under `functions/`, which is also the Python entry point defined in its main.py."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9_]*$", var.name))
    error_message = "name must be a lowercase Python identifier (it is the entry point)."
  }
}

variable "description" {
  description = "What the function does."
  type        = string
}

variable "service_account_id" {
  description = "Short id of the function's service accounts: `<prefix>-<id>`, and `-trigger`/`-push` for its invokers."
  type        = string
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,10}[a-z0-9]$", var.service_account_id))
    error_message = "service_account_id is 3-12 lowercase letters, digits or '-'."
  }
}

variable "source_root" {
  description = "Repository root, holding `functions/` and `shared/mldiag/`."
  type        = string
}

variable "source_patterns" {
  description = "File patterns packaged from the function directory and the library (text files only: they are read with file())."
  type        = list(string)
  default     = ["**/*.py", "**/*.html", "**/*.j2", "**/*.css", "**/*.js", "**/*.svg", "**/*.sql", "**/*.json", "**/py.typed"]
}

variable "host_packages" {
  description = "Subpackages of `mldiag` left out of the archive: those that run only on hosts (the node agent, the CLI and its API client, `mldiag up` and the demo), which no function imports."
  type        = list(string)
  default     = ["agent", "cli", "client", "local"]
}

variable "requirements" {
  description = "Lines of the generated requirements.txt."
  type        = list(string)
}

variable "build" {
  description = "Where and as whom the source is built: the bucket that holds the archives, the build service account (`projects/P/serviceAccounts/EMAIL`) and the Artifact Registry repository (`projects/P/locations/L/repositories/R`)."
  type = object({
    sources_bucket     = string
    service_account_id = string
    docker_repository  = string
  })
}

variable "resources" {
  description = "Instance size and scaling: memory (\"512Mi\", \"8Gi\"), vCPUs, request timeout, concurrent requests per instance and the instance cap (the minimum is always 0)."
  type = object({
    memory          = string
    cpu             = string
    timeout_seconds = number
    concurrency     = number
    max_instances   = number
  })
  validation {
    condition     = can(regex("^[0-9]+(Mi|Gi|M|G)$", var.resources.memory))
    error_message = "resources.memory is a quantity like \"512Mi\" or \"8Gi\"."
  }
  validation {
    condition     = var.resources.timeout_seconds >= 1 && var.resources.timeout_seconds <= 3600
    error_message = "resources.timeout_seconds must be between 1 and 3600."
  }
  validation {
    condition     = var.resources.concurrency >= 1 && var.resources.concurrency <= 1000 && (var.resources.concurrency == 1 || tonumber(var.resources.cpu) >= 1)
    error_message = "resources.concurrency must be 1-1000, and above 1 needs at least 1 vCPU."
  }
}

variable "environment" {
  description = "Environment variables of the running function."
  type        = map(string)
  default     = {}
}

variable "secret_environment" {
  description = "Environment variables read from Secret Manager when an instance starts: variable name => secret id (in this project; its latest version)."
  type        = map(string)
  default     = {}
}

variable "ingress_settings" {
  description = "Where requests may come from: ALLOW_ALL, ALLOW_INTERNAL_ONLY or ALLOW_INTERNAL_AND_GCLB. Pub/Sub push and Eventarc in the same project count as internal."
  type        = string
  default     = "ALLOW_INTERNAL_ONLY"
  validation {
    condition     = contains(["ALLOW_ALL", "ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB"], var.ingress_settings)
    error_message = "ingress_settings must be ALLOW_ALL, ALLOW_INTERNAL_ONLY or ALLOW_INTERNAL_AND_GCLB."
  }
}

variable "vpc_connector" {
  description = "Serverless VPC Access connector for egress (`projects/P/locations/L/connectors/C`) and which traffic uses it; null for none."
  type = object({
    name            = string
    egress_settings = optional(string, "PRIVATE_RANGES_ONLY")
  })
  default = null
  validation {
    condition     = var.vpc_connector == null || contains(["PRIVATE_RANGES_ONLY", "ALL_TRAFFIC"], try(var.vpc_connector.egress_settings, ""))
    error_message = "vpc_connector.egress_settings must be PRIVATE_RANGES_ONLY or ALL_TRAFFIC."
  }
}

variable "storage_trigger" {
  description = "Invoke the function through Eventarc on object finalize in `bucket`; `region` is the bucket's location in lower case. Null for none."
  type = object({
    bucket = string
    region = string
  })
  default = null
}

variable "pubsub_push" {
  description = "Create the service account whose OIDC token Pub/Sub push subscriptions present to this function."
  type        = bool
  default     = false
}

variable "pubsub_service_agent" {
  description = "Email of the project's Pub/Sub service agent (mints the push and trigger accounts' tokens); needed with pubsub_push or storage_trigger."
  type        = string
  default     = null
  validation {
    condition     = (!var.pubsub_push && var.storage_trigger == null) || var.pubsub_service_agent != null
    error_message = "pubsub_service_agent is needed with pubsub_push or storage_trigger."
  }
}

variable "invoker_members" {
  description = "Further members allowed to call the function (roles/run.invoker on its service)."
  type        = list(string)
  default     = []
}

variable "project_roles" {
  description = "Roles the function's account needs that have no narrower resource to be granted on."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for role in var.project_roles : !contains(["roles/owner", "roles/editor", "roles/viewer"], role)])
    error_message = "Primitive roles (owner, editor, viewer) are not allowed."
  }
}

variable "sign_as_self" {
  description = "Let the function sign blobs as its own account (V4 signed URLs)."
  type        = bool
  default     = false
}

variable "propagation_seconds" {
  description = "How long the storage trigger waits after its account's grants, which nothing can observe taking effect."
  type        = number
  default     = 60
  validation {
    condition     = var.propagation_seconds >= 0
    error_message = "propagation_seconds must not be negative."
  }
}

variable "labels" {
  description = "Labels on the function."
  type        = map(string)
  default     = {}
}
