"""What prover asks of the machine it runs on: files written whole or not at all (``files``), the stop flag
an ending command reaches (``stopping``), network calls bounded as a whole and stoppable (``httpio``), what a
run's numbers depend on besides its config: versions, CPU, threads, GPUs (``environment``), torch's CPU
threads for a policy's width (``threads``), the host memory free to take (``memory``), and ranks and merged
metrics under ``accelerate launch`` (``distributed``). Every module here stands on the ground floor
(docs/architecture.md, "Floors"), so it may import only the ground floor: ``prover.errors``,
``prover.types``, this package and the other ground modules, never the schema or anything above it.
"""
