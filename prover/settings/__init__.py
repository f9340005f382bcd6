"""The config's helpers around the schema (``prover.config``) and its loader (``prover.config_load``): YAML
read with bounds and duplicate keys refused (``yaml_files``) and numbers that are numbers
(``strict_numbers``), on the ground floor, importing no more than the ground floor; the config as text
(``config_text``) and a dotted override typed by the field it fills (``config_overrides``), on the registry
floor, which may import the schema, the registry and ``prover.plugin_config``; and the checks of a loaded
config that span sections (``config_checks``), on the assembly floor, which may import the parts it resolves
by name (the envs, ``prover.learning.modeling``, ``prover.episodes.turn_prompts``). See
docs/architecture.md, "Floors".
"""
