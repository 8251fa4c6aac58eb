"""What a choice does to accuracy: held-out choices, ablations, per-cell probes of automatic choices."""
