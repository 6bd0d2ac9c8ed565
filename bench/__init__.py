"""StoreTorrent benchmarks: StoreTorrent and its physical baselines measured
side by side in one run, on the same records (paper section 6)."""
