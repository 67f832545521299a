"""Multi-chip partitioning (Xie et al. 2022): GO's network with a chiplet head
(``chiplet``), the methods ``mcm``, ``mcm-one`` and ``mcm-finetune`` with their
environment and CP-SAT repair (``method``), pre-training (``train``), and the pipeline
task's split ``mcm`` (``pipeline``)."""
