"""The commands of ``prover`` (``prover/cli.py`` parses them) that are more than a call into the trainer:
``prover list`` (``listing``), ``prover view`` (``view``, with ``svgchart``, which also draws the SVG
figures of ``prover bench`` and the docs), ``prover serve`` (``serve``, ``serve_checks``), ``prover
serve-env`` (``serve_env``, ``serve_env_guard``, ``openenv_bridge``) and ``prover new`` (``scaffold``,
``scaffold_templates``, ``scaffold_plugin_templates``). They stand on the commands floor, the top, and may
import any floor; ``svgchart`` stands on the ground floor and imports nothing of prover's
(docs/architecture.md, "Floors").
"""
