"""GO (Zhou et al. 2020): the policy network (``policy``: GraphSAGE + segment-recurrent
attention, one head per task), its environment (``env``: a problem's inputs, plans and
rewards), the methods ``go``, ``go-one`` and ``go-finetune`` (``method``) and
pre-training (``train``), trained by the PPO of :mod:`graphopt.rl.ppo`."""
