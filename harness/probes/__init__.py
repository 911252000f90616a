"""Probes: FLOPs, attention scaling with sequence length (Table 1), parsing F1 (Table 4)."""
