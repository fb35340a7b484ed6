"""SC-MAKS's consensus: debate features (features), the reward model (reward_model), the PPO-trained
aggregator (aggregator) and their params (params)."""
