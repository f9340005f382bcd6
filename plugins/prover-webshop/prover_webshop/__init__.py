"""prover-webshop: WebShop on its real data files, registered only through the ``prover.envs`` entry point."""

from prover_webshop.env import WebshopEnv

__all__ = ["WebshopEnv"]
