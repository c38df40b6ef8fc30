variable "project_id" {
  description = "Project to deploy mldiag into."
  type        = string
}

variable "region" {
  description = "Region of the deployment, e.g. us-central1."
  type        = string
}

variable "workload_members" {
  description = "Identities the workloads and their node agents run as, e.g. serviceAccount:trainer@P.iam.gserviceaccount.com."
  type        = list(string)
  default     = []
}

variable "operators" {
  description = "Members who use the CLI against the API, e.g. group:ml-platform@example.com."
  type        = list(string)
  default     = []
}

variable "ingress" {
  description = "The API's ingress: ALLOW_ALL (every caller still needs an ID token) or ALLOW_INTERNAL_ONLY (callers inside the project's VPC only)."
  type        = string
  default     = "ALLOW_ALL"
}
