# A production deployment: profiles encrypted with your key and access-logged, the API
# reachable only from the workloads' VPC (so the official SDK, which sends no
# credentials, can call it), captures through a VPC connector, the XProf viewer for an
# engineering group, larger analysis instances, and point-in-time recovery.
#
#   terraform init
#   terraform apply -var-file=production.tfvars

provider "google" {
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
    ingress               = "ALLOW_INTERNAL_ONLY"
    allow_unauthenticated = true
    invoker_members       = var.operators
  }
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
