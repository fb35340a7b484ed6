"""GRPO for factrl: advantages, policy/KL losses (verl ``core_algos`` parity) and the local trainer."""
