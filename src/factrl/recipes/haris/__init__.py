"""HARIS's recipes: its params (``params``), the parts of a round shared by the local trainer and verl
(``rounds``: prompts, rollouts, rewards), pseudo-label synthesis (``synthesize``), the training stages
of a round (``train``: one :func:`~factrl.recipes.haris.train.run_train` for both agents), and the
verl forms of its agents (``verl_loops``: agent loops, tools, rewards; ``verl_rounds``: a round's run
on verl)."""
