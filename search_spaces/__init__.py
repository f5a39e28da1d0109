"""Search-space YAML files shipped with precision-hpo (``default.yaml`` drives the demo)."""
