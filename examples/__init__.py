"""Example topologies, each a module with a ``topology()`` function for ``kstorm run``."""
