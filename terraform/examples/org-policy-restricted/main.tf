# A deployment for an organisation whose policy refuses public principals (domain-restricted
# sharing, constraints/iam.allowedPolicyMemberDomains): nothing is granted to the public, so
# every call to the API carries a Google ID token minted for its URL. Operators use the CLI
# with their own token; workloads reach the API through the node agent (`mldiag agent`),
# which holds the node's credentials (see README.md).
#
#   terraform init
#   terraform apply -var project_id=my-project -var region=us-central1 \
#     -var 'workload_members=["serviceAccount:trainer@my-project.iam.gserviceaccount.com"]' \
#     -var 'operators=["group:ml-platform@example.com"]'

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

  control_plane = {
    ingress               = var.ingress
    invoker_members       = var.operators
    allow_unauthenticated = false
  }
  # roles/run.invoker on the API and object create/read on the profiles bucket.
  workload_members = var.workload_members
}
