# The files of a function's source archive: every file of `functions/<name>/` and of the
# `mldiag` library that matches var.source_patterns, less the library's host packages
# (var.host_packages), which no function imports. tests/unit/terraform evaluates this
# selection and checks it against the import closure of every function's main.py.
# Locals only, so Terraform evaluates it without any provider.

locals {
  function_dir = "${var.source_root}/functions/${var.name}"
  library_dir  = "${var.source_root}/shared/mldiag"

  function_files = merge([
    for pattern in var.source_patterns : { for file in fileset(local.function_dir, pattern) : file => "${local.function_dir}/${file}" }
  ]...)
  library_files = merge([
    for pattern in var.source_patterns : {
      for file in fileset(local.library_dir, pattern) : "mldiag/${file}" => "${local.library_dir}/${file}"
      if !contains(var.host_packages, split("/", file)[0])
    }
  ]...)
}
