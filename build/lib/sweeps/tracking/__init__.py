"""MLflow glue: the client helpers, the Tune callback that writes every run, the parent run, the server."""
