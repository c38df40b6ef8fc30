variable "project_id" {
  description = "Project to deploy mldiag into."
  type        = string
}

variable "region" {
  description = "Region of the deployment, e.g. us-central1."
  type        = string
}
