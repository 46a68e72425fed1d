"""Training role: seven RLVR objectives on TRL 0.29 GRPOTrainer (`python -m train --help`)."""
