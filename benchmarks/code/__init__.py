"""The code's own shape, measured: the way from the command line to the masks."""
