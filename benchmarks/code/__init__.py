"""The code's own behaviour, measured: its shape, the models it covers, and whether committed records re-run."""
