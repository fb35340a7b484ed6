"""The agents: loops and rollouts (loop, rollout), tools, HARIS's protocol and registry, the
baselines, M2R's and MARCH's agents, SC-MAKS's debate and the systems registry."""
