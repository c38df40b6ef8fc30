# One provider minor series, the one the offline schema check verifies (google 6.50); commit
# the .terraform.lock.hcl that `terraform init` writes, so every apply uses the same builds.
terraform {
  required_version = ">= 1.9"
  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.50"
    }
    # google_project_service_identity (the just-in-time service agents) is in beta only.
    google-beta = {
      source  = "hashicorp/google-beta"
      version = "~> 6.50"
    }
    archive = {
      source  = "hashicorp/archive"
      version = "~> 2.4"
    }
    time = {
      source  = "hashicorp/time"
      version = "~> 0.9"
    }
  }
}
