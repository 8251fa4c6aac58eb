"""The code's own behaviour, measured: the way from the command line to the masks, and whether committed
records re-run to the same masks."""
