"""The HTTP client of the control plane's API, shared by the CLI, the node agent and the demo."""
