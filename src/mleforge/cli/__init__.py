"""The `mleforge` command line."""
