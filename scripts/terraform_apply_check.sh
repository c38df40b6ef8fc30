#!/usr/bin/env bash
# What only a real project shows, checked: one `terraform apply` of an example on a fresh
# project converges (a second plan has nothing to do), and the documented paths work: an
# operator calls the API with their own gcloud identity, and the node agent's ConfigMap
# names the API's URL and audience.
#
#   scripts/terraform_apply_check.sh PROJECT REGION [EXAMPLE] [--destroy]
#
# PROJECT: a new project with billing, which you own (gcloud auth login and
# gcloud auth application-default login as that person). EXAMPLE: a directory under
# terraform/examples that needs only project_id and region (default: minimal). It
# makes the caller an operator (control_plane.invoker_members) only where the example
# takes `operators` (elsewhere a project owner may invoke it already). With --destroy,
# `terraform destroy` runs at the end; the Firestore database, protected from deletion, is
# left in place: delete the project to remove everything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

[[ $# -ge 2 ]] || { sed -n '2,15p' "${BASH_SOURCE[0]}" >&2; exit 2; }
project=$1 region=$2 example=${3:-minimal} destroy=${4:-}
directory=terraform/examples/$example
[[ -d $directory ]] || { echo "no example $directory" >&2; exit 2; }
me=$(gcloud config get-value account 2>/dev/null)
variables=(-var "project_id=$project" -var "region=$region")
grep -q 'variable "operators"' "$directory/variables.tf" && variables+=(-var "operators=[\"user:$me\"]")

step() { printf '\n=== %s\n' "$*"; }
fail() { printf 'apply check: %s\n' "$*" >&2; exit 1; }

step "terraform init and one apply of $directory on $project"
terraform -chdir="$directory" init -input=false
terraform -chdir="$directory" apply -input=false -auto-approve "${variables[@]}" ||
    fail "the first apply failed: note the resource and the error above"

step "a second plan must have nothing to do (exit code 0 of -detailed-exitcode)"
status=0
terraform -chdir="$directory" plan -input=false -detailed-exitcode "${variables[@]}" || status=$?
[[ $status == 0 ]] || fail "the first apply did not converge (plan exit code $status): see the plan above"

step "the API answers an operator's own gcloud identity token"
url=$(terraform -chdir="$directory" output -raw control_plane_url)
token=$(gcloud auth print-identity-token)
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" "$url/v1alpha/status")
[[ $code == 200 ]] || fail "GET $url/v1alpha/status with your own ID token answered $code"

step "the node agent's ConfigMap names the API's URL as its URL and audience"
configmap=$(terraform -chdir="$directory" output -raw agent_configmap)
grep -q "MLDIAG_API_URL: \"$url\"" <<<"$configmap" && grep -q "MLDIAG_AUTH_AUDIENCE: \"$url\"" <<<"$configmap" ||
    fail "agent_configmap does not name $url: $configmap"

if [[ $destroy == --destroy ]]; then
    step "destroy"
    terraform -chdir="$directory" destroy -input=false -auto-approve "${variables[@]}"
fi
echo "apply check passed on $project ($example)"
