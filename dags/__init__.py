"""Schedule and wiring files, shipped inside the wheel so a deployment can point its scheduler's
folder at the installed copy (docs/deployment.md)."""
