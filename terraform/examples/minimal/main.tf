# The smallest deployment: everything at its defaults, no XProf viewer.
#
#   terraform init
#   terraform apply -var project_id=my-project -var region=us-central1

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
}
