"""REGAL (Paliwal et al. 2020): the per-node Beta head (``head``), its hyperparameters
(``config``, torch-free for the command line), REINFORCE training (``train``) and the
``regal`` method with its search space, corpus and shipped policy (``method``)."""
