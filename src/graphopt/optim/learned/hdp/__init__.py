"""The hierarchical placer (Mirhoseini et al. 2018): the feed-forward grouper
(``grouper``) and the ``hdp`` method that trains it jointly with an LSTM placer by
REINFORCE (``method``)."""
